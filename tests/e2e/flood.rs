//! A tenant's 1 MB messages (core/v1 Events have no message limit) on a cluster of its own: the
//! series get exact counts and notes cut to 1,024 bytes, and the operator's peak memory, while
//! watching and after a restart that lists them all, stays within 1.5 times that of the same run
//! with 100-byte messages.

use crate::OPERATOR;
use crate::operator::{count, state, wait_for_within};
use anyhow::{Context, Result, ensure};
use event_series_test_support::cluster::{Dedicated, TestNamespace, client_for, tenant_client};
use event_series_test_support::process::Operator;
use event_series_test_support::raw::{Occurrences, app_container, kubelet};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::path::Path;
use std::time::Duration;

const EVENTS: usize = 300;
const COUNT: i32 = 3;

/// The operator's peak resident memory so far (VmHWM), in KiB.
fn peak_kib(op: &Operator) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", op.pid()))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM")
}

/// Peak memory of an operator watching `EVENTS` raw events with messages of `message` bytes
/// arrive, then of a new one that lists them all at its start; checks the series on the way.
async fn run(kc: &Path, label: &str, message: usize) -> Result<(u64, u64)> {
    let admin = client_for(kc).await?;
    let ns = TestNamespace::new(&admin, &format!("flood_{label}")).await?;
    let other = TestNamespace::new(&admin, &format!("flood_{label}_other")).await?;
    let tenant = tenant_client(&admin, kc, &ns.name, &other.name).await?;
    let args = [
        "--namespace",
        ns.name.as_str(),
        "--finish-after",
        "10m",
        "--series-window",
        "10m",
    ];
    let op = OPERATOR.launch(kc, &format!("flood-{label}"), &args)?;
    let api: Api<CoreEvent> = Api::namespaced(tenant, &ns.name);
    let text = "m".repeat(message);
    for i in 0..EVENTS {
        let pod = format!("pod-{i}");
        let seen = Occurrences::at(COUNT, Timestamp::now());
        let regarding = app_container(&ns.name, &pod, format!("uid-{i}"));
        let ev = kubelet(
            &ns.name,
            &format!("{pod}.raw"),
            regarding,
            "BackOff",
            text.clone(),
            seen,
        );
        api.create(&PostParams::default(), &ev).await?;
    }
    let objs = wait_for_within(
        &admin,
        &ns.name,
        Duration::from_secs(180),
        "one Ongoing series per raw event with its count",
        |objs| {
            objs.len() == EVENTS
                && objs
                    .iter()
                    .all(|e| state(e) == "Ongoing" && count(e) == COUNT as u64)
        },
    )
    .await?;
    let note = message.min(1024);
    ensure!(
        objs.iter()
            .all(|e| e.note.as_ref().map(String::len) == Some(note)),
        "notes of {note} bytes"
    );
    let cut = op.metric("event_series_fields_truncated_total");
    ensure!((cut > 0.0) == (message > 1024), "truncated: {cut}");
    let watching = peak_kib(&op)?;
    op.kill9()?;
    let op = OPERATOR.launch(kc, &format!("flood-{label}-restarted"), &args)?;
    // Ready once rebuilt: every raw event was listed and replayed.
    let restarted = peak_kib(&op)?;
    let objs = wait_for_within(
        &admin,
        &ns.name,
        Duration::from_secs(60),
        "the same series",
        |o| o.len() == EVENTS && o.iter().all(|e| count(e) == COUNT as u64),
    )
    .await?;
    ensure!(objs.len() == EVENTS);
    ensure!(
        op.metric("event_series_recovery_rejected_total{reason=\"key_mismatch\"}") == 0.0,
        "its own objects adopted"
    );
    drop(op);
    other.cleanup().await?;
    ns.cleanup().await?;
    println!(
        "flood {label}: {message}-byte messages, peak {watching} KiB watching, {restarted} KiB after a restart"
    );
    Ok((watching, restarted))
}

