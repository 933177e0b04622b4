//! Reading: `event-series get` and `kubectl series` on the real apiserver, reading the series
//! objects of real loops (client-go's legacy recorder) as the user's own kubeconfig allows.

use crate::operator::{count, crashloop, start, state, wait_for};
use crate::secure_metrics::token;
use anyhow::{Context, Result};
use event_series_test_support::cluster::{TestNamespace, client, kubeconfig, token_kubeconfig};
use event_series_test_support::repo_root;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_event-series");

/// Runs `event-series get ARGS` with `kubeconfig`: exit code, stdout, stderr.
fn get(kubeconfig: &Path, args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(BIN)
        .arg("get")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The cells of each line of a table (columns are at least three spaces apart; no cell holds two
/// spaces in a row).
fn cells(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn column(table: &[Vec<String>], name: &str) -> Vec<String> {
    let Some(i) = table.first().and_then(|h| h.iter().position(|c| c == name)) else {
        return Vec::new();
    };
    table[1..]
        .iter()
        .filter_map(|r| r.get(i).cloned())
        .collect()
}

#[tokio::test]
async fn series_are_read_as_series_with_filters_formats_and_watch() -> Result<()> {
    let client = client().await?;
    let kc = kubeconfig();
    let ns = TestNamespace::new(&client, "reading").await?;

    let (code, out, err) = get(kc, &["-n", &ns.name])?;
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert_eq!(err, format!("No series found in {} namespace.\n", ns.name));

    let _op = start(
        &ns.name,
        &[
            "--finish-after",
            "6s",
            "--series-window",
            "6s",
            "--heartbeat-interval",
            "2s",
        ],
    )?;
    // Two quick loops that finish, then one that goes on while the reading is checked.
    let done = crashloop(&ns.name, 2, "4", 12)?;
    wait_for(&client, &ns.name, "two Finished loops", |objs| {
        objs.len() == 2 && objs.iter().all(|o| state(o) == "Finished")
    })
    .await?;
    let long_ns = ns.name.clone();
    let ongoing = std::thread::spawn(move || crashloop(&long_ns, 1, "1", 24));
    let objs = wait_for(&client, &ns.name, "a third loop Ongoing", |objs| {
        objs.len() == 3 && objs.iter().any(|o| state(o) == "Ongoing")
    })
    .await?;
    let live = objs
        .iter()
        .find(|o| state(o) == "Ongoing")
        .and_then(|o| o.regarding.as_ref()?.name.clone())
        .context("the Ongoing loop's pod")?;
    let finished_pod = done[0].regarding.name.clone();

    // The table: one row per series, the Ongoing one newest, so last.
    let (code, out, err) = get(kc, &["-n", &ns.name])?;
    println!("event-series get -n {}:\n{out}", ns.name);
    assert_eq!(code, 0, "{err}");
    let table = cells(&out);
    assert_eq!(
        table[0],
        [
            "OBJECT",
            "REASON",
            "COUNT",
            "STATE",
            "STARTED",
            "LAST SEEN",
            "WRITTEN",
            "DURATION",
            "RATE"
        ]
    );
    assert_eq!(table.len(), 4, "{out}");
    // Every object says when the operator last wrote it: how old the reader's view is.
    assert!(
        column(&table, "WRITTEN").iter().all(|w| w != "<unknown>"),
        "{out}"
    );
    assert_eq!(column(&table, "STATE"), ["Finished", "Finished", "Ongoing"]);
    assert_eq!(column(&table, "OBJECT")[2], format!("pod/{live}"));
    for truth in &done {
        let row = table
            .iter()
            .find(|r| r[0] == format!("pod/{}", truth.regarding.name))
            .context("a row per finished loop")?;
        assert_eq!(row[2], truth.api_count.to_string(), "COUNT of {row:?}");
        assert_eq!(row[1], "BackOff");
    }

    // Filters: state, label selector, the object.
    let rows = |args: &[&str]| -> Result<Vec<Vec<String>>> {
        let mut all = vec!["-n", ns.name.as_str()];
        all.extend_from_slice(args);
        let (code, out, err) = get(kc, &all)?;
        assert_eq!(code, 0, "{args:?}: {err}");
        Ok(cells(&out).into_iter().skip(1).collect())
    };
    assert_eq!(rows(&["--state", "Ongoing"])?.len(), 1);
    assert_eq!(rows(&["--state", "finished"])?.len(), 2);
    assert_eq!(rows(&["-l", "eventseries.dev/state=Finished"])?.len(), 2);
    let for_pod = rows(&["--for", &format!("Pod/{finished_pod}")])?;
    assert_eq!(for_pod.len(), 1);
    assert_eq!(for_pod[0][0], format!("pod/{finished_pod}"));
    assert!(rows(&["--for", "pod/nothing-here"])?.is_empty());
    let wide = cells(&get(kc, &["-n", &ns.name, "-o", "wide"])?.1);
    assert!(
        wide[0].ends_with(&["REPORTER".into(), "NAME".into(), "NOTE".into()]),
        "{:?}",
        wide[0]
    );

    // All namespaces: a NAMESPACE column (other tests' namespaces may show too).
    let (_, all, _) = get(kc, &["-A"])?;
    let all = cells(&all);
    assert_eq!(all[0][0], "NAMESPACE");
    assert_eq!(
        all.iter().filter(|r| r[0] == ns.name).count(),
        3,
        "our three rows"
    );

    // Machine-readable: the objects themselves, in the same order.
    let (code, json, err) = get(kc, &["-n", &ns.name, "-o", "json"])?;
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&json)?;
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().context("items")?;
    assert_eq!(items.len(), 3);
    assert_eq!(items[2]["regarding"]["name"], live.as_str());
    assert_eq!(items[2]["apiVersion"], "events.k8s.io/v1");
    let (_, yaml, _) = get(kc, &["-n", &ns.name, "-o", "yaml"])?;
    let list: serde_json::Value = serde_yaml_ng::from_str(&yaml)?;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3));

    // --watch: the table, then a row whenever the Ongoing series is written (every heartbeat).
    let mut child = Command::new(BIN)
        .args(["get", "--kubeconfig"])
        .arg(kc)
        .args(["-n", &ns.name, "--watch", "--state", "Ongoing"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines.len() < 4 && Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            lines.push(l.1);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    println!("--watch printed:\n{}", lines.join("\n"));
    assert!(
        lines.len() >= 4,
        "header, row, then rows on heartbeats: {lines:?}"
    );
    assert!(lines[0].starts_with("OBJECT"));
    for l in &lines[1..] {
        assert!(l.starts_with(&format!("pod/{live}")), "{l}");
    }

    // `kubectl series`: kubectl finds the same binary as its plugin `kubectl-series` on the PATH.
    let plugin_dir = repo_root()
        .join("target/e2e-logs")
        .join(format!("{}-plugin", ns.name));
    std::fs::create_dir_all(&plugin_dir)?;
    std::fs::copy(BIN, plugin_dir.join("kubectl-series"))?;
    let path = format!(
        "{}:{}",
        plugin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let plugin = Command::new(event_series_test_support::kubectl_bin())
        .args(["series", "-n", &ns.name, "--state", "Finished"])
        .env("PATH", &path)
        .env("KUBECONFIG", kc)
        .output()?;
    let text = String::from_utf8_lossy(&plugin.stdout);
    println!("kubectl series -n {} --state Finished:\n{text}", ns.name);
    assert!(
        plugin.status.success(),
        "{}",
        String::from_utf8_lossy(&plugin.stderr)
    );
    assert_eq!(cells(&text).len(), 3, "header and two rows");
    let help = Command::new(event_series_test_support::kubectl_bin())
        .args(["series", "--help"])
        .env("PATH", &path)
        .output()?;
    assert!(String::from_utf8_lossy(&help.stdout).contains("--for <KIND/NAME>"));
    let _ = std::fs::remove_dir_all(&plugin_dir);

    // No right to read events.k8s.io Events: the API's Forbidden message, exit 1.
    token(&client, &ns.name, "nobody").await?;
    let nobody = token_kubeconfig(&client, kc, &ns.name, "nobody").await?;
    let (code, out, err) = get(&nobody, &["-n", &ns.name])?;
    println!("without access: exit {code}, {}", err.trim());
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.starts_with("Error from server (Forbidden):")
            && err.contains("cannot list resource \"events\" in API group \"events.k8s.io\""),
        "{err}"
    );
    // The admin impersonating that ServiceAccount (`--as`) gets the same answer; `--no-headers`
    // prints the rows only; a `--request-timeout` is accepted and a malformed one refused.
    let user = format!("system:serviceaccount:{}:nobody", ns.name);
    let (code, _, err) = get(kc, &["-n", &ns.name, "--as", &user])?;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Forbidden") && err.contains(&user),
        "impersonated: {err}"
    );
    let (code, out, err) = get(
        kc,
        &[
            "-n",
            &ns.name,
            "--state",
            "Finished",
            "--no-headers",
            "--request-timeout",
            "20s",
        ],
    )?;
    assert_eq!(code, 0, "{err}");
    assert_eq!(cells(&out).len(), 2, "two rows, no header:\n{out}");
    assert!(!out.contains("LAST SEEN"), "{out}");
    let (code, _, err) = get(kc, &["-n", &ns.name, "--request-timeout", "soon"])?;
    assert_eq!(code, 2, "clap refuses it: {err}");
    assert!(err.contains("--request-timeout"), "{err}");

    match ongoing.join() {
        Ok(r) => {
            let truth = r?;
            let total: u64 = truth.iter().map(|t| t.api_count).sum();
            wait_for(
                &client,
                &ns.name,
                "the long loop Finished with its count",
                |objs| {
                    objs.iter().any(|o| {
                        state(o) == "Finished"
                            && count(o) == total
                            && o.regarding.as_ref().and_then(|r| r.name.as_deref())
                                == Some(live.as_str())
                    })
                },
            )
            .await?;
        }
        Err(_) => anyhow::bail!("the emitter thread panicked"),
    }
    ns.cleanup().await
}

/// a tenant's Event whose reason, regarding name and note hold ESC, OSC 52, C1 and DEL
/// sequences: the series object is written with them, and `event-series get` (table, `-o wide`,
/// `--watch`) prints no raw control byte, while `-o json` keeps the exact values. (Before: the table
/// wrote the tenant's bytes to the admin's terminal as they were.)
#[tokio::test]
async fn a_tenants_escape_sequences_are_printed_visibly_and_kept_in_json() -> Result<()> {
    use event_series_test_support::cluster::tenant_client;
    use event_series_test_support::raw::{Occurrences, app_container, kubelet};
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::api::{Api, PostParams};
    let client = client().await?;
    let ns = TestNamespace::new(&client, "escapes").await?;
    let other = TestNamespace::new(&client, "escapes_other").await?;
    let tenant = tenant_client(&client, kubeconfig(), &ns.name, &other.name).await?;
    let reason = "Back\u{1b}[2JOff\u{9b}31m\u{7f}";
    let pod = "web\u{1b}]0;owned\u{7}";
    let note = "\u{1b}]52;c;aGVsbG8=\u{7}clipboard\u{202e}gnp.exe";
    let op = start(&ns.name, &["--heartbeat-interval", "2s"])?;
    let raw = kubelet(
        &ns.name,
        "escapes.raw",
        app_container(&ns.name, pod, "uid-escapes".into()),
        reason,
        note.into(),
        Occurrences::at(2, k8s_openapi::jiff::Timestamp::now()),
    );
    Api::<CoreEvent>::namespaced(tenant, &ns.name)
        .create(&PostParams::default(), &raw)
        .await?;
    wait_for(&client, &ns.name, "the series object", |objs| {
        objs.len() == 1
    })
    .await?;
    let kc = kubeconfig();
    let raw_control = |text: &str| -> Vec<char> {
        text.chars()
            .filter(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c))
            .collect()
    };
    let (code, table, err) = get(kc, &["-n", &ns.name])?;
    assert_eq!(code, 0, "{err}");
    let (_, wide, _) = get(kc, &["-n", &ns.name, "-o", "wide"])?;
    println!("table:\n{table}-o wide:\n{wide}");
    assert!(
        table.contains("^[[2J"),
        "the escape is shown visibly: {table}"
    );
    let mut child = Command::new(BIN)
        .args(["get", "--kubeconfig"])
        .arg(kc)
        .args(["-n", &ns.name, "--watch", "-o", "wide"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let watcher = std::thread::spawn(move || {
        let mut out = String::new();
        let mut reader = BufReader::new(stdout);
        for _ in 0..3 {
            if reader.read_line(&mut out).unwrap_or(0) == 0 {
                break;
            }
        }
        out
    });
    // The heartbeats write the object every 2 s: the watch prints a row each time.
    let deadline = Instant::now() + Duration::from_secs(30);
    let watched = loop {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        if watcher.is_finished() {
            break watcher
                .join()
                .map_err(|_| anyhow::anyhow!("the watch reader panicked"))?;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    println!("--watch -o wide:\n{watched}");
    for (what, text) in [("table", &table), ("-o wide", &wide), ("--watch", &watched)] {
        let raw = raw_control(text);
        assert!(
            raw.is_empty(),
            "{what} printed raw control characters: {raw:?}"
        );
    }
    assert!(watched.lines().count() >= 3, "{watched}");
    let (_, json, _) = get(kc, &["-n", &ns.name, "-o", "json"])?;
    let list: serde_json::Value = serde_json::from_str(&json)?;
    let item = &list["items"][0];
    assert_eq!(item["reason"], reason);
    assert_eq!(item["regarding"]["name"], pod);
    assert_eq!(item["note"], note);
    drop(op);
    other.cleanup().await?;
    ns.cleanup().await
}
