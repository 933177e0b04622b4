//! Occurrences an emitter writes late (Grouping, Output). A recorder held up by a saturated
//! API server writes an occurrence minutes after it happened; the operator, proven current by other
//! emitters' fresh writes, may already have written the occurrence's series Finished. By its own
//! timestamp the occurrence still belongs to that series: it joins it (same object, corrected count),
//! and never stands alone. Found by `just bench-scale` at 20,000 Pods (docs/BENCHMARKS.md, Scale).

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::{DateTime, TimeDelta, Utc};
use event_series::object;
use event_series_core::engine::Engine;
use event_series_core::intent::{FinishCause, Intent, SeriesState, WriteKind};
use event_series_core::key;
use event_series_core::settings::Settings;
use event_series_test_support::sim::*;

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

/// Raw event `web-0` (legacy, one raw object for the whole loop) as its emitter wrote it: `count`
/// occurrences from `first` to `last`, arriving at `arrival`.
fn write(
    engine: &mut Engine,
    count: i32,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    at: DateTime<Utc>,
) {
    let ev = legacy(
        "a",
        "web-0",
        pod("a", "web-0"),
        "FailedCreate",
        count,
        first,
        last,
    );
    engine.observe(at, &key::normalise(&ev).expect("valid raw event"));
}

fn names_and_counts(intents: &[Intent]) -> Vec<(WriteKind, String, u64, SeriesState)> {
    intents
        .iter()
        .map(|i| {
            (
                i.kind,
                object::name_of(&i.series),
                i.series.count,
                i.series.state,
            )
        })
        .collect()
}

/// A loop of two occurrences (t0, t0 + 5), finished at t0 + 25 (`finishAfter` 20 s): the engine
/// that wrote it, the series' name, and t0.
fn finished_then_late(settings: Settings) -> (Engine, String, DateTime<Utc>) {
    let (engine, finish) = finished(settings);
    (engine, object::name_of(&finish.series), t0())
}

fn finished(settings: Settings) -> (Engine, Intent) {
    let t0 = t0();
    let mut engine = Engine::with_settings(settings);
    write(&mut engine, 1, t0, t0, t0);
    write(&mut engine, 2, t0, t0 + secs(5), t0 + secs(5));
    for at in 6..=30 {
        engine.tick(t0 + secs(at));
    }
    let mut written = engine.take_intents();
    let kinds: Vec<_> = written.iter().map(|i| i.kind).collect();
    assert_eq!(
        kinds,
        [WriteKind::Create, WriteKind::Finish(FinishCause::Quiet)]
    );
    let finish = written.pop().expect("the finish");
    assert_eq!(finish.series.count, 2);
    (engine, finish)
}

#[test]
fn an_occurrence_written_late_joins_the_series_it_belongs_to_after_its_finish() {
    let (mut engine, name, t0) = finished_then_late(fast_settings());
    third_written_late(&mut engine, name, t0);
    assert_eq!(engine.stats().series_started, 1, "no second series");
    assert_eq!(engine.stats().series_reopened, 1);
    assert_eq!(engine.stats().lone, 0);
    assert_eq!(engine.active_series(), 0);
}

#[test]
fn a_late_occurrence_joins_the_finished_series_after_a_restart_too() {
    let (_, finish) = finished(fast_settings());
    let (name, t0) = (object::name_of(&finish.series), t0());
    // A new process restores the Finished object, then reads the raw event as it stood then.
    let obj = object::to_event(&finish.series);
    let now = t0 + secs(35);
    let check = object::Check {
        now,
        tolerance: TimeDelta::minutes(10),
    };
    let mut engine = Engine::with_settings(fast_settings());
    engine.begin_recovery();
    engine.restore(now, object::decode(&obj, check).expect("its own object"));
    write(&mut engine, 2, t0, t0 + secs(5), now);
    engine.end_recovery(now, now);
    assert!(engine.take_intents().is_empty(), "nothing to write");
    third_written_late(&mut engine, name, t0);
}

/// The loop's third occurrence, at t0 + 15, arrives at t0 + 40: by t0 + 70 the series `name` is
/// written once more, Finished with every occurrence.
fn third_written_late(engine: &mut Engine, name: String, t0: DateTime<Utc>) {
    write(engine, 3, t0, t0 + secs(15), t0 + secs(40));
    for at in 41..=70 {
        engine.tick(t0 + secs(at));
    }
    let once_more = (
        WriteKind::Finish(FinishCause::Quiet),
        name,
        3,
        SeriesState::Finished,
    );
    assert_eq!(names_and_counts(&engine.take_intents()), [once_more]);
}

/// When `finishAfter` is shorter than `seriesWindow`, an occurrence that happened after the finish
/// was due (by the emitter's clock) is a loop that resumed: a new series (Finish), even
/// though it lies within the window.
#[test]
fn an_occurrence_after_the_finish_was_due_starts_a_new_series() {
    let settings = Settings {
        series_window: secs(60),
        ..fast_settings()
    };
    let (mut engine, name, t0) = finished_then_late(settings);
    // Happened at t0 + 27: 22 s after the last, beyond finishAfter (20 s), within the window.
    write(&mut engine, 3, t0, t0 + secs(27), t0 + secs(40));
    write(&mut engine, 4, t0, t0 + secs(41), t0 + secs(41));
    let written = engine.take_intents();
    assert_eq!(written.len(), 1, "{:?}", names_and_counts(&written));
    assert_eq!(written[0].kind, WriteKind::Create);
    assert_ne!(object::name_of(&written[0].series), name);
    assert_eq!(written[0].series.count, 2);
    assert_eq!(engine.stats().series_reopened, 0);
}

/// A late occurrence joins a finished series once more, and more of them keep it open: the loop
/// was never over, its Finish came early because its emitter lagged. Ongoing again it is written
/// Ongoing at its next refresh, and Finished when it is quiet, always under one name.
#[test]
fn a_lagging_emitter_that_keeps_writing_reopens_the_series_as_ongoing() {
    let (mut engine, name, t0) = finished_then_late(fast_settings());
    // Its writes lag by 25 s: every 5 s from t0 + 10 to t0 + 120.
    let mut count = 2;
    for at in (35..=145).step_by(5) {
        count += 1;
        write(&mut engine, count, t0, t0 + secs(at - 25), t0 + secs(at));
        engine.tick(t0 + secs(at));
    }
    for at in 146..=200 {
        engine.tick(t0 + secs(at));
    }
    let written = names_and_counts(&engine.take_intents());
    assert!(written.iter().all(|w| w.1 == name), "{written:?}");
    assert!(
        written
            .iter()
            .any(|w| w.0 != WriteKind::Create && w.3 == SeriesState::Ongoing),
        "{written:?}"
    );
    let last = written.last().expect("a finish");
    assert_eq!(
        (last.0, last.2, last.3),
        (
            WriteKind::Finish(FinishCause::Quiet),
            count as u64,
            SeriesState::Finished
        )
    );
    assert_eq!(engine.stats().series_started, 1);
}
