//! Upgrades and downgrades on the real node, mid-loop. The previous release (the newest in
//! `hack/releases.tsv` before this build's version) is installed from its own `config/default`,
//! its image built from its recorded commit (`hack/previous-image.sh`, a git worktree); kubelet
//! crash loops start; this build's `config/default` is applied, a rolling update of both replicas;
//! then the release's again (a downgrade of one release), and this build's once more. Through all
//! of it: one series object per loop, the kubelet's exact count, and never a write by two leaders.
//!
//! A test binary of its own (not in `tests/node`), because it replaces the operator the node tests
//! share; cargo runs test binaries one after another, so no node test runs beside it.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use anyhow::{Context, Result, bail, ensure};
use event_series::object::FORMAT;
use event_series_test_support::audit;
use event_series_test_support::cluster::{count, kubectl_on, state};
use event_series_test_support::node::{
    self, NAMESPACE, crash_pod, eventually, leader, namespace, raw_total, ready_operator_pods,
    series_for,
};
use event_series_test_support::repo_root;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const THIS: &str = concat!(
    "ghcr.io/event-series/event-series:v",
    env!("CARGO_PKG_VERSION")
);

/// The previous release as `hack/previous-image.sh` builds it: its version, its checkout, and the
/// series-object format it writes (`hack/releases.tsv`).
struct Release {
    version: String,
    tree: PathBuf,
    format: u32,
}

impl Release {
    fn image(&self) -> String {
        format!("ghcr.io/event-series/event-series:v{}", self.version)
    }
}

/// Builds (once) the previous release's image and loads it into the node's containerd.
fn previous_release() -> Result<Release> {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("hack/previous-image.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()?;
    ensure!(out.status.success(), "hack/previous-image.sh failed");
    let line = String::from_utf8(out.stdout)?;
    let mut fields = line.trim().split('\t');
    let (Some(version), Some(tree), Some(archive)) = (fields.next(), fields.next(), fields.next())
    else {
        bail!("hack/previous-image.sh printed {line:?}");
    };
    node::import_image(Path::new(archive))?;
    let releases = std::fs::read_to_string(repo_root().join("hack/releases.tsv"))?;
    let format = releases
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&version))
        .and_then(|f| f.get(3)?.parse().ok())
        .with_context(|| format!("no format for {version} in hack/releases.tsv"))?;
    Ok(Release {
        version: version.to_owned(),
        tree: PathBuf::from(tree),
        format,
    })
}

/// `kubectl apply -k <checkout>/config/default` (what a user runs to move to that version), then
/// waits until the rollout is complete: every replica runs `image`, two are Ready and one leads.
async fn roll_to(kubeconfig: &Path, client: &Client, checkout: &Path, image: &str) -> Result<()> {
    let config = checkout.join("config/default");
    kubectl_on(kubeconfig, &["apply", "-k", &config.to_string_lossy()])?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let template = deployments.get("event-series").await?;
    let wanted = template
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone());
    ensure!(
        wanted.as_deref() == Some(image),
        "{} installs {wanted:?}, not {image}",
        config.display()
    );
    node::rollout_status(kubeconfig, Duration::from_secs(240))
        .with_context(|| format!("the rollout to {image}"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    eventually(
        Duration::from_secs(120),
        "two Ready replicas of the new image, one of them leading",
        || async {
            let ready = ready_operator_pods(client).await?;
            let mut on_image = 0;
            for name in &ready {
                let pod = pods.get(name).await?;
                let running = pod
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|c| c.into_iter().next())
                    .map(|c| c.image);
                on_image += usize::from(running.as_deref() == Some(image));
            }
            let leads = leader(client).await?.is_some_and(|l| ready.contains(&l));
            Ok((ready.len() == 2 && on_image == 2 && leads).then_some(()))
        },
    )
    .await
}

/// Waits until every loop's series object has grown past `before` (written by whoever leads now).
async fn grown(client: &Client, ns: &str, before: &BTreeMap<String, u64>) -> Result<()> {
    eventually(
        Duration::from_secs(150),
        "every loop's series growing after the rollout",
        || async {
            let now = series_for(client, ns, "BackOff").await?;
            let all = before.iter().all(|(name, was)| {
                now.iter()
                    .any(|s| s.metadata.name.as_deref() == Some(name) && count(s) > *was)
            });
            Ok(all.then_some(()))
        },
    )
    .await
}

/// The series objects' counts by name.
async fn counts(client: &Client, ns: &str) -> Result<BTreeMap<String, u64>> {
    Ok(series_for(client, ns, "BackOff")
        .await?
        .iter()
        .filter_map(|s| Some((s.metadata.name.clone()?, count(s))))
        .collect())
}

