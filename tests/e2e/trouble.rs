//! The operator explains its own trouble to `kubectl describe`: a tenant takes a series' name, and
//! the policy that governs the namespace gets a Warning Event `NameTaken` naming the namespace and
//! a `Degraded` condition beside `Ready`, True until the quiet period has passed. On a cluster of
//! its own: only an operator watching every namespace writes policy statuses.

use crate::OPERATOR;
use crate::isolation::predicted_name;
use crate::operator::wait_for;
use anyhow::{Result, bail, ensure};
use event_series::config::EventSeriesPolicy;
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, apply_on, client_for, series, tenant_client,
};
use event_series_test_support::raw::{Occurrences, app_container, kubelet};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};

const REPORTING_CONTROLLER: &str = "eventseries.dev/operator";

fn condition(p: &EventSeriesPolicy, type_: &str) -> Option<Condition> {
    let s = p.status.as_ref()?;
    s.conditions.iter().find(|c| c.type_ == type_).cloned()
}

/// Polls the policy until its `Degraded` condition has `status`, for at most `within`.
async fn wait_degraded(
    api: &Api<EventSeriesPolicy>,
    name: &str,
    status: &str,
    within: Duration,
) -> Result<Condition> {
    let deadline = Instant::now() + within;
    loop {
        let p = api.get(name).await?;
        if let Some(c) = condition(&p, "Degraded")
            && c.status == status
        {
            return Ok(c);
        }
        if Instant::now() > deadline {
            bail!("policy {name}: Degraded never {status}: {:?}", p.status);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls the operator's Events regarding policy `name` until `check` holds, for at most 30 s.
async fn wait_reports<F>(
    events: &Api<Event>,
    name: &str,
    what: &str,
    check: F,
) -> Result<Vec<Event>>
where
    F: Fn(&[Event]) -> bool,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = reports(events, name).await?;
        if check(&found) {
            return Ok(found);
        }
        ensure!(Instant::now() < deadline, "{what}: {found:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The operator's Events regarding policy `name` (they live in `default`: a policy is cluster-scoped).
async fn reports(events: &Api<Event>, name: &str) -> Result<Vec<Event>> {
    let all = events.list(&ListParams::default()).await?;
    Ok(all
        .items
        .into_iter()
        .filter(|e| {
            e.reporting_controller.as_deref() == Some(REPORTING_CONTROLLER)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("EventSeriesPolicy")
                        && r.name.as_deref() == Some(name)
                })
        })
        .collect())
}

/// A tenant's Event at a series' name, then the loop about Pod `pod` that makes the series; the
/// name the series takes instead.
async fn take_a_name_and_loop(raw_api: &Api<CoreEvent>, ns: &str, pod: &str) -> Result<String> {
    let start = Timestamp::from_second(Timestamp::now().as_second())?;
    let regarding = app_container(ns, pod, format!("uid-{pod}"));
    let raw = format!("{pod}.raw");
    let event = |count: i32| {
        let at = Occurrences {
            count,
            first: start,
            last: start + Duration::from_secs(u64::try_from(count - 1).unwrap_or(0)),
        };
        kubelet(
            ns,
            &raw,
            regarding.clone(),
            "BackOff",
            "Back-off".into(),
            at,
        )
    };
    let (first, second) = (event(1), event(2));
    let name = predicted_name(&[&first, &second])?;
    let squatter = CoreEvent {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
        involved_object: app_container(ns, "decoy", "uid-decoy".into()),
        reason: Some("Squatting".into()),
        message: Some("created before the series".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    raw_api.create(&PostParams::default(), &squatter).await?;
    raw_api.create(&PostParams::default(), &first).await?;
    let patch =
        serde_json::json!({"count": 2, "lastTimestamp": Time(start + Duration::from_secs(1))});
    raw_api
        .patch(&raw, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(format!("{name}-1"))
}

#[tokio::test]
async fn a_name_taken_is_told_on_the_policy_as_an_event_and_a_degraded_condition() -> Result<()> {
    let cluster = Dedicated::start("trouble", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let admin = client_for(kc).await?;
    let ns = TestNamespace::new(&admin, "trouble").await?;
    let other = TestNamespace::new(&admin, "trouble_other").await?;
    let tenant = tenant_client(&admin, kc, &ns.name, &other.name).await?;
    let name = format!("e2e-{}", ns.name);
    apply_on(
        kc,
        &format!(
            "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: \
             {name}\nspec:\n  namespaceSelector:\n    matchLabels:\n      \
             kubernetes.io/metadata.name: {}\n  finishAfter: 10s\n  seriesWindow: 10s\n",
            ns.name
        ),
        &[],
    )?;
    let quiet = Duration::from_secs(8);
    let args = ["--report-interval", "1s", "--degraded-for", "8s"];
    let op = OPERATOR.launch(kc, &ns.name, &args)?;
    let policies: Api<EventSeriesPolicy> = Api::all(admin.clone());
    let calm = wait_degraded(&policies, &name, "False", Duration::from_secs(30)).await?;
    ensure!(calm.reason == "NoTrouble", "{calm:?}");

    let raw_api: Api<CoreEvent> = Api::namespaced(tenant, &ns.name);
    let renamed = take_a_name_and_loop(&raw_api, &ns.name, "web").await?;
    wait_for(&admin, &ns.name, "the series under its next name", |objs| {
        objs.iter()
            .any(|e| e.metadata.name.as_deref() == Some(renamed.as_str()))
    })
    .await?;
    let degraded = wait_degraded(&policies, &name, "True", Duration::from_secs(30)).await?;
    ensure!(degraded.reason == "NameTaken", "{degraded:?}");
    let p = policies.get(&name).await?;
    let ready = condition(&p, "Ready");
    ensure!(
        ready.as_ref().is_some_and(|c| c.status == "True"),
        "Ready kept beside Degraded: {:?}",
        p.status
    );
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let found = wait_reports(&events, &name, "one Event regards the policy", |found| {
        found.len() == 1
    })
    .await?;
    let report = &found[0];
    ensure!(report.reason.as_deref() == Some("NameTaken"), "{report:?}");
    ensure!(report.type_.as_deref() == Some("Warning"), "{report:?}");
    let note = report.note.clone().unwrap_or_default();
    ensure!(
        note.starts_with("1 series names found taken")
            && note.contains(&format!("namespace {} (1)", ns.name)),
        "{note}"
    );

    // The same trouble again, past the report interval: the same Event, now a series of 2. The
    // operator watches `default` too, and a repeated Event there would make a series object of
    // its own if the operator counted its own reports.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = take_a_name_and_loop(&raw_api, &ns.name, "db").await?;
    wait_for(
        &admin,
        &ns.name,
        "the second series under its next name",
        |objs| {
            objs.iter()
                .any(|e| e.metadata.name.as_deref() == Some(again.as_str()))
        },
    )
    .await?;
    wait_reports(&events, &name, "the Event repeated as a series", |found| {
        found.len() == 1 && found[0].series.as_ref().is_some_and(|s| s.count == 2)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let own = series(&admin, "default").await?;
    ensure!(
        own.is_empty(),
        "the operator counted its own Event: {own:?}"
    );

    // Quiet since: Degraded turns False once the quiet period is over, and nothing more is said.
    let cleared = wait_degraded(&policies, &name, "False", quiet * 3).await?;
    ensure!(cleared.reason == "NoTrouble", "{cleared:?}");
    let all = reports(&events, &name).await?;
    ensure!(
        all.len() == 1 && all[0].series.as_ref().is_some_and(|s| s.count == 2),
        "{all:?}"
    );
    drop(op);
    policies.delete(&name, &DeleteParams::default()).await?;
    other.cleanup().await?;
    ns.cleanup().await
}