/// Input, sizes: 300 events with 1 MB messages cost the operator no more than 1.5 times the
/// memory of 300 with 100-byte messages, watching and after a restart (peak RSS, VmHWM).
#[tokio::test]
async fn one_mb_messages_cost_no_more_memory_than_short_ones() -> Result<()> {
    let cluster = Dedicated::start("flood", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let (short_watch, short_restart) = run(kc, "short", 100).await?;
    let (long_watch, long_restart) = run(kc, "long", 1_000_000).await?;
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    println!(
        "flood: watching {:.2}x, after a restart {:.2}x",
        ratio(long_watch, short_watch),
        ratio(long_restart, short_restart)
    );
    ensure!(
        long_watch * 2 <= short_watch * 3,
        "watching: {long_watch} KiB with 1 MB messages, {short_watch} KiB with 100 bytes"
    );
    ensure!(
        long_restart * 2 <= short_restart * 3,
        "after a restart: {long_restart} KiB with 1 MB messages, {short_restart} KiB with 100 bytes"
    );
    drop(cluster);
    Ok(())
}

/// 60,000 raw events with every field at its limit (a key of about 4.6 KB each once cut, 276
/// MB of keys in all; one occurrence each, so none makes a write) beside a quiet namespace's loop,
/// with the default budgets (`--max-key-bytes`, `--restart-buffer-bytes`): the operator's peak RSS
/// while watching and after a restart that lists them all stays under the Deployment's 256 MiB
/// limit, and the quiet loop keeps its one series with every occurrence. `EVENT_SERIES_LIMITS_ARGS`
/// adds flags (`--max-key-bytes 1Gi --restart-buffer-bytes 1Gi` shows the run without budgets).
#[tokio::test]
async fn sixty_thousand_events_at_every_limit_stay_under_the_memory_limit() -> Result<()> {
    use event_series_test_support::raw::{at_every_limit, create_all, occurrence_patch};
    const EVENTS: usize = 60_000;
    const LIMIT_KIB: u64 = 256 * 1024;
    let cluster = Dedicated::start("limits", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let admin = client_for(kc).await?;
    let quiet = TestNamespace::new(&admin, "limits_quiet").await?;
    let flood = TestNamespace::new(&admin, "limits_flood").await?;
    let tenant = tenant_client(&admin, kc, &flood.name, &quiet.name).await?;
    let extra = std::env::var("EVENT_SERIES_LIMITS_ARGS").unwrap_or_default();
    let mut args = vec!["--finish-after", "10m", "--series-window", "10m"];
    args.extend(["--heartbeat-interval", "15s"]);
    args.extend(extra.split_whitespace());
    let op = OPERATOR.launch(kc, "limits", &args)?;
    let quiet_api: Api<CoreEvent> = Api::namespaced(admin.clone(), &quiet.name);
    let loop_event = |n: i32| {
        let regarding = app_container(&quiet.name, "web", "uid-web".into());
        let seen = Occurrences::at(n, Timestamp::now());
        kubelet(
            &quiet.name,
            "web.raw",
            regarding,
            "BackOff",
            "Back-off".into(),
            seen,
        )
    };
    quiet_api
        .create(&PostParams::default(), &loop_event(1))
        .await?;
    let occur = |n: i32| {
        let api = quiet_api.clone();
        async move {
            api.patch("web.raw", &Default::default(), &occurrence_patch(n))
                .await
        }
    };
    occur(2).await?;
    let flood_api: Api<CoreEvent> = Api::namespaced(tenant, &flood.name);
    let raws =
        (0..EVENTS).map(|i| at_every_limit(&flood.name, &format!("f{i}.raw"), &format!("f{i}"), 1));
    create_all(&flood_api, raws, 16).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while op.metric("event_series_occurrences_total") < (EVENTS + 2) as f64 {
        ensure!(
            std::time::Instant::now() < deadline,
            "the operator did not see every event"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let watching = peak_kib(&op)?;
    let lone = op.metric("event_series_dropped_total{reason=\"lone\"}");
    occur(3).await?;
    op.kill9()?;
    let op = OPERATOR.launch(kc, "limits-restarted", &args)?;
    let restarted = peak_kib(&op)?;
    let flushes = op.metric("event_series_restart_buffer_flushes_total");
    occur(4).await?;
    println!(
        "{EVENTS} events at every limit: peak {watching} KiB watching ({lone} occurrences given up \
         as lone), {restarted} KiB after a restart ({flushes} early replays of its buffer); \
         the limit {LIMIT_KIB} KiB"
    );
    wait_for_within(
        &admin,
        &quiet.name,
        Duration::from_secs(120),
        "the quiet loop's series at 4",
        |objs| objs.len() == 1 && state(&objs[0]) == "Ongoing" && count(&objs[0]) == 4,
    )
    .await?;
    ensure!(
        watching < LIMIT_KIB && restarted < LIMIT_KIB,
        "peak RSS {watching} KiB watching, {restarted} KiB after a restart: over the limit"
    );
    drop(op);
    // No cleanup of 60,000 events one by one: the cluster, its own, goes with them.
    drop((quiet, flood, cluster));
    Ok(())
}

/// The memory limit of the operator's container in the Deployment `config/default` installs, in KiB.
fn deployment_limit_kib() -> Result<u64> {
    let path = event_series_test_support::repo_root().join("config/manager/deployment.yaml");
    let text = std::fs::read_to_string(&path)?;
    let mut lines = text.lines().skip_while(|l| l.trim() != "limits:");
    let memory = lines
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .with_context(|| format!("no memory limit in {}", path.display()))?
        .trim();
    let mib: u64 = memory
        .strip_suffix("Mi")
        .with_context(|| format!("a memory limit in Mi, not {memory}"))?
        .parse()?;
    Ok(mib * 1024)
}

/// Input, sizes: pages are bounded by bytes, not by counts. One small raw Event in a namespace
/// sorted first, 350 of 1.4 MB in the next; there, too, a small look-alike of a series object
/// sorted before 100 large ones (read by the restore's list of its own objects). An operator
/// starting on them (a restart: every one is listed) stays under the Deployment's memory limit
/// (peak RSS, VmHWM) and counts the small loop. Before, the page after the small Event was sized
/// by it (1 MiB / 1 KB, capped at 500 objects): about 700 MB asked for at once.
#[tokio::test]
async fn one_small_event_before_hundreds_of_large_ones_keeps_a_restart_under_the_memory_limit()
-> Result<()> {
    use event_series_test_support::cluster::ensure_namespace;
    use event_series_test_support::raw::{create_all, kubelet_backoff, operators_own};
    const LARGE: usize = 350;
    const LOOK_ALIKES: usize = 100;
    const MESSAGE: usize = 1_400_000;
    let limit = deployment_limit_kib()?;
    let cluster = Dedicated::start("pages", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let admin = client_for(kc).await?;
    let (first, next) = ("pages-a", "pages-b");
    for ns in [first, next] {
        ensure_namespace(&admin, ns).await?;
    }
    let small: Api<CoreEvent> = Api::namespaced(admin.clone(), first);
    small
        .create(
            &PostParams::default(),
            &kubelet_backoff(first, "web.raw", "web", 2),
        )
        .await?;
    let text = "m".repeat(MESSAGE);
    let large = |i: usize, own: bool| {
        let pod = format!("big-{i:03}");
        let regarding = app_container(next, &pod, format!("uid-{i}"));
        let seen = Occurrences::at(1, Timestamp::now());
        let name = if own {
            format!("own-{i:03}")
        } else {
            format!("{pod}.raw")
        };
        let mut ev = kubelet(next, &name, regarding, "BackOff", text.clone(), seen);
        if own {
            ev.metadata.labels = Some(operators_own());
        }
        ev
    };
    let api: Api<CoreEvent> = Api::namespaced(admin.clone(), next);
    let mut look_alike = kubelet_backoff(next, "a-own", "web", 2);
    look_alike.metadata.labels = Some(operators_own());
    api.create(&PostParams::default(), &look_alike).await?;
    create_all(&api, (0..LOOK_ALIKES).map(|i| large(i, true)), 4).await?;
    create_all(&api, (0..LARGE).map(|i| large(i, false)), 4).await?;
    let op = OPERATOR.launch(kc, &format!("pages-{}", std::process::id()), &[])?;
    wait_for_within(
        &admin,
        first,
        Duration::from_secs(120),
        "the small loop's series",
        |objs| objs.len() == 1 && count(&objs[0]) == 2,
    )
    .await?;
    let peak = peak_kib(&op)?;
    println!(
        "one small event before {LARGE} of {MESSAGE} bytes ({LOOK_ALIKES} large look-alikes): \
         peak {peak} KiB after a restart; the Deployment's limit {limit} KiB"
    );
    ensure!(
        peak < limit,
        "peak RSS {peak} KiB after a restart: over the Deployment's limit of {limit} KiB (log {})",
        op.log.display()
    );
    drop(op);
    drop(cluster);
    Ok(())
}
