//! A [`Snapshot`] as the events.k8s.io/v1 Event the writer sends: valid by construction.

use super::{
    FORMAT, FORMAT_ANNOTATION, KEY_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SOURCES_ANNOTATION,
    STATE_LABEL, WATERMARK_ANNOTATION, WRITTEN_AT_ANNOTATION, encode_sources, name_of,
};
use chrono::{DateTime, Utc};
use event_series_core::intent::Snapshot;
use event_series_core::key::ObjectRef;
use event_series_core::key::fields::note;
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
    Event {
        metadata: metadata(s),
        event_time: Some(micro(s.first)),
        series: Some(series(s)),
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

/// The JSON patch (RFC 6902) that writes a snapshot into its existing object.
///
/// It changes only labels, annotations and `series`: events.k8s.io/v1 refuses, with 422 "field is
/// immutable", an update that changes any other field (note, eventTime, regarding, ...), and what
/// the engine holds of them may differ from what the object was created with (a series reopened by
/// an occurrence written late carries that occurrence's note). The object keeps the values it was
/// created with.
///
/// It first tests that the object is the series' own (the managed-by and key labels, which the
/// admission policy lets no one else set), so that an Event someone created at the name after the
/// series object was deleted is refused (422), never written into.
pub fn to_update(s: &Snapshot) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, TestOperation};
    let meta = metadata(s);
    let at = |tokens: &[&str]| PointerBuf::from_tokens(tokens.iter().copied());
    let mut ops = Vec::new();
    for label in [MANAGED_BY_LABEL, KEY_LABEL] {
        if let Some(value) = meta.labels.as_ref().and_then(|l| l.get(label)) {
            ops.push(PatchOperation::Test(TestOperation {
                path: at(&["metadata", "labels", label]),
                value: value.as_str().into(),
            }));
        }
    }
    let fields = [("labels", &meta.labels), ("annotations", &meta.annotations)];
    for (field, map) in fields {
        for (name, value) in map.iter().flatten() {
            ops.push(PatchOperation::Add(AddOperation {
                path: at(&["metadata", field, name]),
                value: value.as_str().into(),
            }));
        }
    }
    let series = series(s);
    ops.push(PatchOperation::Add(AddOperation {
        path: at(&["series"]),
        value: serde_json::json!({
            "count": series.count,
            "lastObservedTime": series.last_observed_time,
        }),
    }));
    json_patch::Patch(ops)
}

/// `patch` applied only if the object is still at `version` (its resourceVersion as the writer last
/// knew it): the API server answers 409 Conflict when anyone wrote the object since. (A JSON patch's
/// `test` of the resourceVersion would be refused with 422, like a write into someone else's object;
/// setting it makes the update conditional, like an update that carries it.)
pub fn guarded(patch: json_patch::Patch, version: Option<String>) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{PatchOperation, ReplaceOperation};
    let Some(version) = version else {
        return patch;
    };
    let mut ops = patch.0;
    ops.push(PatchOperation::Replace(ReplaceOperation {
        path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
        value: version.into(),
    }));
    json_patch::Patch(ops)
}

fn metadata(s: &Snapshot) -> ObjectMeta {
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
    ObjectMeta {
        name: Some(name_of(s)),
        namespace: Some(s.key.view().namespace.to_owned()),
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    }
}

fn series(s: &Snapshot) -> EventSeries {
    EventSeries {
        count: i32::try_from(s.count).unwrap_or(i32::MAX).max(2),
        last_observed_time: micro(s.last.max(s.first)),
    }
}
