//! The command line: `event-series run`, `event-series get` (also `kubectl series`), `event-series crd`.

use crate::alerting::alertmanager::Target;
use crate::alerting::{AlertConfig, Limits};
use crate::controller::ControllerConfig;
use crate::input::{pace, paging};
use crate::leader::LeaseConfig;
use crate::leader::elector::{Timings, TimingsError};
use crate::operations::reporter::ReportConfig;
pub use crate::reading::args::{GetArgs, Output};
use crate::writer::WriterConfig;
use chrono::TimeDelta;
use clap::{Parser, Subcommand, ValueEnum};
use event_series_core::duration;
use event_series_core::settings::Settings;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "event-series",
    version,
    long_version = crate::operations::build::LONG_VERSION,
    about = "Server-side events.k8s.io series lifecycle for a whole Kubernetes cluster",
    long_about = "Watches every core/v1 Event, groups isomorphic events into series, and keeps one \
                  events.k8s.io/v1 Event per series: created when a loop starts, refreshed by a \
                  heartbeat, marked Finished (label eventseries.dev/state) when the loop stops."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller (kubeconfig: KUBECONFIG, ~/.kube/config, or in-cluster).
    Run(Box<RunArgs>),
    /// Print the series as a table, one row per loop, newest last (also `kubectl series`).
    Get(Box<GetArgs>),
    /// Print the EventSeriesPolicy CustomResourceDefinition as YAML.
    Crd,
    /// Print a shell completion script (source it, or save it where your shell loads completions).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// What a replica that does not hold the Lease does meanwhile (`--standby`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Standby {
    /// Runs the same lists and watches as the leader and keeps its engine current, writing nothing.
    Warm,
    /// Starts nothing until it holds the Lease, then rebuilds from the stored objects.
    Cold,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Address of the /metrics server: HTTPS, and a request needs a bearer token the API server
    /// accepts for a user who may `get` the non-resource URL /metrics (TokenReview and
    /// SubjectAccessReview, cached briefly); see --metrics-secure.
    #[arg(
        long,
        default_value = "0.0.0.0:8443",
        env = "EVENT_SERIES_METRICS_ADDR"
    )]
    pub metrics_addr: SocketAddr,
    /// false: serve /metrics over plain HTTP to anyone who can reach the port (local development).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
        default_missing_value = "true", env = "EVENT_SERIES_METRICS_SECURE")]
    pub metrics_secure: bool,
    /// Directory with tls.crt and tls.key for /metrics (a mounted kubernetes.io/tls Secret, re-read
    /// when it changes); without it a self-signed certificate is made at start.
    #[arg(long, env = "EVENT_SERIES_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Address of the /healthz and /readyz server (plain HTTP, for the kubelet's probes).
    #[arg(long, default_value = "0.0.0.0:8081", env = "EVENT_SERIES_HEALTH_ADDR")]
    pub health_addr: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "EVENT_SERIES_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// `info,event_series::writer=debug`. Default: RUST_LOG, else info.
    #[arg(long, value_parser = log_level)]
    pub log_level: Option<String>,
    /// Default heartbeatInterval where no EventSeriesPolicy applies.
    #[arg(long, default_value = "30m", value_parser = duration::parse_value)]
    pub heartbeat_interval: TimeDelta,
    /// Default firstRefresh where no EventSeriesPolicy applies (0: no early refreshes).
    #[arg(long, default_value = "1m", value_parser = duration::parse_value_or_off)]
    pub first_refresh: TimeDelta,
    /// Default finishAfter where no EventSeriesPolicy applies.
    #[arg(long, default_value = "6m", value_parser = duration::parse_value)]
    pub finish_after: TimeDelta,
    /// Default seriesWindow where no EventSeriesPolicy applies.
    #[arg(long, default_value = "6m", value_parser = duration::parse_value)]
    pub series_window: TimeDelta,
    /// Default maxActiveSeries where no EventSeriesPolicy applies. Each 10,000 series more need
    /// about 30 MiB more memory limit (docs/HOW-IT-WORKS.md, Memory is bounded).
    #[arg(long, default_value_t = Settings::default().max_active_series as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_active_series: u64,
    /// Client-side limit on API writes per second.
    #[arg(long, default_value_t = 50.0)]
    pub qps: f64,
    /// Client-side burst of API writes.
    #[arg(long, default_value_t = 100)]
    pub burst: u32,
    /// This replica's identity, the Lease holder (the pod name in a Deployment; default: the host name).
    #[arg(long, env = "POD_NAME")]
    pub instance: Option<String>,
    /// Run only while holding a coordination.k8s.io/v1 Lease, so that several replicas can run.
    #[arg(long, env = "EVENT_SERIES_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "event-series")]
    pub lease_name: String,
    /// Namespace of the Lease (default: the pod's namespace, from POD_NAMESPACE or the service account).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long the Lease stays valid after a renewal: the longest a standby waits for a dead leader.
    #[arg(long, default_value = "15s", value_parser = duration::parse_std)]
    pub lease_duration: Duration,
    /// A leader that has not renewed the Lease for this long stops writing at once and exits 1.
    #[arg(long, default_value = "10s", value_parser = duration::parse_std)]
    pub renew_deadline: Duration,
    /// How often each replica tries to take or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = duration::parse_std)]
    pub retry_period: Duration,
    /// Deadline of every request to the API server (a silent connection fails it; it is retried).
    /// Between 1s and 1h.
    #[arg(long, default_value = "30s", value_parser = request_timeout)]
    pub request_timeout: Duration,
    /// Most series with a write pending, shared by the namespaces with writes pending: a namespace
    /// at its share (this bound divided by their number) has its new writes shed and counted
    /// (event_series_writes_shed_total); one under it always finds room, at the cost of the newest
    /// write of the namespace holding the most. Intake never waits for the writer.
    #[arg(long, default_value_t = WriterConfig::default().max_pending)]
    pub max_pending_writes: usize,
    /// Most series of one namespace with a write pending, whatever its share.
    #[arg(long, default_value_t = WriterConfig::default().max_pending_per_namespace)]
    pub max_pending_writes_per_namespace: usize,
    /// How far an event's own timestamp may lie from the operator's clock and still time its
    /// occurrence; beyond it, the occurrence is timed by its arrival. Also how far in the future a
    /// stored series object's times may lie before they are clamped to now at a restart.
    #[arg(long, default_value = "10m", value_parser = duration::parse_value)]
    pub clock_tolerance: TimeDelta,
    /// The API server's --event-ttl (how long an Event lives after its last write). Heartbeats are
    /// spaced out to the writer's rate (3/4 of --qps) but never put off past 3/4 of it, so that no
    /// series object expires between two writes.
    #[arg(long, default_value = "1h", value_parser = duration::parse_value)]
    pub event_ttl: TimeDelta,
    /// Most raw events per page of a list (the first one, and a relist after 410 Gone).
    #[arg(long, default_value_t = 500)]
    pub list_page_size: u32,
    /// About how many bytes of JSON one list page may hold: pages are sized by the largest object
    /// of the page before, so that one response does not take long to arrive (whatever a page
    /// holds, it is read one object at a time, each cut to its limits as it is decoded).
    /// A number of bytes, or with Ki, Mi or Gi.
    #[arg(long, default_value = "1Mi", value_parser = paging::parse_bytes)]
    pub list_page_bytes: usize,
    /// About how many bytes of raw events a restart buffers to replay in time order: a full buffer
    /// pauses the list until the own series are restored, then is replayed early (a small one costs
    /// only more, smaller replays). A number of bytes, or with Ki, Mi or Gi.
    #[arg(long, default_value = "8Mi", value_parser = paging::parse_bytes)]
    pub restart_buffer_bytes: usize,
    /// Most bytes of keys the engine holds for series and candidates (a key at every field limit
    /// takes about 4.6 KB): beyond it the namespace holding the most bytes of keys gives up its
    /// candidates, then its series (written Finished, counted in
    /// event_series_series_evicted_total{reason="key_bytes"}).
    /// A number of bytes, or with Ki, Mi or Gi.
    #[arg(long, default_value = "32Mi", value_parser = paging::parse_bytes)]
    pub max_key_bytes: usize,
    /// Watch and write in this namespace only (default: the whole cluster).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Lifetime of one watch request; the watch then resumes from the last resourceVersion. A watch
    /// silent for longer than this plus 5 s is dead: it is resumed and counted as a stall. The end of
    /// each watch also proves the input current, which finishes wait for in a quiet cluster.
    #[arg(long, default_value = "60s", value_parser = duration::parse_std)]
    pub watch_timeout: Duration,
    /// Benchmarks only (bench/bookmarks.sh): watch without allowWatchBookmarks, to measure what
    /// bookmarks save after a reconnect. Hidden: the contract requires bookmarks.
    #[arg(long, hide = true)]
    pub no_watch_bookmarks: bool,
    /// Benchmarks only (bench/failover.sh): `cold` makes a replica wait for the Lease before it
    /// lists or watches anything, and only then rebuild its series, as every change of leader once
    /// did; the baseline that the warm standby (the default) is measured against. Hidden: a cold
    /// standby is not a supported way to run.
    #[arg(long, value_enum, default_value_t = Standby::Warm, hide = true)]
    pub standby: Standby,
    /// How long the restore (the list of the own series objects) may go without receiving a page
    /// before the replica gives up the Lease and exits 1, so that a standby tries; /healthz fails
    /// meanwhile. Progress, not total time, is bounded.
    #[arg(long, default_value = "10m", value_parser = duration::parse_std)]
    pub restore_timeout: Duration,
    /// The share of time each of a standby's lists may hold a request at the API server, so that its
    /// start does not slow the leader's renewals (0.5: pause as long as each answer took; 1: none).
    #[arg(long, default_value = "0.5", value_parser = pace::parse_share)]
    pub standby_list_share: f64,
    /// How long pending writes may take to flush on SIGTERM.
    #[arg(long, default_value = "10s", value_parser = duration::parse_std)]
    pub shutdown_timeout: Duration,
    /// Most label sets of event_series_loops{namespace,reason,type,state}; beyond it the smallest
    /// are summed into one whose labels are `other`.
    #[arg(long, default_value_t = 500)]
    pub max_loop_label_sets: usize,
    /// The operator's own trouble (writes rejected or shed, names taken, alerts undelivered, series
    /// given up) is reported as Warning Events on the policy governing the namespace, or on the
    /// operator's Pod: at most one per reason and object per this interval.
    #[arg(long, default_value = "60s", value_parser = duration::parse_std)]
    pub report_interval: Duration,
    /// How long a policy's `Degraded` condition stays True after the last trouble it reports.
    #[arg(long, default_value = "5m", value_parser = duration::parse_std)]
    pub degraded_for: Duration,
    #[command(flatten)]
    pub alerts: AlertArgs,
}

