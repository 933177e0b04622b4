//! What a tenant writes into its Events reaches an admin's chat as text and an admin's terminal
//! visibly: an alert rendered by the Slack template of docs/ALERTS.md carries no markup of the
//! tenant's, and `event-series get` writes no invisible character as itself.

use crate::OPERATOR;
use crate::operator::wait_for;
use anyhow::{Context, Result, ensure};
use event_series_test_support::alertmanager::{Alertmanager, Webhook};
use event_series_test_support::cluster::{
    TestNamespace, apply_on, client, kubeconfig, kubectl, tenant_client,
};
use event_series_test_support::raw::{Occurrences, app_container, kubelet};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::{Api, PostParams};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

/// A Slack mention; "TAG" in tag characters (invisible in every renderer) closed by a cancel tag,
/// then a Markdown link, a Slack link with hidden target text, a Discord mention and emphasis.
const REASON: &str = "<!channel>";
const NOTE: &str = "\u{e0054}\u{e0041}\u{e0047}\u{e007f}see [Fix](https://evil.example/x) or \
                    <https://evil.example|Fix> @everyone *now*";

/// The receiver template of docs/ALERTS.md (`title` and `text` of its `slack_configs`), applied
/// to one webhook notification the way Alertmanager's templates would.
fn render_slack(notification: &Value) -> String {
    let common = &notification["commonLabels"];
    let status = notification["status"].as_str().unwrap_or("").to_uppercase();
    let mut out = format!(
        "{status}: {} in {}\n",
        common["alertname"].as_str().unwrap_or(""),
        common["namespace"].as_str().unwrap_or("")
    );
    for a in notification["alerts"].as_array().into_iter().flatten() {
        let ann = &a["annotations"];
        out.push_str(ann["summary"].as_str().unwrap_or(""));
        out.push('\n');
        out.push_str(ann["description"].as_str().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// Characters that are markup in Slack's mrkdwn, Markdown or HTML, and the tag characters.
fn markup_or_hidden(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| "<>&|`*_~[]@".contains(*c) || ('\u{e0000}'..='\u{e007f}').contains(c))
        .collect()
}

fn get_wide(ns: &str) -> Result<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_event-series"))
        .arg("get")
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(["-n", ns, "-o", "wide"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A tenant's Event whose reason is `<!channel>` and whose note holds links, mentions and tag
/// characters: the firing notification, rendered by the documented template, reads as plain text
/// (the markup characters replaced by look-alikes, the tag characters written as `\u{e0041}`),
/// the alert's labels keep the exact reason, and `event-series get -o wide` shows every character
/// visibly. (Before: the summary carried `<!channel>` as it was, which Slack renders as an
/// @channel mention, and the tag characters reached both the chat and the terminal raw.)
#[tokio::test]
async fn a_tenants_markup_and_tag_characters_reach_chat_and_terminal_as_text() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "tenant_text").await?;
    let other = TestNamespace::new(&client, "tenant_text_other").await?;
    let tenant = tenant_client(&client, kubeconfig(), &ns.name, &other.name).await?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start(&hook, &ns.name)?;
    let policy = format!("alerts-{}", ns.name);
    apply_on(
        kubeconfig(),
        &format!(
            "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: {policy}\n\
             spec:\n  namespaceSelector:\n    matchLabels: {{kubernetes.io/metadata.name: {}}}\n  \
             alert:\n    minCount: 3\n",
            ns.name
        ),
        &[],
    )?;
    let url = am.url();
    let args = ["--namespace", &ns.name, "--alertmanager-url", &url];
    let _op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
    let raw = kubelet(
        &ns.name,
        "tenant-text.raw",
        app_container(&ns.name, "web-0", "uid-tenant-text".into()),
        REASON,
        NOTE.into(),
        Occurrences::at(5, k8s_openapi::jiff::Timestamp::now()),
    );
    Api::<CoreEvent>::namespaced(tenant, &ns.name)
        .create(&PostParams::default(), &raw)
        .await?;
    wait_for(&client, &ns.name, "the series object", |o| o.len() == 1).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let notification = loop {
        if let Some(n) = hook.notifications().into_iter().next() {
            break n;
        }
        ensure!(Instant::now() < deadline, "no notification in 60 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let alert = &notification["alerts"][0];
    println!("notification: {notification:#}");
    assert_eq!(alert["labels"]["reason"], REASON, "labels stay exact");
    let rendered = render_slack(&notification);
    println!("rendered:\n{rendered}");
    let bad = markup_or_hidden(&rendered);
    assert!(
        bad.is_empty(),
        "markup reached the chat: {bad:?} in {rendered}"
    );
    for shown in [
        "＜!channel＞",
        "［Fix］(https://evil.example/x)",
        "＜https://evil.example｜Fix＞",
        "＠everyone",
        "\\u{e0054}\\u{e0041}\\u{e0047}\\u{e007f}see ［Fix］",
        "＊now＊",
    ] {
        assert!(rendered.contains(shown), "{shown} in {rendered}");
    }
    let wide = get_wide(&ns.name)?;
    println!("get -o wide:\n{wide}");
    let raw_tags: Vec<char> = wide
        .chars()
        .filter(|c| ('\u{e0000}'..='\u{e0fff}').contains(c))
        .collect();
    assert!(
        raw_tags.is_empty(),
        "tag characters printed raw: {raw_tags:?}"
    );
    let row = wide.lines().nth(1).context("a row")?;
    assert!(
        row.contains(REASON),
        "the terminal shows the reason as it is: {row}"
    );
    assert!(
        row.contains("\\u{e0054}\\u{e0041}\\u{e0047}\\u{e007f}"),
        "the tag characters shown: {row}"
    );
    kubectl(&["delete", "eventseriespolicy", &policy])?;
    ns.cleanup().await?;
    other.cleanup().await
}
