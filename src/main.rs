use anyhow::{Context, bail};
use clap::Parser;
use event_series::cli::{Cli, Command, GetArgs, LogFormat, Output, RunArgs};
use event_series::client::{self, WATCH_MARGIN};
use event_series::config::Settings;
use event_series::config::duration::{self, parse as parse_duration};
use event_series::controller::{self, ControllerConfig, Stop};
use event_series::health::Health;
use event_series::leader::elector::Timings;
use event_series::leader::{Election, LeaseConfig, WriteFence};
use event_series::metrics::Metrics;
use event_series::reading;
use event_series::server;
use event_series::writer::WriterConfig;
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
            let query = query(args);
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
            if let Err(e) = runtime.block_on(reading::get(&query, &mut out, &mut err)) {
                drop(out);
                eprintln!("{e}");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Run(args) => {
            event_series::memory::tune_allocator();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(run(*args))
        }
        Command::Crd => {
            print!("{}", event_series::config::crd::crd_yaml()?);
            Ok(())
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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

async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let settings = Settings {
        heartbeat_interval: parse_duration("--heartbeat-interval", &args.heartbeat_interval)?,
        finish_after: parse_duration("--finish-after", &args.finish_after)?,
        series_window: parse_duration("--series-window", &args.series_window)?,
        ..Settings::default()
    };
    let drain = std_duration("--shutdown-timeout", &args.shutdown_timeout)?;
    let watch_timeout_secs = parse_duration("--watch-timeout", &args.watch_timeout)?
        .num_seconds()
        .clamp(1, i64::from(u32::MAX)) as u32;
    let request_timeout = std_duration("--request-timeout", &args.request_timeout)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&request_timeout) {
        bail!(
            "--request-timeout must be between 1s and 1h, not {}",
            args.request_timeout
        );
    }
    let clock_tolerance = parse_duration("--clock-tolerance", &args.clock_tolerance)?;
    let list_page_bytes =
        event_series::paging::parse_bytes("--list-page-bytes", &args.list_page_bytes)
            .map_err(anyhow::Error::msg)?;
    let timings = Timings {
        lease_duration: std_duration("--lease-duration", &args.lease_duration)?,
        renew_deadline: std_duration("--renew-deadline", &args.renew_deadline)?,
        retry_period: std_duration("--retry-period", &args.retry_period)?,
    };
    if args.leader_elect {
        timings.validate().map_err(anyhow::Error::msg)?;
    }
    let identity = args.instance.clone().unwrap_or_else(default_identity);
    let kube_config = kube::Config::infer()
        .await
        .context("no usable kubeconfig (KUBECONFIG, ~/.kube/config, or in-cluster)")?;
    let lease_namespace = args
        .lease_namespace
        .clone()
        .unwrap_or_else(|| kube_config.default_namespace.clone());
    let options = client::Options {
        request_timeout,
        user_agent: format!("event-series/{} ({identity})", env!("CARGO_PKG_VERSION")),
    };
    let client = client::build(kube_config, &options).context("building the API client")?;
    let metrics = Arc::new(Metrics::default());
    let stall_after = Duration::from_secs(watch_timeout_secs.into()) + WATCH_MARGIN;
    let health = Arc::new(Health::new(stall_after, request_timeout));
    Metrics::watch_readiness(metrics.clone(), health.clone());
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
                request_timeout,
            )),
        }
    } else {
        server::MetricsAccess::Open
    };
    let bound = server::serve_metrics(
        args.metrics_addr,
        Metrics::registry(&metrics),
        access,
        &pool,
    )
    .await
    .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;
    tracing::info!(metrics_addr = %bound, metrics_secure = args.metrics_secure,
        health_addr = %health_bound, namespace = ?args.namespace,
        heartbeat_interval = %duration::format(settings.heartbeat_interval),
        finish_after = %duration::format(settings.finish_after),
        series_window = %duration::format(settings.series_window),
        "event-series starting");
    let config = ControllerConfig {
        defaults: settings,
        namespace: args.namespace,
        writer: WriterConfig {
            qps: args.qps,
            burst: args.burst,
            max_pending: args.max_pending_writes,
            ..WriterConfig::default()
        },
        drain,
        watch_timeout_secs,
        watch_bookmarks: !args.no_watch_bookmarks,
        clock_tolerance,
        list_page_size: args.list_page_size,
        list_page_bytes,
    };
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut election = None;
    let mut fence = WriteFence::open();
    if args.leader_elect {
        let lease = LeaseConfig {
            name: args.lease_name.clone(),
            namespace: lease_namespace,
            identity: identity.clone(),
            timings,
            request_timeout,
        };
        let mut e = Election::start(client.clone(), lease.clone(), metrics.clone());
        // A standby is healthy and ready: it has nothing to serve until it leads.
        health.set_recovered(true);
        tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity,
            lease_duration = ?timings.lease_duration, renew_deadline = ?timings.renew_deadline,
            retry_period = ?timings.retry_period, "waiting for leadership");
        tokio::select! {
            acquired = e.acquired() => acquired?,
            _ = &mut shutdown => {
                e.release().await;
                return Ok(());
            }
        }
        tracing::info!(identity = %lease.identity, "leading: rebuilding the series state");
        health.set_recovered(false);
        fence = e.fence();
        election = Some(e);
    } else {
        metrics.leader.set(1);
    }
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
    let stopped = controller::run(client, config, metrics, health, fence, stop).await?;
    if let Some(e) = election {
        e.release().await;
    }
    if stopped == Stop::LeadershipLost {
        bail!("leadership lost: exiting so that this replica restarts as a standby");
    }
    tracing::info!("stopped");
    Ok(())
}

/// The flags of `event-series get` as a query; a malformed `--for` is a usage error (exit 2).
fn query(args: GetArgs) -> reading::Query {
    let regarding = match args.for_object.as_deref().map(reading::table::parse_for) {
        Some(Err(why)) => {
            eprintln!("error: {why}");
            std::process::exit(2);
        }
        Some(Ok(r)) => Some(r),
        None => None,
    };
    reading::Query {
        namespace: args.namespace,
        all_namespaces: args.all_namespaces,
        state: args.state.map(|s| s.as_str().to_owned()),
        selector: args.selector,
        regarding,
        format: match args.output {
            None => reading::Format::Table,
            Some(Output::Wide) => reading::Format::Wide,
            Some(Output::Json) => reading::Format::Json,
            Some(Output::Yaml) => reading::Format::Yaml,
        },
        watch: args.watch,
        kubeconfig: args.kubeconfig,
        context: args.context,
    }
}

/// A duration flag as a std `Duration` (the Kubernetes form: `90s`, `1m30s`).
fn std_duration(flag: &'static str, value: &str) -> anyhow::Result<Duration> {
    parse_duration(flag, value)?
        .to_std()
        .with_context(|| format!("{flag}: must not be negative"))
}

/// The host name (the pod name in Kubernetes), else something unique to this process.
fn default_identity() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("event-series-{}", std::process::id()))
}
