//! Every loop an alert (docs/ALERTS.md): a real Alertmanager whose receiver is a webhook of the
//! test, so that what is asserted is what a team's pager would get. Each policy here selects only
//! its test's namespace.

use crate::OPERATOR;
use crate::operator::{count, emit, state, wait_for};
use anyhow::{Context, Result, bail, ensure};
use event_series_test_support::alertmanager::{Alertmanager, Webhook};
use event_series_test_support::cluster::{TestNamespace, apply_on, client, kubeconfig, kubectl};
use event_series_test_support::process::Operator;
use std::time::{Duration, Instant};

/// A policy for namespace `ns` only: loops finish 6 s after their last occurrence, and Warning
/// loops of at least three occurrences alert.
fn policy(ns: &str, heartbeat: &str, required: bool) -> Result<String> {
    let name = format!("alerts-{ns}");
    apply_on(
        kubeconfig(),
        &format!(
            "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: {name}\n\
             spec:\n  namespaceSelector:\n    matchLabels: {{kubernetes.io/metadata.name: {ns}}}\n  \
             finishAfter: 6s\n  seriesWindow: 6s\n  firstRefresh: \"0\"\n  heartbeatInterval: {heartbeat}\n  \
             alert:\n    minCount: 3\n    types: [Warning]\n    required: {required}\n"
        ),
        &[],
    )?;
    Ok(name)
}

/// A crash loop of one Pod through client-go's legacy recorder, `count` occurrences a second apart
/// (at most 25: the recorder's spam filter lets 25 through, then one per 5 minutes), in a thread
/// of its own; it returns the occurrences the API server took.
fn crashloop_for(ns: &str, count: u32) -> std::thread::JoinHandle<Result<u64>> {
    crashloop_at(ns, count, "1")
}

/// [`crashloop_for`] at `rate` occurrences a second.
fn crashloop_at(ns: &str, count: u32, rate: &str) -> std::thread::JoinHandle<Result<u64>> {
    let (ns, count, rate) = (ns.to_owned(), count.to_string(), rate.to_owned());
    std::thread::spawn(move || {
        emit(
            &ns,
            &[
                "--scenario",
                "crashloop",
                "--pods",
                "1",
                "--rate",
                &rate,
                "--count",
                &count,
            ],
        )
        .map(|truth| truth.iter().map(|t| t.api_count).sum())
    })
}

fn joined<T>(t: std::thread::JoinHandle<Result<T>>) -> Result<T> {
    match t.join() {
        Ok(r) => r,
        Err(_) => bail!("the emitter thread panicked"),
    }
}

