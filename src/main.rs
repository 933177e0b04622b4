use anyhow::{Context, bail};
use clap::Parser;
use event_series::api::client::{self, WATCH_MARGIN};
use event_series::cli::{Cli, Command, LogFormat, RunArgs, Standby};
use event_series::controller::{self, Stop};
use event_series::leader::{Election, LeaseConfig, WriteFence};
use event_series::operations::health::Health;
use event_series::operations::metrics::Metrics;
use event_series::operations::server;
use event_series::reading;
use event_series_core::duration;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

// Alternative global allocators, only for measuring them (docs/BENCHMARKS.md, Memory: Allocators).
#[cfg(all(feature = "jemalloc", feature = "mimalloc"))]
compile_error!("features `jemalloc` and `mimalloc` are exclusive");
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The name under which kubectl finds the plugin: `kubectl series ...` runs `kubectl-series ...`.
const PLUGIN_NAME: &str = "kubectl-series";

/// The arguments, with `get` put first when the binary runs as `kubectl-series`, so that the plugin
/// answers exactly like `event-series get`.
fn arguments() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let as_plugin = args
        .first()
        .and_then(|a0| std::path::Path::new(a0).file_name())
        .is_some_and(|n| n == PLUGIN_NAME);
    if as_plugin {
        args.insert(1, "get".into());
    }
    args
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse_from(arguments());
    match cli.command {
        Command::Get(args) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let query = args.query();
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
            if let Err(e) = runtime.block_on(reading::get(&query, &mut out, &mut err)) {
                drop(out);
                eprintln!("{e}");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Run(args) => {
            event_series::operations::memory::tune_allocator();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(run(*args))
        }
        Command::Crd => {
            print!("{}", event_series::config::crd::crd_yaml()?);
            Ok(())
        }
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "event-series", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// `--log-level` first, else `RUST_LOG`, else `info`.
fn init_logging(format: LogFormat, level: Option<&str>) {
    let filter = level
        .and_then(|l| EnvFilter::try_new(l).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    // Colours only on a terminal: a log file or a container log gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown signal received");
}

/// `event-series run`: the wiring of the parts.
async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_format, args.log_level.as_deref());
    let identity = args.instance.clone().unwrap_or_else(default_identity);
    let kube_config = kube::Config::infer()
        .await
        .context("no usable kubeconfig (KUBECONFIG, ~/.kube/config, or in-cluster)")?;
    let lease = args.lease(&kube_config.default_namespace, &identity)?;
    let options = client::Options {
        request_timeout: args.request_timeout,
        user_agent: format!("event-series/{} ({identity})", env!("CARGO_PKG_VERSION")),
    };
    let client = client::build(kube_config, &options).context("building the API client")?;
    let metrics = Arc::new(Metrics::default());
    let stall_after = Duration::from_secs(args.watch_timeout_secs().into()) + WATCH_MARGIN;
    let health = Health::new(stall_after, args.request_timeout);
    let health = Arc::new(health.with_restore_timeout(args.restore_timeout));
    Metrics::watch_readiness(metrics.clone(), health.clone());
    serve_operations(&args, &client, &metrics, &health).await?;
    let mut config = args.controller();
    config.report.instance = identity.clone();
    if let Some(alerts) = &config.alerts {
        // A wrong URL or CA file fails the start, not every post of every term.
        let to = event_series::alerting::alertmanager::Alertmanagers::new(alerts.target.clone())?;
        tracing::info!(
            alertmanagers = to.len(),
            "loops a policy's spec.alert selects are sent to Alertmanager"
        );
    }
    tracing::info!(namespace = ?config.namespace,
        heartbeat_interval = %duration::format(config.defaults.heartbeat_interval),
        finish_after = %duration::format(config.defaults.finish_after),
        series_window = %duration::format(config.defaults.series_window),
        "event-series starting");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut election = join_election(&client, lease, &metrics, &health);
    if let (Standby::Cold, Some(cold)) = (args.standby, election.as_mut())
        && !lead_cold(cold, &health, shutdown.as_mut()).await?
    {
        if let Some(e) = election {
            e.release().await;
        }
        return Ok(());
    }
    let fence = election
        .as_ref()
        .map_or_else(WriteFence::open, Election::fence);
    let stop = async {
        let lost = async {
            match election.as_mut() {
                Some(e) => e.lost().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => Stop::Graceful,
            _ = lost => Stop::LeadershipLost,
        }
    };
    let stopped = controller::run(client, config, metrics, health, fence, stop).await;
    if let Some(e) = election {
        // Also after a failure (a restore that made no progress): the standby tries at once.
        e.release().await;
    }
    let stopped = stopped?;
    if stopped == Stop::LeadershipLost {
        bail!("leadership lost: exiting so that this replica restarts as a standby");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Joins the election when there is a Lease to hold (`None`: this replica leads alone). A standby
/// runs the same lists and watches as the leader and keeps its engine current, so that taking the
/// Lease costs no rebuild: only its writes wait for the Lease (the fence). Until its engine is
/// current it leaves a free Lease to a warm replica (see `leader::elector`).
fn join_election(
    client: &kube::Client,
    lease: Option<LeaseConfig>,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
) -> Option<Election> {
    let Some(lease) = lease else {
        metrics.leader.set(1);
        return None;
    };
    let t = lease.timings;
    tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity,
        lease_duration = ?t.lease_duration, renew_deadline = ?t.renew_deadline,
        retry_period = ?t.retry_period, "joining the election: writing only while leading");
    Some(Election::start(
        client.clone(),
        lease,
        metrics.clone(),
        health.clone(),
    ))
}

/// The benchmarks' cold standby (`--standby cold`): waits, Ready since it has nothing to serve,
/// until `election` holds the Lease (`true`: the controller starts from nothing, and is not Ready
/// until rebuilt) or `shutdown` comes first (`false`).
async fn lead_cold<F: Future<Output = ()>>(
    election: &mut Election,
    health: &Health,
    shutdown: Pin<&mut F>,
) -> anyhow::Result<bool> {
    health.set_recovered(true);
    tracing::info!("cold standby: waiting for the Lease before listing anything");
    tokio::select! {
        acquired = election.acquired() => acquired?,
        () = shutdown => return Ok(false),
    }
    tracing::info!("leading: rebuilding the series state");
    health.set_recovered(false);
    Ok(true)
}

/// Binds the probes' and the metrics' ports (`--health-addr`, `--metrics-addr`), sharing one
/// connection pool.
async fn serve_operations(
    args: &RunArgs,
    client: &kube::Client,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
) -> anyhow::Result<()> {
    let pool = server::Pool::new();
    let health_bound = server::serve_health(args.health_addr, health.clone(), &pool)
        .await
        .with_context(|| format!("binding --health-addr {}", args.health_addr))?;
    let access = if args.metrics_secure {
        let names = server::tls::default_names();
        server::MetricsAccess::Secure {
            tls: server::tls::acceptor(args.metrics_cert_dir.as_deref(), names)
                .context("--metrics-cert-dir")?,
            auth: Arc::new(server::auth::Authorizer::new(
                client.clone(),
                args.request_timeout,
            )),
        }
    } else {
        server::MetricsAccess::Open
    };
    let registry = Metrics::registry(metrics);
    let bound = server::serve_metrics(args.metrics_addr, registry, access, &pool)
        .await
        .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;
    tracing::info!(metrics_addr = %bound, metrics_secure = args.metrics_secure,
        health_addr = %health_bound, "serving metrics and probes");
    Ok(())
}

/// The host name (the pod name in Kubernetes), else something unique to this process.
fn default_identity() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("event-series-{}", std::process::id()))
}
