//! Finishing on complete input (docs/HOW-IT-WORKS.md): the finish waits until the input is proven
//! complete, and in a quiet namespace the completeness probe proves it within seconds.

use crate::operator::{crashloop, start, wait_for, wait_for_within};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use event_series_test_support::cluster::{TestNamespace, client, count, state};
use std::time::Duration;

/// A loop ends in a namespace where nothing else happens, on an API server that sends no bookmarks
/// for events (no watch cache, the default) and a watch that ends only every 300 s. Nothing on the
/// watch proves the input complete, yet the loop is Finished within seconds of its `finishAfter`:
/// the probe (a 1 s watch from the last resourceVersion) proved that no occurrence was in transit.
/// Before the probe it was Finished only when the watch ended, up to 300 s later.
#[tokio::test]
async fn a_loop_in_a_quiet_namespace_finishes_soon_after_finish_after() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "quiet_finish").await?;
    let op = start(
        &ns.name,
        &[
            "--watch-timeout",
            "300s",
            "--finish-after",
            "5s",
            "--series-window",
            "5s",
            "--heartbeat-interval",
            "1h",
            "--first-refresh",
            "0s",
        ],
    )?;
    let truth = crashloop(&ns.name, 1, "5", 6)?;
    let total: u64 = truth.iter().map(|t| t.api_count).sum();
    wait_for(&client, &ns.name, "the loop's series", |o| o.len() == 1).await?;
    // Due at the last occurrence + 5 s; allowed: the tick, a probe in flight, its own 1 s watch,
    // the write. Not allowed: the 300 s watch's end.
    let finished = wait_for_within(
        &client,
        &ns.name,
        Duration::from_secs(60),
        "the series Finished",
        |o| o.len() == 1 && state(&o[0]) == "Finished",
    )
    .await?;
    let seen_finished = Utc::now();
    let obj = &finished[0];
    assert_eq!(count(obj), total, "{truth:?}");
    let last: DateTime<Utc> = obj
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .and_then(|t| DateTime::from_timestamp_micros(t.as_microsecond()))
        .context("series.lastObservedTime")?;
    let late = seen_finished - (last + chrono::TimeDelta::seconds(5));
    println!("Finished {late} after it was due");
    assert!(
        late < chrono::TimeDelta::seconds(20),
        "Finished {late} after its finishAfter ran out"
    );
    assert!(
        op.metric("event_series_watch_probes_total{result=\"quiet\"}") >= 1.0,
        "the proof came from a probe"
    );
    assert_eq!(op.metric("event_series_watch_restarts_total"), 0.0);
    ns.cleanup().await
}
