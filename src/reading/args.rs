//! The flags of `event-series get` (and `kubectl series`), and the [`Query`] they make.

use super::table::parse_for;
use super::{Format, Query};
use clap::ValueEnum;
use event_series_core::duration;
use event_series_core::intent::SeriesState;
use std::path::PathBuf;

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
    /// Only series in this state: Ongoing or Finished (any case).
    #[arg(long)]
    pub state: Option<SeriesState>,
    /// Label selector, ANDed with the series label (for example eventseries.dev/state=Ongoing).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Only series about this object: kind/name, the kind case-insensitive (pod/web-0).
    #[arg(long = "for", value_name = "KIND/NAME", value_parser = parse_for)]
    pub for_object: Option<(String, String)>,
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
    /// Print the rows without the header line.
    #[arg(long)]
    pub no_headers: bool,
    /// The deadline of each request, such as 30s or 1m (0: none). Not of the --watch stream.
    #[arg(long, value_name = "DURATION", value_parser = parse_request_timeout)]
    pub request_timeout: Option<std::time::Duration>,
    /// The user to impersonate for the requests.
    #[arg(long = "as", value_name = "USER")]
    pub impersonate: Option<String>,
    /// A group to impersonate (repeat for more); needs --as.
    #[arg(long = "as-group", value_name = "GROUP", requires = "impersonate")]
    pub impersonate_groups: Vec<String>,
}

/// `--request-timeout`: a duration in the project's syntax, or `0` for none (as kubectl).
fn parse_request_timeout(s: &str) -> Result<std::time::Duration, String> {
    if s.trim() == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    duration::parse_std(s).map_err(|e| e.to_string())
}

impl GetArgs {
    /// The flags as a query.
    pub fn query(self) -> Query {
        Query {
            namespace: self.namespace,
            all_namespaces: self.all_namespaces,
            state: self.state.map(|s| s.as_str().to_owned()),
            selector: self.selector,
            regarding: self.for_object,
            format: match self.output {
                None => Format::Table,
                Some(Output::Wide) => Format::Wide,
                Some(Output::Json) => Format::Json,
                Some(Output::Yaml) => Format::Yaml,
            },
            watch: self.watch,
            kubeconfig: self.kubeconfig,
            context: self.context,
            no_headers: self.no_headers,
            request_timeout: self.request_timeout.filter(|d| !d.is_zero()),
            impersonate: self.impersonate,
            impersonate_groups: self.impersonate_groups,
        }
    }
}
