//! The command line: `event-series run`, `event-series get` (also `kubectl series`), `event-series crd`.

use crate::intent::SeriesState;
use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "event-series",
    version,
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
    Get(GetArgs),
    /// Print the EventSeriesPolicy CustomResourceDefinition as YAML.
    Crd,
}

/// `--state` takes the label values themselves (`Ongoing`, `Finished`, any case), so the one
/// `SeriesState` of the series objects serves the command line too.
impl ValueEnum for SeriesState {
    fn value_variants<'a>() -> &'a [Self] {
        &[SeriesState::Ongoing, SeriesState::Finished]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// More columns: REPORTER, NAME, NOTE.
    Wide,
    /// A v1 List of the series objects, as the API returned them.
    Json,
    Yaml,
}

/// `event-series get` / `kubectl series`: reads the series objects (events.k8s.io/v1 Events labelled
/// app.kubernetes.io/managed-by=event-series) with your own kubeconfig and rights.
#[derive(Debug, Clone, clap::Args)]
pub struct GetArgs {
    /// Namespace to read (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only series in this state.
    #[arg(long, value_enum, ignore_case = true)]
    pub state: Option<SeriesState>,
    /// Label selector, ANDed with the series label (for example eventseries.dev/state=Ongoing).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Only series about this object: kind/name, the kind case-insensitive (pod/web-0).
    #[arg(long = "for", value_name = "KIND/NAME")]
    pub for_object: Option<String>,
    /// Output format (default: the table).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// After the table, print a row whenever a series object is created or written.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Path of the kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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
    /// Default heartbeatInterval where no EventSeriesPolicy applies.
    #[arg(long, default_value = "30m")]
    pub heartbeat_interval: String,
    /// Default finishAfter where no EventSeriesPolicy applies.
    #[arg(long, default_value = "6m")]
    pub finish_after: String,
    /// Default seriesWindow where no EventSeriesPolicy applies.
    #[arg(long, default_value = "6m")]
    pub series_window: String,
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
    #[arg(long, default_value = "15s")]
    pub lease_duration: String,
    /// A leader that has not renewed the Lease for this long stops writing at once and exits 1.
    #[arg(long, default_value = "10s")]
    pub renew_deadline: String,
    /// How often each replica tries to take or renew the Lease.
    #[arg(long, default_value = "2s")]
    pub retry_period: String,
    /// Deadline of every request to the API server (a silent connection fails it; it is retried).
    #[arg(long, default_value = "30s")]
    pub request_timeout: String,
    /// Most series with a write pending; beyond it intake waits for the writer.
    #[arg(long, default_value_t = 200_000)]
    pub max_pending_writes: usize,
    /// How far an event's own timestamp may lie from the operator's clock and still time its
    /// occurrence; beyond it, the occurrence is timed by its arrival. Also how far in the future a
    /// stored series object's times may lie before they are clamped to now at a restart.
    #[arg(long, default_value = "10m")]
    pub clock_tolerance: String,
    /// Most raw events per page of a list (the first one, and a relist after 410 Gone).
    #[arg(long, default_value_t = 500)]
    pub list_page_size: u32,
    /// About how many bytes of JSON one list page may hold: pages are sized by the largest object
    /// of the page before, so that Events with 1 MB messages cannot make one page hundreds of MB.
    /// A number of bytes, or with Ki, Mi or Gi.
    #[arg(long, default_value = "1Mi")]
    pub list_page_bytes: String,
    /// Watch and write in this namespace only (default: the whole cluster).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Lifetime of one watch request; the watch then resumes from the last resourceVersion. A watch
    /// silent for longer than this plus 5 s is dead: it is resumed and counted as a stall. The end of
    /// each watch also proves the input current, which finishes wait for in a quiet cluster.
    #[arg(long, default_value = "60s")]
    pub watch_timeout: String,
    /// Benchmarks only (bench/bookmarks.sh): watch without allowWatchBookmarks, to measure what
    /// bookmarks save after a reconnect. Hidden: the SPEC requires bookmarks.
    #[arg(long, hide = true)]
    pub no_watch_bookmarks: bool,
    /// How long pending writes may take to flush on SIGTERM.
    #[arg(long, default_value = "10s")]
    pub shutdown_timeout: String,
}