#[tokio::test]
async fn an_upgrade_and_a_downgrade_mid_loop_keep_one_object_per_loop_and_exact_counts()
-> Result<()> {
    let Some(kubeconfig) = node::node() else {
        return Ok(());
    };
    let client = node::client(kubeconfig).await?;
    let previous = previous_release()?;
    ensure!(
        previous.image() != THIS,
        "the previous release has this build's version {THIS}"
    );
    // Across formats a downgrade is refused (the older build leaves a newer object alone and counts
    // it in recovery_rejected_total{reason="unknown_format"}): this test must then check that
    // refusal instead of a downgrade that carries on.
    ensure!(
        previous.format == FORMAT,
        "v{} writes format {}, this build {FORMAT}: the downgrade below no longer applies",
        previous.version,
        previous.format
    );
    println!(
        "previous release v{} from {}",
        previous.version,
        previous.tree.display()
    );

    // The previous release installed from its own config/default (the node's operator removed
    // first, so that its Pods start from nothing), then two crash loops.
    kubectl_on(
        kubeconfig,
        &[
            "-n",
            NAMESPACE,
            "delete",
            "deployment",
            "event-series",
            "--wait=true",
        ],
    )?;
    eventually(
        Duration::from_secs(120),
        "the operator's Pods gone",
        || async {
            let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
            Ok(pods
                .list(&Default::default())
                .await?
                .items
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    roll_to(kubeconfig, &client, &previous.tree, &previous.image()).await?;
    let ns = namespace(&client, "upgrade", "fast").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let loops = ["crash-a", "crash-b"];
    for name in loops {
        pods.create(&PostParams::default(), &crash_pod(name, THIS)?)
            .await?;
    }
    eventually(
        Duration::from_secs(180),
        "an Ongoing BackOff series per loop, written by the previous release",
        || async {
            let found = series_for(&client, &ns, "BackOff").await?;
            let ongoing = found.iter().filter(|s| state(s) == "Ongoing").count();
            Ok((ongoing == loops.len()).then_some(()))
        },
    )
    .await?;
    let created = counts(&client, &ns).await?;

    // Upgrade, downgrade, upgrade again: each a rolling update of the two replicas mid-loop, after
    // which the version rolled to writes the same objects further.
    let this = repo_root();
    let stages = [
        (this.as_path(), THIS.to_owned()),
        (previous.tree.as_path(), previous.image()),
        (this.as_path(), THIS.to_owned()),
    ];
    for (checkout, image) in &stages {
        roll_to(kubeconfig, &client, checkout, image).await?;
        let rolled = counts(&client, &ns).await?;
        ensure!(
            rolled.keys().eq(created.keys()),
            "the series objects on {image}: {rolled:?}, created: {created:?}"
        );
        grown(&client, &ns, &rolled).await?;
        println!("on {image}: {:?}", counts(&client, &ns).await?);
    }

    // The loops end; each series is Finished in its one object with the kubelet's count.
    for name in loops {
        pods.delete(name, &DeleteParams::default()).await?;
    }
    let finished = eventually(
        Duration::from_secs(240),
        "every series Finished",
        || async {
            let found = series_for(&client, &ns, "BackOff").await?;
            let done = found.iter().all(|s| state(s) == "Finished");
            Ok((done && found.len() >= loops.len()).then_some(found))
        },
    )
    .await?;
    ensure!(
        finished.len() == loops.len(),
        "one series object per loop: {:?}",
        finished
            .iter()
            .map(|s| (&s.metadata.name, count(s)))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        finished
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<std::collections::BTreeSet<_>>(),
        created.keys().cloned().map(Some).collect(),
        "the loops kept the objects the previous release created"
    );
    for name in loops {
        let series = finished
            .iter()
            .find(|s| s.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .with_context(|| format!("no series about {name}"))?;
        let raw = raw_total(&client, &ns, "BackOff", name).await?;
        assert_eq!(
            count(series),
            raw,
            "{name}: the series counts what the kubelet wrote"
        );
    }

    // Never two writers: in the API server's audit log, every request on these series objects
    // (answered or refused) comes in one unbroken run per operator Pod (a Pod that wrote, then
    // another, never writes again), and the versions of those runs are the rollouts' order.
    let mut writes: Vec<_> = audit::writes(kubeconfig, &ns)?
        .into_iter()
        .filter(|w| w.resource == "events" && created.contains_key(&w.name))
        .collect();
    writes.sort_by_key(|w| w.received);
    let mut runs: Vec<&str> = Vec::new();
    for w in &writes {
        if runs.last() != Some(&w.user_agent.as_str()) {
            runs.push(&w.user_agent);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for agent in &runs {
        assert!(
            seen.insert(*agent),
            "{agent} wrote again after another writer: {runs:#?}"
        );
    }
    let mut versions: Vec<&str> = Vec::new();
    for agent in &runs {
        let version = agent
            .strip_prefix("event-series/")
            .and_then(|a| a.split(' ').next())
            .with_context(|| format!("a write by {agent}"))?;
        if versions.last() != Some(&version) {
            versions.push(version);
        }
    }
    let (old, new) = (previous.version.as_str(), env!("CARGO_PKG_VERSION"));
    assert_eq!(
        versions,
        [old, new, old, new],
        "the writers' versions, in order: {runs:#?}"
    );

    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}