/// Loops as Alertmanager alerts (the loops a policy's spec.alert selects).
#[derive(Debug, clap::Args)]
pub struct AlertArgs {
    /// Alertmanager base URL (http:// or https://); repeat, or separate with commas, for several:
    /// each gets every alert. None: no alerts.
    #[arg(
        long = "alertmanager-url",
        value_name = "URL",
        value_delimiter = ',',
        env = "EVENT_SERIES_ALERTMANAGER_URL"
    )]
    pub urls: Vec<String>,
    /// PEM file of the CA that signed the Alertmanagers' certificates (default: the system's).
    #[arg(long = "alertmanager-ca-file", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// File holding a bearer token for Alertmanager (read at each post).
    #[arg(
        long = "alertmanager-bearer-token-file",
        value_name = "FILE",
        conflicts_with = "username"
    )]
    pub bearer_token_file: Option<PathBuf>,
    /// User name for basic auth to Alertmanager.
    #[arg(
        long = "alertmanager-username",
        value_name = "USER",
        env = "EVENT_SERIES_ALERTMANAGER_USERNAME"
    )]
    pub username: Option<String>,
    /// File holding the basic-auth password (read at each post).
    #[arg(
        long = "alertmanager-password-file",
        value_name = "FILE",
        requires = "username"
    )]
    pub password_file: Option<PathBuf>,
    /// Send the bearer token or basic-auth password to http:// Alertmanager URLs too (warned about
    /// at start). Without it, credentials with an http:// URL refuse the start.
    #[arg(long = "alertmanager-allow-plaintext-credentials")]
    pub allow_plaintext_credentials: bool,
    /// How often every firing alert is posted again; each post is valid for four of these, so an
    /// alert whose loop's leader died stays firing through the failover.
    /// At least 5s (the loops are scanned every 5 s). Keep four of these longer than a failover
    /// (the lease duration plus the restore of the own series objects, after which a new leader
    /// posts), or alerts lapse and fire again meanwhile.
    #[arg(long = "alert-resend-interval", default_value = "1m", value_parser = resend_interval)]
    pub resend: TimeDelta,
    /// Most loops alerting at once (the oldest first, a younger one preempted); beyond it, loops are
    /// counted in event_series_alerts_over_limit, not alerted.
    #[arg(long = "max-alerts", default_value_t = 10_000)]
    pub max: usize,
    /// Most loops of one namespace alerting at once, so that one tenant cannot take every alert.
    #[arg(long = "max-alerts-per-namespace", default_value_t = 100)]
    pub max_per_namespace: usize,
    /// Most bytes of alerts waiting for delivery (while Alertmanager is down or slow); when they are
    /// full, the namespace holding the most of them gives up its newest (counted in
    /// event_series_alerts_sent_total{outcome="dropped"}). A number of bytes, or with Ki, Mi or Gi.
    #[arg(long = "alert-outbox-bytes", default_value = "32Mi", value_parser = paging::parse_bytes)]
    pub outbox_bytes: usize,
}

