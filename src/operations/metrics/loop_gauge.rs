//! `loops{namespace,reason,type,state}`: series by namespace, reason, type and state, the one
//! family with a namespace label. Its label sets are capped: beyond `cap`, the smallest are folded
//! into one set whose labels are all `other` (per state), and how many were folded is exported, so
//! that a cluster of 10^4 namespaces (or a tenant inventing reasons) cannot blow up the scrape.
//!
//! Ongoing: the active series now. Finished: series written Finished within the last event TTL
//! (the objects still stored), counted from the finishes this replica wrote: a new leader starts
//! that count from zero.

use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::engine::Engine;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

/// Label value for what was folded.
pub const OTHER: &str = "other";

/// Most finished series remembered for the Finished rows (beyond it the oldest are forgotten early).
const FINISHED_MEMORY: usize = 50_000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct LoopLabels {
    pub namespace: String,
    pub reason: String,
    #[prometheus(flatten)]
    pub kind: TypeLabel,
    pub state: &'static str,
}

/// `type` is a Rust keyword: its own label set, flattened into [`LoopLabels`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct TypeLabel {
    pub r#type: String,
}

/// What the collector exports: rows swapped in whole at each update, so that a scrape never sees
/// half of one.
#[derive(Debug, Default)]
pub struct LoopRows {
    rows: Mutex<(Vec<(LoopLabels, i64)>, i64)>,
}

impl LoopRows {
    fn set(&self, rows: Vec<(LoopLabels, i64)>, folded: i64) {
        *self.rows.lock().unwrap_or_else(PoisonError::into_inner) = (rows, folded);
    }

    pub fn get(&self) -> (Vec<(LoopLabels, i64)>, i64) {
        self.rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Registered in the `event_series` registry.
#[derive(Debug)]
pub struct LoopCollector(pub Arc<LoopRows>);

impl Collector for LoopCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (rows, folded) = self.0.get();
        let gauge = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(
            "loops",
            "Series by namespace, reason, type and state (Ongoing now; Finished within the last \
             event TTL); beyond --max-loop-label-sets the smallest label sets are summed into one \
             whose labels are `other`",
            None,
            gauge.metric_type(),
        )?;
        for (labels, n) in &rows {
            ConstGauge::new(*n).encode(family.encode_family(labels)?)?;
        }
        let folded_gauge = ConstGauge::new(folded);
        folded_gauge.encode(encoder.encode_descriptor(
            "loop_label_sets_folded",
            "Label sets of `loops` summed into `other` at the last update (refreshed every 10 s)",
            None,
            folded_gauge.metric_type(),
        )?)?;
        Ok(())
    }
}

type Key = (Arc<str>, Arc<str>, Arc<str>);

/// Keeps the `loops` rows: the Finished tally from the finishes written, the Ongoing one from a
/// scan of the engine.
pub struct LoopGauge {
    cap: usize,
    window: TimeDelta,
    finished: VecDeque<(DateTime<Utc>, Key)>,
    finished_counts: HashMap<Key, i64>,
    rows: Arc<LoopRows>,
}

impl LoopGauge {
    pub fn new(cap: usize, window: TimeDelta, rows: Arc<LoopRows>) -> LoopGauge {
        LoopGauge {
            cap,
            window,
            finished: VecDeque::new(),
            finished_counts: HashMap::new(),
            rows,
        }
    }

    /// A series written Finished at `at`.
    pub fn finished(&mut self, namespace: &str, reason: &str, type_: &str, at: DateTime<Utc>) {
        if self.finished.len() >= FINISHED_MEMORY {
            self.expire_one();
        }
        let key: Key = (namespace.into(), reason.into(), type_.into());
        *self.finished_counts.entry(key.clone()).or_insert(0) += 1;
        self.finished.push_back((at, key));
    }

    fn expire_one(&mut self) {
        if let Some((_, key)) = self.finished.pop_front()
            && let Some(n) = self.finished_counts.get_mut(&key)
        {
            *n -= 1;
            if *n <= 0 {
                self.finished_counts.remove(&key);
            }
        }
    }

