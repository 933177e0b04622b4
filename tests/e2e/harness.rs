//! The harness itself: the apiserver is real (events.k8s.io validation, RBAC, service-account tokens).

use chrono::{TimeDelta, Utc};
use event_series::object::{name_of, to_event};
use event_series_core::engine::Engine;
use event_series_core::key;
use event_series_core::settings::Settings;
use event_series_test_support::cluster::{TestNamespace, client, kubeconfig, kubectl};
use event_series_test_support::raw::kubelet_backoff;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

#[tokio::test]
async fn apiserver_serves_its_version() -> anyhow::Result<()> {
    let version = client().await?.apiserver_version().await?;
    assert_eq!(version.major, "1");
    let text = kubectl(&["get", "--raw", "/version"])?;
    assert!(text.contains("gitVersion"), "{text}");
    Ok(())
}

/// A series object made by the engine is accepted by the real events.k8s.io/v1 validation, reads back
/// unchanged, and accepts a heartbeat update (immutable fields untouched).
#[tokio::test]
async fn series_object_round_trips_through_events_k8s_io_v1() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "round_trip").await?;
    let now = Utc::now();
    let raw = kubelet_backoff(&ns.name, "web-0.raw", "web-0", 3);
    let mut engine = Engine::with_settings(Settings::default());
    engine.observe(now, &key::normalise(&raw)?);
    let created = engine.take_intents();
    assert_eq!(created.len(), 1);
    let object = to_event(&created[0].series);

    let api: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let stored = api.create(&PostParams::default(), &object).await?;
    let read = api.get(&name_of(&created[0].series)).await?;
    assert_eq!(read.series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(read.reporting_controller.as_deref(), Some("kubelet"));
    assert_eq!(
        read.action.as_deref(),
        Some("BackOff"),
        "legacy events get action = reason"
    );
    assert_eq!(
        read.metadata
            .labels
            .as_ref()
            .map(|l| l["eventseries.dev/state"].clone()),
        Some("Ongoing".into())
    );

    // A heartbeat: same immutable fields, new count and written-at.
    let mut more = raw.clone();
    more.count = Some(10);
    engine.observe(now, &key::normalise(&more)?);
    engine.tick(now + TimeDelta::minutes(31));
    let heartbeat = engine.take_intents();
    assert_eq!(heartbeat.len(), 1);
    let mut update = to_event(&heartbeat[0].series);
    update.metadata.resource_version = stored.metadata.resource_version.clone();
    let replaced = api
        .replace(
            &name_of(&heartbeat[0].series),
            &PostParams::default(),
            &update,
        )
        .await?;
    assert_eq!(replaced.series.map(|s| s.count), Some(10));
    ns.cleanup().await
}

/// RBAC is on: a ServiceAccount with no bindings, acting with its own TokenRequest token, is denied.
#[tokio::test]
async fn a_service_account_without_bindings_cannot_list_secrets() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "rbac").await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns.name);
    sas.create(
        &PostParams::default(),
        &ServiceAccount {
            metadata: ObjectMeta {
                name: Some("nobody".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await?;
    let token = sas
        .create_token_request("nobody", &PostParams::default(), &TokenRequest::default())
        .await?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    assert!(!token.is_empty());
    let mut config = client_config().await?;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let as_sa = kube::Client::try_from(config)?;
    let err = Api::<Secret>::namespaced(as_sa, &ns.name)
        .list(&Default::default())
        .await
        .expect_err("listing secrets must be forbidden");
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected 403, got {other}"),
    }
    ns.cleanup().await
}

async fn client_config() -> anyhow::Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig())?;
    Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
}