/// `--alert-resend-interval`: at least the scan interval of 5 s.
fn resend_interval(value: &str) -> Result<TimeDelta, String> {
    let d = duration::parse_value(value).map_err(|e| e.to_string())?;
    if d < TimeDelta::seconds(5) {
        return Err(format!(
            "{value:?} is shorter than 5s, the interval the loops are scanned at"
        ));
    }
    Ok(d)
}

impl AlertArgs {
    /// `None` without an Alertmanager URL.
    pub fn config(&self, timeout: Duration) -> Option<AlertConfig> {
        (!self.urls.is_empty()).then(|| AlertConfig {
            target: Target {
                urls: self.urls.clone(),
                ca_file: self.ca_file.clone(),
                bearer_token_file: self.bearer_token_file.clone(),
                username: self.username.clone(),
                password_file: self.password_file.clone(),
                timeout,
                allow_plaintext_credentials: self.allow_plaintext_credentials,
            },
            resend: self.resend,
            limits: Limits {
                max: self.max,
                max_per_namespace: self.max_per_namespace,
            },
            outbox_bytes: self.outbox_bytes,
        })
    }
}

/// `--request-timeout`: between 1 s and 1 h.
fn request_timeout(value: &str) -> Result<Duration, duration::DurationError> {
    let d = duration::parse_std(value)?;
    if d > Duration::from_secs(3600) {
        return Err(duration::DurationError::TooLong(value.to_owned()));
    }
    Ok(d)
}