async fn until(what: &str, within: Duration, check: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + within;
    while !check() {
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// `(firing, resolved)` notifications of the namespace's BackOff loop.
fn notified(hook: &Webhook, ns: &str) -> (usize, usize) {
    let alerts = hook.alerts_with(&[("namespace", ns), ("reason", "BackOff")]);
    let firing = alerts.iter().filter(|(s, _)| s == "firing").count();
    (firing, alerts.len() - firing)
}

/// The namespace's one loop Finished with `total` occurrences, and its notifications: one firing,
/// then one resolved.
async fn ends_notified_once(
    client: &kube::Client,
    ns: &str,
    hook: &Webhook,
    total: u64,
) -> Result<()> {
    wait_for(client, ns, "the loop Finished", |o| {
        o.len() == 1 && state(&o[0]) == "Finished" && count(&o[0]) == total
    })
    .await?;
    until("the resolved notification", Duration::from_secs(60), || {
        notified(hook, ns).1 >= 1
    })
    .await?;
    assert_eq!(notified(hook, ns), (1, 1), "{:#?}", hook.notifications());
    Ok(())
}

fn operator(
    ns: &str,
    log: &str,
    am: &Alertmanager,
    resend: &str,
    extra: &[&str],
) -> Result<Operator> {
    let url = am.url();
    let mut args = vec![
        "--namespace",
        ns,
        "--alertmanager-url",
        &url,
        "--alert-resend-interval",
        resend,
    ];
    args.extend_from_slice(extra);
    OPERATOR.launch(kubeconfig(), log, &args)
}

/// A Warning loop raises one firing notification once it has counted minCount occurrences, none
/// again while it is posted again and again (every 5 s for 20 s), and one resolved notification
/// when it is Finished, carrying the final count. A Normal loop beside it, which the policy's
/// `alert.types` leaves out, raises nothing.
#[tokio::test]
async fn a_loop_notifies_once_when_it_starts_and_once_when_it_ends() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "alert_once").await?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start(&hook, &ns.name)?;
    let policy = policy(&ns.name, "1h", false)?;
    let op = operator(&ns.name, &ns.name, &am, "5s", &[])?;
    let normal_ns = ns.name.clone();
    let normal = std::thread::spawn(move || {
        emit(
            &normal_ns,
            &[
                "--scenario",
                "varying",
                "--pods",
                "1",
                "--rate",
                "2",
                "--count",
                "10",
            ],
        )
        .map(drop)
    });
    // 30 s of crash loop: firing 5 to 10 s in (a loop ranks once 5 s old, scans every 5 s), then
    // re-posted every 5 s.
    joined(crashloop_for(&ns.name, 30))?;
    joined(normal)?;
    let finished = wait_for(&client, &ns.name, "both loops Finished", |o| {
        o.len() == 2 && o.iter().all(|e| state(e) == "Finished")
    })
    .await?;
    until("the resolved notification", Duration::from_secs(30), || {
        notified(&hook, &ns.name).1 >= 1
    })
    .await?;
    let backoff = finished
        .iter()
        .find(|e| e.reason.as_deref() == Some("BackOff"))
        .context("the BackOff series")?;
    let alerts = hook.alerts_with(&[("namespace", &ns.name)]);
    println!("notifications: {alerts:#?}");
    assert_eq!(
        notified(&hook, &ns.name),
        (1, 1),
        "one firing, one resolved"
    );
    let (_, resolved) = alerts
        .iter()
        .find(|(s, _)| s == "resolved")
        .context("resolved")?;
    assert_eq!(
        resolved["annotations"]["count"],
        count(backoff).to_string(),
        "the resolved alert carries the final count"
    );
    assert_eq!(resolved["labels"]["alertname"], "KubernetesEventLoop");
    assert_eq!(resolved["labels"]["kind"], "Pod");
    let (_, firing) = alerts
        .iter()
        .find(|(s, _)| s == "firing")
        .context("firing")?;
    let at_firing: u64 = firing["annotations"]["count"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .context("count")?;
    assert!(at_firing >= 3, "fired at count {at_firing}, below minCount");
    assert!(
        alerts
            .iter()
            .all(|(_, a)| a["labels"]["reason"] == "BackOff"),
        "the Normal loop raised nothing"
    );
    let sent = op.metric("event_series_alerts_sent_total{outcome=\"sent\"}");
    assert!(
        sent >= 4.0,
        "posted again and again, yet one notification ({sent} sent)"
    );
    assert_eq!(
        op.metric("event_series_alerts_sent_total{outcome=\"failed\"}"),
        0.0
    );
    kubectl(&["delete", "eventseriespolicy", &policy])?;
    ns.cleanup().await
}

/// The leader is killed mid-loop: the standby rebuilds the loop from its series object and posts the
/// same alert (labels derived from key and start), so Alertmanager holds one alert and the webhook
/// gets no second firing notification; the standby resolves it when the loop ends.
#[tokio::test]
async fn a_standby_posts_the_same_alert_after_the_leader_is_killed() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "alert_failover").await?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start(&hook, &ns.name)?;
    let policy = policy(&ns.name, "1h", false)?;
    let ha = |id: &'static str| -> Result<Operator> {
        let lease = [
            "--leader-elect",
            "--lease-namespace",
            &ns.name,
            "--instance",
            id,
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "1s",
        ];
        operator(&ns.name, &format!("{}-{id}", ns.name), &am, "5s", &lease)
    };
    let a = ha("a")?;
    until("a leading", Duration::from_secs(20), || {
        a.metric("event_series_leader") == 1.0
    })
    .await?;
    let b = ha("b")?;
    let storm = crashloop_for(&ns.name, 25);
    until("the firing notification", Duration::from_secs(30), || {
        notified(&hook, &ns.name).0 == 1
    })
    .await?;
    a.kill9()?;
    until("b leading", Duration::from_secs(15), || {
        b.metric("event_series_leader") == 1.0
    })
    .await?;
    until("b's first post", Duration::from_secs(30), || {
        b.metric("event_series_alerts_sent_total{outcome=\"sent\"}") >= 1.0
    })
    .await?;
    let held: Vec<_> = am
        .alerts()?
        .into_iter()
        .filter(|a| a["labels"]["namespace"] == ns.name.as_str())
        .collect();
    assert_eq!(held.len(), 1, "one alert in Alertmanager: {held:#?}");
    assert_eq!(held[0]["status"]["state"], "active");
    let total = joined(storm)?;
    ends_notified_once(&client, &ns.name, &hook, total).await?;
    kubectl(&["delete", "eventseriespolicy", &policy])?;
    ns.cleanup().await
}

