//! Raw core/v1 Events as the kubelet's recorder (client-go `tools/record`) writes them: the input the
//! operator folds into series.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use std::collections::BTreeMap;

/// Container `app` of Pod `ns/name` (whose uid is `uid`): what a kubelet event is about.
pub fn app_container(ns: &str, name: &str, uid: String) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid: Some(uid),
        field_path: Some("spec.containers{app}".into()),
        resource_version: None,
    }
}

/// The kubelet's message for a container in back-off.
pub fn backoff_message(ns: &str, pod: &str) -> String {
    format!("Back-off restarting failed container app in pod {pod}_{ns}")
}

/// What a legacy event counts: `count` occurrences, the first at `first`, the last at `last`.
#[derive(Clone, Copy, Debug)]
pub struct Occurrences {
    pub count: i32,
    pub first: Timestamp,
    pub last: Timestamp,
}

impl Occurrences {
    /// `count` occurrences, all at `at` (as a test sees them: at once).
    pub fn at(count: i32, at: Timestamp) -> Occurrences {
        Occurrences {
            count,
            first: at,
            last: at,
        }
    }
}

/// Raw event `ns/name` as the kubelet writes it: `Warning <reason>` with `message` about
/// `regarding`, from component `kubelet` on host `node-1`, counting `seen`.
pub fn kubelet(
    ns: &str,
    name: &str,
    regarding: ObjectReference,
    reason: &str,
    message: String,
    seen: Occurrences,
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        involved_object: regarding,
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some("node-1".into()),
        }),
        count: Some(seen.count),
        first_timestamp: Some(Time(seen.first)),
        last_timestamp: Some(Time(seen.last)),
        ..Default::default()
    }
}

/// The raw event most end-to-end tests start from: raw event `name` in `ns`, a `BackOff` of Pod
/// `pod` counting `count` occurrences up to now.
pub fn kubelet_backoff(ns: &str, name: &str, pod: &str, count: i32) -> Event {
    kubelet(
        ns,
        name,
        app_container(ns, pod, format!("uid-{pod}")),
        "BackOff",
        "Back-off restarting failed container".into(),
        Occurrences::at(count, Timestamp::now()),
    )
}

/// The labels of the operator's own objects, which its watch of raw events leaves out.
pub fn operators_own() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_string(),
        "event-series".to_string(),
    )])
}

/// The merge patch with which a legacy recorder records one more occurrence, now: `count` is the
/// new total (absolute, so that a patch sent twice cannot count twice).
pub fn occurrence_patch(count: impl Into<serde_json::Value>) -> Patch<serde_json::Value> {
    Patch::Merge(occurrence(count))
}

/// The fields a legacy recorder changes for one more occurrence now: `count` and `lastTimestamp`.
pub fn occurrence(count: impl Into<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "count": count.into(),
        "lastTimestamp": Time(Timestamp::now()),
    })
}

/// Pod number `i` of a generated storm, `ns/name`: its container, with a uid made from `i`.
pub fn numbered_pod(ns: &str, name: &str, i: u64) -> ObjectReference {
    app_container(ns, name, format!("00000000-0000-4000-8000-{i:012}"))
}

/// Raw event `name` with every field of its key at (or past) its API limit, about Pod `pod`, counting
/// `count` occurrences now: a key of about 4.6 KB once cut, the most one Event can cost.
pub fn at_every_limit(ns: &str, name: &str, pod: &str, count: i32) -> Event {
    let long = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
    let mut regarding = app_container(ns, &format!("{pod}-{}", long('p', 240)), long('u', 200));
    regarding.api_version = Some(format!("{}/v1", long('g', 400)));
    regarding.kind = Some(long('K', 80));
    regarding.field_path = Some(long('f', 600));
    let mut ev = kubelet(
        ns,
        name,
        regarding.clone(),
        &long('R', 200),
        long('m', 4096),
        Occurrences::at(count, Timestamp::now()),
    );
    ev.related = Some(regarding);
    ev.action = Some(long('A', 200));
    ev.reporting_component = Some(long('c', 600));
    ev.reporting_instance = Some(long('i', 200));
    ev
}

/// Creates every event through `api`, `parallel` requests at a time (a tenant's flood).
pub async fn create_all(
    api: &kube::Api<Event>,
    events: impl IntoIterator<Item = Event>,
    parallel: usize,
) -> kube::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(events)
        .map(|ev| {
            let api = api.clone();
            async move {
                api.create(&kube::api::PostParams::default(), &ev)
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(parallel)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}
