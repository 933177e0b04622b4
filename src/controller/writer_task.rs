//! The writer task as the controller holds it: started before the restore, told to stop, and flushed
//! or abandoned at the end.

use super::channels::{self, ControllerEnds};
use super::{ControllerConfig, Stop};
use crate::leader::WriteFence;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use crate::writer::Writer;
use kube::Client;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// The writer task, aborted if the controller returns early (a stop or an error). Once the restore is
/// over the writer may have requests in flight: aborting it then abandons them, which the fence is
/// told, so that the Lease is left to expire rather than released.
pub(super) struct WriterTask {
    task: Option<JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    fence: WriteFence,
    pub(super) writing: bool,
}

impl WriterTask {
    pub(super) fn start(
        client: &Client,
        config: &ControllerConfig,
        metrics: &Arc<Metrics>,
        health: &Arc<Health>,
        fence: WriteFence,
    ) -> (ControllerEnds, WriterTask) {
        let (to_writer, ends) = channels::channels();
        let writer = Writer::new(
            client.clone(),
            config.writer,
            metrics.clone(),
            fence.clone(),
        )
        .reporting(ends.landed);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let run = writer.run(ends.inputs, stopped, config.drain, health.clone());
        // Stopping before the end of the restore leaves nothing to write: the writer is told at once.
        let task = WriterTask {
            task: Some(tokio::spawn(run)),
            stop: Some(stop),
            fence,
            writing: false,
        };
        (to_writer, task)
    }

    pub(super) fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Flushes what is pending (graceful) or abandons it (leadership lost).
    pub(super) async fn shut_down(mut self, stop: Stop) -> anyhow::Result<Stop> {
        match (stop, self.task.take()) {
            (Stop::Graceful, Some(task)) => {
                tracing::info!("shutting down: flushing pending writes");
                if let Err(e) = task.await {
                    // The writer died (a panic) with whatever it had in flight.
                    self.fence.abandoned();
                    return Err(e.into());
                }
            }
            (_, Some(task)) => task.abort(),
            (_, None) => {}
        }
        Ok(stop)
    }
}

impl Drop for WriterTask {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            if self.writing && !task.is_finished() {
                self.fence.abandoned();
            }
            task.abort();
        }
    }
}