/// Alertmanager stops for a minute mid-loop (25 occurrences 4 s apart) and comes back: the series
/// object was written all along (heartbeats every 3 s), the failed posts were retried, the alert is held again afterwards, and
/// the webhook got one firing and one resolved notification, no more. The policy requires its
/// alerts: `/readyz` says so while none gets through, and recovers.
#[tokio::test]
async fn alertmanager_down_mid_loop_delays_alerts_not_writes() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "alert_am_down").await?;
    let hook = Webhook::start()?;
    let mut am = Alertmanager::start(&hook, &ns.name)?;
    let policy = policy(&ns.name, "3s", true)?;
    let op = operator(&ns.name, &ns.name, &am, "5s", &["--request-timeout", "5s"])?;
    let storm = crashloop_at(&ns.name, 25, "0.25");
    until("the firing notification", Duration::from_secs(30), || {
        notified(&hook, &ns.name).0 == 1
    })
    .await?;
    am.stop()?;
    let before = wait_for(&client, &ns.name, "the series", |o| o.len() == 1).await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let during = wait_for(&client, &ns.name, "the series", |o| o.len() == 1).await?;
    assert!(
        count(&during[0]) >= count(&before[0]) + 10,
        "the series was written while Alertmanager was down: {} then {}",
        count(&before[0]),
        count(&during[0])
    );
    let failed = op.metric("event_series_alerts_sent_total{outcome=\"failed\"}");
    assert!(failed >= 1.0, "posts failed while it was down");
    let (code, body) = op.get("/readyz").context("/readyz")?;
    assert_eq!(code, 503, "the policy requires its alerts: {body}");
    assert!(body.contains("alerts"), "{body}");
    am.resume()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = am.alerts()?;
        if held
            .iter()
            .any(|a| a["labels"]["namespace"] == ns.name.as_str())
        {
            break;
        }
        ensure!(Instant::now() < deadline, "the alert was not posted again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    until("ready again", Duration::from_secs(30), || {
        op.get("/readyz").is_some_and(|(code, _)| code == 200)
    })
    .await?;
    let total = joined(storm)?;
    ends_notified_once(&client, &ns.name, &hook, total).await?;
    kubectl(&["delete", "eventseriespolicy", &policy])?;
    ns.cleanup().await
}

