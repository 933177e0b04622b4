//! Raw Events into the engine: each is read as an observation ([`key::normalise()`], where all
//! parsing lives), what reading cut or refused is counted, and the observation is fed to the engine.
//!
//! The controller feeds watched and listed events alike; the only difference is the ingest-lag
//! metric, which only a watched change records: a listed object's occurrences may be arbitrarily
//! old, so its lag measures nothing. A restart's first list is read here too, then buffered
//! ([`crate::input::restart`]).
//!
//! The watch and the lists leave out the operator's own objects by their label, but whoever may
//! update Events in a namespace can strip that label (clusters without the admission policy, or
//! objects written before it): the object would then count its own series' occurrences again. So
//! an event whose name is the one the operator derives from its own fields (the key and the start,
//! [`object::object_name`]) is recognised as a series object whatever its labels, and never
//! counted. Nobody is hurt by a forgery of that name: it can only be a tenant's own event about
//! its own namespace that goes uncounted.
//!
//! The operator's Events about its own trouble ([`crate::operations::reporter`]) are not counted
//! either (by their `reportingController`): reports of trouble never make series, so they never
//! make writes that could be trouble again. A forgery of that controller, too, only leaves the
//! forger's own events uncounted.

use crate::object;
use crate::operations::metrics::Metrics;
use chrono::{DateTime, Utc};
use event_series_core::engine::Engine;
use event_series_core::key::fields::{self, CONTROLLER_LIMIT, LENGTH_LIMIT, NOTE_LIMIT, reference};
use event_series_core::key::{self, Observation};
use k8s_openapi::api::core::v1::{Event, EventSeries, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};

/// How a raw event reached the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// A change delivered by the watch, just now.
    Watched,
    /// An item of a list (a relist after 410 Gone).
    Listed,
}

/// Reads a raw event: one with a field cut to its limit is counted, one that cannot be read is
/// skipped with a log line and counted as a dropped occurrence.
pub fn read<'a>(ev: &'a Event, metrics: &Metrics) -> Option<Observation<'a>> {
    let own_report = |e: &Event| {
        e.reporting_component.as_deref() == Some(crate::operations::reporter::REPORTING_CONTROLLER)
    };
    match key::normalise(ev) {
        Ok(_) if own_report(ev) => None,
        Ok(obs) if is_series_object(ev, &obs) => {
            tracing::debug!(name = ?ev.metadata.name, namespace = ?ev.metadata.namespace,
                "a series object without its labels: not counted");
            None
        }
        Ok(obs) => {
            if obs.truncated {
                metrics.truncated.inc();
            }
            Some(obs)
        }
        Err(e) => {
            tracing::warn!(name = ?ev.metadata.name, namespace = ?ev.metadata.namespace,
                error = %e, "raw event skipped");
            metrics.dropped(e.reason(), 1);
            None
        }
    }
}

/// How much longer than its limit [`slim`] leaves a string: enough for [`key::normalise()`] to
/// still see (and count) the cut, whatever character ends the kept part.
const OVER: usize = 4;

/// Keeps of a raw event only what [`read`] looks at, each string cut to a few bytes over its limit,
/// as soon as it is decoded: what the list and watch hold of a tenant's 1 MB Event (in their
/// channel, in a page being read) is then a few KB, and reading the slim event gives the same
/// observation, cuts included.
pub fn slim(ev: Event) -> Event {
    let cut = |s: Option<String>, max: usize| {
        s.map(|s| match s.len() > max + OVER {
            true => fields::cut(&s, max + OVER).to_owned(),
            false => s,
        })
    };
    let object = |r: ObjectReference| ObjectReference {
        api_version: cut(r.api_version, reference::API_VERSION),
        kind: cut(r.kind, reference::KIND),
        namespace: cut(r.namespace, reference::NAMESPACE),
        name: cut(r.name, reference::NAME),
        uid: cut(r.uid, reference::UID),
        field_path: cut(r.field_path, reference::FIELD_PATH),
        resource_version: None,
    };
    let meta = ev.metadata;
    Event {
        metadata: ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            managed_fields: meta.managed_fields.map(occurrence_writes),
            ..ObjectMeta::default()
        },
        involved_object: object(ev.involved_object),
        related: ev.related.map(object),
        action: cut(ev.action, LENGTH_LIMIT),
        reason: cut(ev.reason, LENGTH_LIMIT),
        type_: cut(ev.type_, LENGTH_LIMIT),
        message: cut(ev.message, NOTE_LIMIT),
        reporting_component: cut(ev.reporting_component, CONTROLLER_LIMIT),
        reporting_instance: cut(ev.reporting_instance, LENGTH_LIMIT),
        source: ev.source.map(|s| EventSource {
            component: cut(s.component, CONTROLLER_LIMIT),
            host: cut(s.host, LENGTH_LIMIT),
        }),
        series: ev.series.map(|s| EventSeries {
            count: s.count,
            last_observed_time: s.last_observed_time,
        }),
        count: ev.count,
        event_time: ev.event_time,
        first_timestamp: ev.first_timestamp,
        last_timestamp: ev.last_timestamp,
    }
}

