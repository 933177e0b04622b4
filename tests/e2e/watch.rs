//! The raw-event watch on the real apiserver: list, then watch, own objects excluded.

use event_series::input::watch::{Step, raw_events};
use event_series_test_support::cluster::{TestNamespace, client};
use event_series_test_support::raw::{kubelet_backoff, operators_own};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, PostParams};
use std::time::Duration;

/// A raw event, labelled as one of the operator's own when `managed`.
fn raw(ns: &str, name: &str, managed: bool) -> Event {
    let mut ev = kubelet_backoff(ns, name, "p", 1);
    ev.metadata.labels = managed.then(operators_own);
    ev
}

fn in_ns<'a>(step: &'a Step, ns: &str) -> Option<&'a Event> {
    match step {
        Step::Listed(e) | Step::Applied(e) | Step::Deleted(e)
            if e.metadata.namespace.as_deref() == Some(ns) =>
        {
            Some(e)
        }
        _ => None,
    }
}

#[tokio::test]
async fn lists_then_watches_and_leaves_out_own_objects() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "watch").await?;
    let api: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    for name in ["before-1", "before-2"] {
        api.create(&PostParams::default(), &raw(&ns.name, name, false))
            .await?;
    }
    api.create(&PostParams::default(), &raw(&ns.name, "ours-1", true))
        .await?;

    let pages = event_series::input::paging::PageSize::new(500, 1 << 20);
    let pace = event_series::input::pace::Pace::unpaced();
    let mut steps = Box::pin(raw_events(
        Api::all(client.clone()),
        290,
        true,
        (pages, pace),
    ));
    let mut listed = Vec::new();
    loop {
        let step = tokio::time::timeout(Duration::from_secs(30), steps.next())
            .await?
            .expect("the watch stream does not end");
        if let Some(e) = in_ns(&step, &ns.name) {
            listed.push(e.metadata.name.clone().unwrap_or_default());
        }
        if let Step::ListDone { resource_version } = &step {
            assert!(
                resource_version.parse::<u64>().is_ok(),
                "{resource_version}"
            );
            break;
        }
    }
    listed.sort();
    assert_eq!(listed, ["before-1", "before-2"]);

    api.create(&PostParams::default(), &raw(&ns.name, "ours-2", true))
        .await?;
    api.create(&PostParams::default(), &raw(&ns.name, "after-1", false))
        .await?;
    let applied = loop {
        let step = tokio::time::timeout(Duration::from_secs(30), steps.next())
            .await?
            .expect("the watch stream does not end");
        if let (Step::Applied(_), Some(e)) = (&step, in_ns(&step, &ns.name)) {
            break e.metadata.name.clone().unwrap_or_default();
        }
    };
    assert_eq!(
        applied, "after-1",
        "the operator's own objects never reach it"
    );
    ns.cleanup().await
}
