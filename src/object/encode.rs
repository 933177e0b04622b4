//! A [`Snapshot`] as the events.k8s.io/v1 Event the writer sends: valid by construction.

use super::{
    FORMAT, FORMAT_ANNOTATION, KEY_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SOURCES_ANNOTATION,
    STATE_LABEL, WATERMARK_ANNOTATION, WRITTEN_AT_ANNOTATION, encode_sources, name_of,
};
use crate::intent::Snapshot;
use crate::key::ObjectRef;
use crate::key::fields::note;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

fn object_reference(o: &ObjectRef<&str>) -> ObjectReference {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    ObjectReference {
        api_version: opt(o.api_version),
        kind: opt(o.kind),
        namespace: opt(o.namespace),
        name: opt(o.name),
        uid: opt(o.uid),
        field_path: opt(o.field_path),
        resource_version: None,
    }
}

fn micro(t: DateTime<Utc>) -> MicroTime {
    let ts = Timestamp::new(t.timestamp(), (t.timestamp_subsec_micros() * 1000) as i32)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}

/// The events.k8s.io/v1 Event for a snapshot.
pub fn to_event(s: &Snapshot) -> Event {
    let key = s.key.view();
    let mapped = key.mapped();
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (STATE_LABEL.to_owned(), s.state.as_str().to_owned()),
        (KEY_LABEL.to_owned(), s.id.to_string()),
    ]);
    let annotations = BTreeMap::from([
        (FORMAT_ANNOTATION.to_owned(), FORMAT.to_string()),
        (WATERMARK_ANNOTATION.to_owned(), s.watermark.to_string()),
        (SOURCES_ANNOTATION.to_owned(), encode_sources(&s.sources)),
        (
            WRITTEN_AT_ANNOTATION.to_owned(),
            s.written_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        ),
    ]);
    Event {
        metadata: ObjectMeta {
            name: Some(name_of(s)),
            namespace: Some(key.namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        event_time: Some(micro(s.first)),
        series: Some(EventSeries {
            count: i32::try_from(s.count).unwrap_or(i32::MAX).max(2),
            last_observed_time: micro(s.last.max(s.first)),
        }),
        regarding: Some(object_reference(&key.regarding)),
        related: key.related.as_ref().map(object_reference),
        action: Some(mapped.action.to_owned()),
        reason: Some(mapped.reason.to_owned()),
        note: Some(note(s.key.note()).to_owned()),
        type_: Some(mapped.type_.to_owned()),
        reporting_instance: Some(mapped.reporting_instance().to_owned()),
        reporting_controller: Some(mapped.reporting_controller.into_owned()),
        ..Default::default()
    }
}