/// 10,000 loops in 1,000 namespaces: `event_series_loops` keeps its 100 largest label sets and
/// sums the other 900 into `other`, losing no loop; alerts stop at `--max-alerts` (1,000), the rest
/// counted, and Alertmanager holds exactly those.
#[tokio::test]
async fn ten_thousand_loops_in_a_thousand_namespaces_stay_within_the_caps() -> Result<()> {
    use event_series_test_support::cluster::{Dedicated, client_for};
    use event_series_test_support::raw::{create_all, kubelet_backoff};
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace};
    use kube::api::{Api, PostParams};
    const NAMESPACES: usize = 1_000;
    const PER_NAMESPACE: usize = 10;
    let cluster = Dedicated::start("loops", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let admin = client_for(kc).await?;
    apply_on(
        kc,
        "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: all\n\
         spec:\n  finishAfter: 10m\n  seriesWindow: 10m\n  alert:\n    minCount: 2\n",
        &[],
    )?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start(&hook, "loops")?;
    let url = am.url();
    let op = OPERATOR.launch(
        kc,
        "loops",
        &[
            "--max-loop-label-sets",
            "100",
            "--max-alerts",
            "1000",
            "--alertmanager-url",
            &url,
        ],
    )?;
    let names: Vec<String> = (0..NAMESPACES).map(|i| format!("loops-{i:04}")).collect();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    futures::stream::iter(names.iter())
        .map(|name| {
            let namespaces = namespaces.clone();
            async move {
                let ns: Namespace = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name}
                }))?;
                namespaces.create(&PostParams::default(), &ns).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    for name in &names {
        let api: Api<CoreEvent> = Api::namespaced(admin.clone(), name);
        let raws = (0..PER_NAMESPACE)
            .map(|i| kubelet_backoff(name, &format!("web-{i}.raw"), &format!("web-{i}"), 2));
        create_all(&api, raws, 16).await?;
    }
    let loops = (NAMESPACES * PER_NAMESPACE) as f64;
    let deadline = Instant::now() + Duration::from_secs(300);
    let scrape = loop {
        let (_, text) = op.get("/metrics").unwrap_or_default();
        let ongoing: f64 = text
            .lines()
            .filter(|l| l.starts_with("event_series_loops{") && l.contains("state=\"Ongoing\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        // Every loop ranked: the last ones wait 5 s after their start, and a namespace's first
        // loop then takes the slot of another namespace's second.
        let over = op.metric("event_series_alerts_over_limit");
        if ongoing == loops
            && op.metric("event_series_alerts_firing") == 1000.0
            && over == loops - 1000.0
        {
            break text;
        }
        ensure!(
            Instant::now() < deadline,
            "loops {ongoing} of {loops}, alerts firing {}, over the caps {over}",
            op.metric("event_series_alerts_firing")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let sets = scrape
        .lines()
        .filter(|l| l.starts_with("event_series_loops{"))
        .count();
    println!("event_series_loops: {sets} label sets for {loops} loops");
    assert!(sets <= 101, "{sets} label sets, cap 100 (+1 for `other`)");
    assert!(
        scrape.contains("event_series_loops{namespace=\"other\",reason=\"other\",type=\"other\",state=\"Ongoing\"} 9000"),
        "the 900 smallest namespaces summed into other"
    );
    assert_eq!(op.metric("event_series_loop_label_sets_folded"), 900.0);
    assert_eq!(op.metric("event_series_alerts_over_limit"), loops - 1000.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while am.alerts()?.len() != 1000 {
        ensure!(
            Instant::now() < deadline,
            "Alertmanager holds {} alerts",
            am.alerts()?.len()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        op.metric("event_series_alerts_sent_total{outcome=\"dropped\"}"),
        0.0
    );
    drop(op);
    drop(cluster);
    Ok(())
}

/// Alertmanager over HTTPS (its own CA, `--alertmanager-ca-file`) with basic auth from files, as a
/// mounted Secret gives them: with a wrong password the posts are refused (401) and retried, and
/// once the password file holds the right one (a rotated Secret) the next post goes through,
/// without a restart.
#[tokio::test]
async fn alerts_reach_an_alertmanager_over_https_with_a_rotated_password() -> Result<()> {
    use event_series_test_support::alertmanager::{PASSWORD, USER};
    let client = client().await?;
    let ns = TestNamespace::new(&client, "alert_https").await?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start_secure(&hook, &ns.name)?;
    let policy = policy(&ns.name, "1h", false)?;
    let password = am.ca_file().with_file_name("password");
    std::fs::write(&password, "not-the-password\n")?;
    let (ca, pw) = (am.ca_file(), password.clone());
    let extra = [
        "--alertmanager-ca-file",
        ca.to_str().context("path")?,
        "--alertmanager-username",
        USER,
        "--alertmanager-password-file",
        pw.to_str().context("path")?,
    ];
    let op = operator(&ns.name, &ns.name, &am, "5s", &extra)?;
    let storm = crashloop_for(&ns.name, 12);
    until("a refused post", Duration::from_secs(30), || {
        op.metric("event_series_alerts_sent_total{outcome=\"failed\"}") >= 1.0
    })
    .await?;
    assert_eq!(notified(&hook, &ns.name), (0, 0));
    std::fs::write(&password, format!("{PASSWORD}\n"))?;
    until("the firing notification", Duration::from_secs(60), || {
        notified(&hook, &ns.name).0 == 1
    })
    .await?;
    let total = joined(storm)?;
    ends_notified_once(&client, &ns.name, &hook, total).await?;
    assert_eq!(
        op.metric("event_series_alerts_sent_total{outcome=\"rejected\"}"),
        0.0,
        "a refused credential is retried, not given up"
    );
    kubectl(&["delete", "eventseriespolicy", &policy])?;
    ns.cleanup().await
}

/// A leader is killed (SIGKILL) while its loops alert, and the standby's rebuild outlasts the
/// alerts' validity: posts every 5 s, each valid for 20 s, while the standby's first list of raw
/// events (300 more of them, one per page behind 50 ms of latency each way) takes longer. The
/// standby posts the alerts again as soon as its own series objects are restored, so none lapses
/// in Alertmanager: the webhook gets one firing notification per loop and nothing resolved. Before,
/// the standby posted only once the raw list was done, and every loop was resolved and fired again.
#[tokio::test]
async fn alerts_outlive_a_rebuild_longer_than_their_validity() -> Result<()> {
    use crate::network::{logged_at, proxied, wait_leading};
    use event_series_test_support::raw::{create_all, kubelet_backoff, occurrence_patch};
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::api::{Api, PatchParams};
    const LOOPS: usize = 4;
    const FILLER: usize = 300;
    const VALIDITY: chrono::TimeDelta = chrono::TimeDelta::seconds(20);
    let client = client().await?;
    let ns = TestNamespace::new(&client, "alert_handover").await?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start(&hook, &ns.name)?;
    let name = format!("alerts-{}", ns.name);
    apply_on(
        kubeconfig(),
        &format!(
            "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: {name}\n\
             spec:\n  namespaceSelector:\n    matchLabels: {{kubernetes.io/metadata.name: {}}}\n  \
             finishAfter: 2m\n  seriesWindow: 2m\n  firstRefresh: \"0\"\n  heartbeatInterval: 1h\n  \
             alert:\n    minCount: 3\n    types: [Warning]\n",
            ns.name
        ),
        &[],
    )?;
    // Lone occurrences (no series, no alert): what makes the standby's raw list long.
    let raw: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    let filler = (0..FILLER).map(|i| {
        let mut ev = kubelet_backoff(
            &ns.name,
            &format!("lone-{i:03}"),
            &format!("lone-{i:03}"),
            1,
        );
        ev.type_ = Some("Normal".into());
        ev
    });
    create_all(&raw, filler, 16).await?;
    let url = am.url();
    let replica = |id: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "--namespace",
            &ns.name,
            "--alertmanager-url",
            &url,
            "--alert-resend-interval",
            "5s",
            "--leader-elect",
            "--lease-namespace",
            &ns.name,
            "--instance",
            id,
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let a_args = replica("a", &[]);
    let a = OPERATOR.launch(
        kubeconfig(),
        &format!("{}-a", ns.name),
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    wait_leading(&leases, "a", Duration::from_secs(20), None).await?;
    let (proxy, kc) = proxied(&format!("{}-b", ns.name)).await?;
    proxy.set_latency(Duration::from_millis(50));
    let b_args = replica("b", &["--list-page-bytes", "1"]);
    let mut b = OPERATOR.spawn(
        &kc,
        &format!("{}-b", ns.name),
        &b_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    // The loops: each raw event counts 3 at once (minCount), then one more every 2 s.
    let loops = (0..LOOPS)
        .map(|i| kubelet_backoff(&ns.name, &format!("web-{i}.raw"), &format!("web-{i}"), 3));
    create_all(&raw, loops, 4).await?;
    let going = {
        let raw = raw.clone();
        tokio::spawn(async move {
            for count in 4.. {
                tokio::time::sleep(Duration::from_secs(2)).await;
                for i in 0..LOOPS {
                    let _ = raw
                        .patch(
                            &format!("web-{i}.raw"),
                            &PatchParams::default(),
                            &occurrence_patch(count),
                        )
                        .await;
                }
            }
        })
    };
    let per_loop = |hook: &Webhook| -> std::collections::BTreeMap<String, (usize, usize)> {
        let mut by_loop = std::collections::BTreeMap::<String, (usize, usize)>::new();
        for (status, alert) in hook.alerts_with(&[("namespace", &ns.name)]) {
            let series = alert["labels"]["series"].as_str().unwrap_or("").to_owned();
            let n = by_loop.entry(series).or_default();
            if status == "firing" {
                n.0 += 1
            } else {
                n.1 += 1
            }
        }
        by_loop
    };
    until(
        "a firing notification per loop",
        Duration::from_secs(60),
        || per_loop(&hook).len() == LOOPS,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.kill9()?;
    let killed = chrono::Utc::now();
    wait_leading(&leases, "b", Duration::from_secs(30), Some(&mut b)).await?;
    let deadline = Instant::now() + Duration::from_secs(240);
    let recovered = loop {
        if let Some(at) = logged_at(&b, "recovered; watching") {
            break at;
        }
        ensure!(
            Instant::now() < deadline && b.alive(),
            "b did not recover (log {})",
            b.log.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let rebuild = recovered - killed;
    println!("b recovered {rebuild} after a was killed; alerts are valid for {VALIDITY}");
    ensure!(
        rebuild > VALIDITY + chrono::TimeDelta::seconds(5),
        "the rebuild must outlast the alerts' validity, took {rebuild}"
    );
    // Long enough for a lapse, a resolved and a second firing notification to arrive.
    tokio::time::sleep(Duration::from_secs(15)).await;
    going.abort();
    let notified = per_loop(&hook);
    println!("notifications per loop (firing, resolved): {notified:#?}");
    assert_eq!(notified.len(), LOOPS, "{:#?}", hook.notifications());
    assert!(
        notified.values().all(|n| *n == (1, 0)),
        "one firing notification per loop, none resolved: {notified:#?}"
    );
    assert!(b.metric("event_series_alerts_sent_total{outcome=\"sent\"}") >= 1.0);
    let held = am
        .alerts()?
        .into_iter()
        .filter(|a| {
            a["labels"]["namespace"] == ns.name.as_str() && a["status"]["state"] == "active"
        })
        .count();
    assert_eq!(held, LOOPS, "every loop's alert active in Alertmanager");
    drop((b, proxy));
    kubectl(&["delete", "eventseriespolicy", &name])?;
    ns.cleanup().await
}