    /// Recomputes the rows from the engine's active series at `now`.
    pub fn update(&mut self, engine: &Engine, now: DateTime<Utc>) {
        while self
            .finished
            .front()
            .is_some_and(|(at, _)| *at + self.window <= now)
        {
            self.expire_one();
        }
        let mut rows: Vec<(LoopLabels, i64)> = Vec::new();
        let mut owned: HashMap<(String, String, String), i64> = HashMap::new();
        engine.for_each_loop(|v| {
            *owned
                .entry((
                    v.namespace.to_owned(),
                    v.key.reason.to_owned(),
                    v.key.type_.to_owned(),
                ))
                .or_insert(0) += 1;
        });
        rows.extend(
            owned
                .into_iter()
                .map(|((ns, reason, type_), n)| (labels(ns, reason, type_, "Ongoing"), n)),
        );
        rows.extend(self.finished_counts.iter().map(|((ns, reason, type_), n)| {
            (
                labels(
                    ns.to_string(),
                    reason.to_string(),
                    type_.to_string(),
                    "Finished",
                ),
                *n,
            )
        }));
        let (rows, folded) = fold(rows, self.cap);
        self.rows.set(rows, folded as i64);
    }
}

fn labels(namespace: String, reason: String, type_: String, state: &'static str) -> LoopLabels {
    LoopLabels {
        namespace,
        reason,
        kind: TypeLabel { r#type: type_ },
        state,
    }
}

/// The `cap` largest label sets as they are, the rest summed per state into `other`, and how many
/// were summed.
pub fn fold(mut rows: Vec<(LoopLabels, i64)>, cap: usize) -> (Vec<(LoopLabels, i64)>, usize) {
    if rows.len() <= cap {
        rows.sort();
        return (rows, 0);
    }
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rest = rows.split_off(cap);
    let folded = rest.len();
    let mut other: HashMap<&'static str, i64> = HashMap::new();
    for (l, n) in rest {
        *other.entry(l.state).or_insert(0) += n;
    }
    for (state, n) in other {
        rows.push((labels(OTHER.into(), OTHER.into(), OTHER.into(), state), n));
    }
    rows.sort();
    (rows, folded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ns: &str, n: i64, state: &'static str) -> (LoopLabels, i64) {
        (
            labels(ns.into(), "BackOff".into(), "Warning".into(), state),
            n,
        )
    }

    #[test]
    fn beyond_the_cap_the_smallest_label_sets_are_folded_into_other() {
        let rows = vec![
            row("a", 10, "Ongoing"),
            row("b", 1, "Ongoing"),
            row("c", 5, "Ongoing"),
            row("d", 2, "Finished"),
            row("e", 1, "Finished"),
        ];
        let (out, folded) = fold(rows, 2);
        assert_eq!(folded, 3);
        let total: i64 = out.iter().map(|r| r.1).sum();
        assert_eq!(total, 19, "nothing lost in the fold");
        let names: Vec<&str> = out.iter().map(|r| r.0.namespace.as_str()).collect();
        assert_eq!(names, ["a", "c", "other", "other"]);
        assert!(out.len() <= 2 + 2);
        let (same, none) = fold(vec![row("a", 1, "Ongoing")], 2);
        assert_eq!((same.len(), none), (1, 0));
    }

    #[test]
    fn finished_rows_last_one_event_ttl() {
        let rows = Arc::new(LoopRows::default());
        let mut loops = LoopGauge::new(10, TimeDelta::hours(1), rows.clone());
        let t0 = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000);
        let engine = Engine::with_settings(Default::default());
        loops.finished("shop", "BackOff", "Warning", t0);
        loops.finished("shop", "BackOff", "Warning", t0 + TimeDelta::minutes(30));
        loops.update(&engine, t0 + TimeDelta::minutes(59));
        assert_eq!(rows.get().0, vec![row("shop", 2, "Finished")]);
        loops.update(&engine, t0 + TimeDelta::minutes(61));
        assert_eq!(rows.get().0, vec![row("shop", 1, "Finished")]);
        loops.update(&engine, t0 + TimeDelta::minutes(91));
        assert!(rows.get().0.is_empty());
    }
}