/// Of the `managedFields` entries, only when each wrote the fields an occurrence writes (what
/// [`key::normalise()`] reads of them).
fn occurrence_writes(entries: Vec<ManagedFieldsEntry>) -> Vec<ManagedFieldsEntry> {
    const FIELDS: [&str; 4] = ["f:count", "f:lastTimestamp", "f:series", "f:eventTime"];
    entries
        .into_iter()
        .filter_map(|m| {
            let owned: serde_json::Map<String, serde_json::Value> = FIELDS
                .iter()
                .filter(|k| m.fields_v1.as_ref().is_some_and(|f| f.0.get(**k).is_some()))
                .map(|k| ((*k).to_owned(), serde_json::json!({})))
                .collect();
            (!owned.is_empty()).then(|| ManagedFieldsEntry {
                time: m.time,
                fields_v1: Some(FieldsV1(serde_json::Value::Object(owned))),
                ..ManagedFieldsEntry::default()
            })
        })
        .collect()
}

/// Whether `ev` carries the name the operator gives the series of its own fields (with the note in
/// the key or not: the policy that applies is not known here). Only events with an `eventTime`
/// (series objects always have one) and a name ending in 16 hex digits are looked at.
fn is_series_object(ev: &Event, obs: &Observation<'_>) -> bool {
    let Some(name) = ev.metadata.name.as_deref() else {
        return false;
    };
    let name = object::split_variant(name).0;
    let hex = name.rsplit_once('.').map_or("", |(_, h)| h);
    let Some(hash) = (ev.event_time.is_some() && hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
    else {
        return false;
    };
    // The hash first, without allocating; the whole name only for a match.
    [None, Some(obs.note)].into_iter().any(|note| {
        let id = obs.key.id(note);
        object::name_hash(id, obs.first) == hash
            && object::object_name(&obs.key, id, obs.first) == name
    })
}

/// Feeds one raw event to the engine. Returns the time of its latest occurrence; `None` when it
/// could not be read.
pub fn feed(
    engine: &mut Engine,
    metrics: &Metrics,
    ev: &Event,
    arrival: Arrival,
) -> Option<DateTime<Utc>> {
    let obs = read(ev, metrics)?;
    let now = Utc::now();
    if arrival == Arrival::Watched {
        metrics.ingest_lag(now, obs.last);
    }
    engine.observe(now, &obs);
    Some(obs.last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::to_event;
    use event_series_core::settings::Settings;
    use k8s_openapi::api::core::v1::EventSeries;
    use k8s_openapi::api::events::v1 as events;

    /// A series object as a core/v1 client reads it (the API server's conversion), with its labels
    /// and annotations stripped by a tenant.
    fn stripped(ev: &events::Event) -> Event {
        let mut meta = ev.metadata.clone();
        meta.labels = None;
        meta.annotations = None;
        Event {
            metadata: meta,
            involved_object: ev.regarding.clone().unwrap_or_default(),
            related: ev.related.clone(),
            reason: ev.reason.clone(),
            message: ev.note.clone(),
            type_: ev.type_.clone(),
            event_time: ev.event_time.clone(),
            series: ev.series.as_ref().map(|s| EventSeries {
                count: Some(s.count),
                last_observed_time: Some(s.last_observed_time.clone()),
            }),
            reporting_component: ev.reporting_controller.clone(),
            reporting_instance: ev.reporting_instance.clone(),
            action: ev.action.clone(),
            ..Default::default()
        }
    }

    fn raw(note: &str) -> Event {
        let now = Utc::now();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0.18eb7109a28050d3", "namespace": "ns", "uid": "u1"},
            "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "ns", "uid": "p1"},
            "reason": "BackOff", "message": note, "type": "Warning",
            "reportingComponent": "kubelet", "reportingInstance": "node-1", "action": "Restart",
            "eventTime": now, "series": {"count": 3, "lastObservedTime": now}
        }))
        .unwrap()
    }

    /// The operator's reports of its own trouble are read but never counted, however they repeat.
    #[test]
    fn the_operators_own_reports_are_not_counted() {
        let metrics = Metrics::default();
        let mut own = raw("3 series names found taken");
        own.reporting_component = Some(crate::operations::reporter::REPORTING_CONTROLLER.into());
        assert!(read(&own, &metrics).is_none());
        assert!(read(&raw("other"), &metrics).is_some());
        let mut engine = Engine::with_settings(Settings::default());
        for n in 2..10 {
            own.series = Some(EventSeries {
                count: Some(n),
                last_observed_time: own
                    .series
                    .as_ref()
                    .and_then(|s| s.last_observed_time.clone()),
            });
            assert_eq!(feed(&mut engine, &metrics, &own, Arrival::Watched), None);
        }
        assert!(engine.take_intents().is_empty());
        // The same Event from anyone else makes a series: the controller is what keeps it out.
        own.reporting_component = Some("someone".into());
        assert!(feed(&mut engine, &metrics, &own, Arrival::Watched).is_some());
        let mut more = own.clone();
        more.series = Some(EventSeries {
            count: Some(12),
            last_observed_time: own
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.clone()),
        });
        more.metadata.resource_version = Some("2".into());
        feed(&mut engine, &metrics, &more, Arrival::Watched);
        assert!(!engine.take_intents().is_empty());
        assert_eq!(
            metrics
                .dropped
                .get_or_create(&crate::operations::metrics::DropLabels {
                    reason: "unreadable".into()
                })
                .get(),
            0
        );
    }

    /// A slim event reads as the event it came from, cuts included, and is small.
    #[test]
    fn a_slim_event_reads_the_same_and_is_small() {
        let metrics = Metrics::default();
        let mut big = raw(&"é".repeat(700_000));
        big.metadata.annotations = Some([("a".to_owned(), "x".repeat(200_000))].into());
        big.metadata.managed_fields = Some(vec![
            serde_json::from_value(serde_json::json!({
                "manager": "kubelet", "operation": "Update", "time": "2026-01-02T03:04:05Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:count": {}, "f:message": {}, "f:lastTimestamp": {}}
            }))
            .unwrap(),
            serde_json::from_value(serde_json::json!({
                "manager": "labeller", "operation": "Update", "time": "2027-01-02T03:04:05Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}
            }))
            .unwrap(),
        ]);
        big.involved_object.field_path = Some("f".repeat(5000));
        big.reporting_component = Some("c".repeat(5000));
        let mut small = raw("short");
        small.series = None;
        small.count = Some(4);
        for ev in [big, small, raw(&"m".repeat(1025))] {
            let thin = slim(ev.clone());
            let (a, b) = (read(&ev, &metrics).unwrap(), read(&thin, &metrics).unwrap());
            assert_eq!(a, b);
            assert!(crate::input::paging::json_size(&thin) < 4096);
        }
    }

    /// a series object whose labels a tenant stripped is not read as a raw event (it would
    /// count its own series' occurrences again), with the note in the key or not; a raw event of
    /// the same fields under its emitter's name is read.
    #[test]
    fn a_series_object_without_its_labels_is_not_counted() {
        let metrics = Metrics::default();
        for include_note in [false, true] {
            let mut engine = Engine::with_settings(Settings {
                include_note,
                ..Settings::default()
            });
            let ev = raw("Back-off restarting failed container");
            let obs = read(&ev, &metrics).expect("the raw event is read");
            engine.observe(Utc::now(), &obs);
            let intent = engine.take_intents().remove(0);
            let object = stripped(&to_event(&intent.series));
            assert!(
                read(&object, &metrics).is_none(),
                "includeNote {include_note}: the stripped series object {:?} was read",
                object.metadata.name
            );
        }
    }
}
