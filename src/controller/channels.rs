//! The two channels between the engine, in the controller, and the writer task: intents out, with
//! back-pressure, and back the reports of creates and heartbeats that landed
//! ([`Engine::written`]), so that heartbeats are timed from when objects were written.

use super::LoopReports;
use crate::operations::metrics::Metrics;
use crate::writer::{Inputs, Observed};
use event_series_core::engine::Engine;
use event_series_core::intent::{Intent, Landed};
use tokio::sync::mpsc::{self, Receiver, Sender};

/// Intents on their way to the writer; when its queue is full, the controller waits here
/// (back-pressure), which holds up the watch rather than growing memory.
const INTENT_CHANNEL: usize = 1024;

/// Reports on their way back: at most `--qps` a second, taken by the controller's loop and while it
/// waits for room in the writer.
const LANDED_CHANNEL: usize = 4096;

/// Objects the leader wrote, on their way to a standby's writer. One that does not fit is dropped:
/// it only spares a write at a hand-over.
const SEEN_CHANNEL: usize = 4096;

/// The controller's ends.
pub struct ControllerEnds {
    intents: Sender<Intent>,
    landed: Receiver<Landed>,
    seen: Sender<Observed>,
}

/// The writer's ends.
pub struct WriterEnds {
    pub inputs: Inputs,
    pub landed: Sender<Landed>,
}

pub fn channels() -> (ControllerEnds, WriterEnds) {
    let (intents, intents_rx) = mpsc::channel(INTENT_CHANNEL);
    let (landed_tx, landed) = mpsc::channel(LANDED_CHANNEL);
    let (seen, seen_rx) = mpsc::channel(SEEN_CHANNEL);
    let ends = WriterEnds {
        inputs: Inputs {
            intents: intents_rx,
            seen: seen_rx,
        },
        landed: landed_tx,
    };
    (
        ControllerEnds {
            intents,
            landed,
            seen,
        },
        ends,
    )
}

impl ControllerEnds {
    /// Hands the engine's intents to the writer, its counters to the metrics, and its finishes to
    /// the loop gauge and the alerts. While the writer has no room, reports are still taken.
    pub async fn forward(
        &mut self,
        engine: &mut Engine,
        metrics: &Metrics,
        reports: &mut LoopReports,
    ) {
        metrics.sync_engine(engine.stats(), engine.active_series());
        for intent in engine.take_intents() {
            tracing::debug!(kind = ?intent.kind, id = %intent.series.id, count = intent.series.count, "intent");
            reports.intent(engine, &intent);
            let permit = loop {
                tokio::select! {
                    permit = self.intents.reserve() => break permit,
                    Some(report) = self.landed.recv() => engine.written(&report),
                }
            };
            // The writer only stops after the controller drops its ends.
            let Ok(permit) = permit else {
                return;
            };
            permit.send(intent);
        }
    }

    /// Tells a standby's writer what the leader wrote.
    pub fn seen(&self, observed: Observed) {
        let _ = self.seen.try_send(observed);
    }

    /// The next report of a write that landed (`None` once the writer is gone).
    pub async fn landed(&mut self) -> Option<Landed> {
        self.landed.recv().await
    }
}