impl RunArgs {
    /// The settings of the namespaces no EventSeriesPolicy selects.
    pub fn settings(&self) -> Settings {
        Settings {
            heartbeat_interval: self.heartbeat_interval,
            first_refresh: self.first_refresh,
            finish_after: self.finish_after,
            series_window: self.series_window,
            max_active_series: usize::try_from(self.max_active_series).unwrap_or(usize::MAX),
            ..Settings::default()
        }
    }

    /// Lifetime of one watch request, in the whole seconds the API takes.
    pub fn watch_timeout_secs(&self) -> u32 {
        self.watch_timeout.as_secs().clamp(1, u64::from(u32::MAX)) as u32
    }

    pub fn controller(&self) -> ControllerConfig {
        ControllerConfig {
            defaults: self.settings(),
            namespace: self.namespace.clone(),
            writer: WriterConfig {
                qps: self.qps,
                burst: self.burst,
                max_pending: self.max_pending_writes,
                max_pending_per_namespace: self.max_pending_writes_per_namespace,
                ..WriterConfig::default()
            },
            drain: self.shutdown_timeout,
            watch_timeout_secs: self.watch_timeout_secs(),
            watch_bookmarks: !self.no_watch_bookmarks,
            clock_tolerance: self.clock_tolerance,
            event_ttl: self.event_ttl,
            key_bytes: self.max_key_bytes,
            list_page_size: self.list_page_size,
            list_page_bytes: self.list_page_bytes,
            restart_buffer_bytes: self.restart_buffer_bytes,
            restore_timeout: self.restore_timeout,
            standby_list_share: self.standby_list_share,
            alerts: self.alerts.config(self.request_timeout),
            max_loop_label_sets: self.max_loop_label_sets,
            report: ReportConfig {
                interval: self.report_interval,
                quiet: self.degraded_for,
                pod: ReportConfig::own_pod(),
                instance: self.instance.clone().unwrap_or_default(),
            },
        }
    }

