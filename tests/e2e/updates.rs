//! The writer's updates of series objects on the real apiserver, whose events.k8s.io/v1 validation
//! refuses to change any field but labels, annotations and `series`: an update carries only those,
//! and only into the series' own object.

use crate::operator::{count, start, state, wait_for};
use anyhow::{Context, Result, ensure};
use event_series_test_support::cluster::{TestNamespace, client};
use event_series_test_support::raw::{Occurrences, app_container, kubelet};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, PostParams};

const REJECTED_PATCHES: &str = "event_series_api_requests_total{verb=\"patch\",code=\"422\"}";

/// One occurrence about Pod `web` in a raw object of its own, with its own message, as a
/// controller's recorder writes a FailedCreate whose message names a new Pod each time.
async fn occurrence(api: &Api<CoreEvent>, ns: &str, n: u32, at: Timestamp) -> Result<()> {
    let regarding = app_container(ns, "web", "uid-web".into());
    let message = format!("Error creating: pods \"web-{n}\" is forbidden: exceeded quota");
    let raw = kubelet(
        ns,
        &format!("web.{n}"),
        regarding,
        "BackOff",
        message,
        Occurrences::at(1, at),
    );
    api.create(&PostParams::default(), &raw).await?;
    Ok(())
}

/// An occurrence its emitter wrote only after the series was written Finished, timed within that
/// series, with a message of its own: the series is reopened and written Finished again with the
/// corrected count, its note the one it was created with. Before the writer's updates were limited
/// to what events.k8s.io/v1 lets an update change, that write sent the late occurrence's message
/// as the note and was refused (422 "note: field is immutable"): the object kept count 2 (the
/// scale benchmark's 20,000-Pod step lost 5 keys' late FailedCreates that way).
#[tokio::test]
async fn a_late_occurrence_with_a_message_of_its_own_corrects_the_finished_series() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "late_note").await?;
    let args = ["--finish-after", "6s", "--series-window", "6s"];
    let op = start(&ns.name, &args)?;
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    let t0 = Timestamp::now();
    let at = |s: i64| t0.checked_add(SignedDuration::from_secs(s));
    occurrence(&api, &ns.name, 1, t0).await?;
    occurrence(&api, &ns.name, 2, at(1)?).await?;
    wait_for(&client, &ns.name, "a Finished series of 2", |objs| {
        objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 2
    })
    .await?;
    // Written late: it happened 3 s into the loop, before the series could finish.
    occurrence(&api, &ns.name, 3, at(3)?).await?;
    let objs = wait_for(
        &client,
        &ns.name,
        "the Finished series corrected to 3",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 3,
    )
    .await?;
    let note = objs[0].note.as_deref().unwrap_or_default();
    ensure!(note.contains("web-1"), "the note changed: {note}");
    ensure!(op.metric("event_series_series_reopened_total") == 1.0);
    ensure!(op.metric(REJECTED_PATCHES) == 0.0);
    drop(op);
    ns.cleanup().await
}

/// The series object deleted and an Event created at its name by someone else, a copy of it
/// without the operator's labels and annotations: the series' next write is refused by the
/// update's own test of the labels (422), the other Event is left as it was, and the series moves
/// to its next name with its whole count. (A plain merge patch of the whole object wrote the series
/// into the copy; later, the refusal was final and the series' finish was lost.)
#[tokio::test]
async fn an_event_created_at_a_deleted_series_objects_name_is_not_written_into() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "taken_after_delete").await?;
    let args = ["--finish-after", "8s", "--series-window", "8s"];
    let op = start(&ns.name, &args)?;
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    let t0 = Timestamp::now();
    occurrence(&api, &ns.name, 1, t0).await?;
    occurrence(&api, &ns.name, 2, t0).await?;
    let objs = wait_for(&client, &ns.name, "an Ongoing series of 2", |objs| {
        objs.len() == 1 && count(&objs[0]) == 2
    })
    .await?;
    let series = &objs[0];
    let name = series
        .metadata
        .name
        .clone()
        .context("a named series object")?;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    events.delete(&name, &DeleteParams::default()).await?;
    let copy = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.name.clone()),
            ..Default::default()
        },
        ..series.clone()
    };
    events.create(&PostParams::default(), &copy).await?;
    // The finish comes due 8 s after the last occurrence and is refused.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while op.metric(REJECTED_PATCHES) < 1.0 {
        ensure!(
            std::time::Instant::now() < deadline,
            "the series' finish was never refused"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let after = events.get(&name).await?;
    ensure!(
        after.metadata.labels.unwrap_or_default().is_empty(),
        "the copy was written into"
    );
    ensure!(after.series == copy.series);
    let moved = format!("{name}-1");
    let objs = wait_for(
        &client,
        &ns.name,
        "the series Finished at its next name",
        |objs| {
            objs.iter().any(|e| {
                e.metadata.name.as_deref() == Some(moved.as_str())
                    && state(e) == "Finished"
                    && count(e) == 2
            })
        },
    )
    .await?;
    ensure!(objs.len() == 1, "one series object: {objs:?}");
    ensure!(op.metric("event_series_names_taken_total") == 1.0);
    drop(op);
    ns.cleanup().await
}