    /// The Lease to hold with `--leader-elect` (`None` without it), checked against client-go's
    /// rules; `default_namespace` is the kubeconfig's (the pod's in a cluster).
    pub fn lease(
        &self,
        default_namespace: &str,
        identity: &str,
    ) -> Result<Option<LeaseConfig>, TimingsError> {
        if !self.leader_elect {
            return Ok(None);
        }
        let timings = Timings {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        };
        timings.validate()?;
        Ok(Some(LeaseConfig {
            name: self.lease_name.clone(),
            namespace: self
                .lease_namespace
                .clone()
                .unwrap_or_else(|| default_namespace.to_owned()),
            identity: identity.to_owned(),
            timings,
            request_timeout: self.request_timeout,
        }))
    }
}

/// A log level or filter directive the tracing subscriber accepts.
fn log_level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("{s:?} is not a log level or filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn run_args(extra: &[&str]) -> RunArgs {
        let args = ["event-series", "run"].iter().chain(extra);
        match Cli::try_parse_from(args).expect("parses").command {
            Command::Run(args) => *args,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn the_series_bound_where_no_policy_applies_is_a_flag() {
        assert_eq!(
            run_args(&[]).settings().max_active_series,
            Settings::default().max_active_series
        );
        let raised = run_args(&["--max-active-series", "100000"]).settings();
        assert_eq!(raised.max_active_series, 100_000);
        assert_eq!(raised.max_candidates(), 200_000);
        for bad in ["0", "-1", "lots", "10000001"] {
            let e = Cli::try_parse_from(["event-series", "run", "--max-active-series", bad]);
            assert!(e.is_err(), "--max-active-series {bad} is refused");
        }
    }

    #[test]
    fn standby_is_warm_unless_a_benchmark_asks_for_cold() {
        assert_eq!(run_args(&[]).standby, Standby::Warm);
        assert_eq!(run_args(&["--standby", "cold"]).standby, Standby::Cold);
        assert!(Cli::try_parse_from(["event-series", "run", "--standby", "lukewarm"]).is_err());
        assert_eq!(run_args(&[]).standby_list_share, 0.5);
        assert_eq!(
            run_args(&["--standby-list-share", "1"]).standby_list_share,
            1.0
        );
        let e = Cli::try_parse_from(["event-series", "run", "--standby-list-share", "0"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("not a share above 0"), "{e}");
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("run")
            .expect("run")
            .render_long_help()
            .to_string();
        assert!(!help.contains("--standby "), "a benchmark flag is hidden");
        assert!(help.contains("--standby-list-share"));
    }
}
