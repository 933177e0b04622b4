//! `event-series get` (and `kubectl series`): the series objects read back as series, one row per
//! loop with its state, duration and rate, newest last. `kubectl get events` mixes raw rows with
//! series rows and cannot sort by last seen; this reads only the series objects, with the user's own
//! kubeconfig and rights. [`table`] is the pure part; this module talks to the API server.

pub mod args;
pub mod escape;
mod invisible;
pub mod table;

use crate::object::{STATE_LABEL, managed_selector};
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use std::io::Write;
use std::path::PathBuf;
use table::{Filter, Layout, Row};

/// How the series are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
}

/// What to read and how to print it (the flags of `event-series get`).
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub namespace: Option<String>,
    pub all_namespaces: bool,
    /// `Ongoing` or `Finished`.
    pub state: Option<String>,
    pub selector: Option<String>,
    /// `--for kind/name`.
    pub regarding: Option<(String, String)>,
    pub format: Format,
    pub watch: bool,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// `--no-headers`.
    pub no_headers: bool,
    /// `--request-timeout`: the deadline of each request (not of the `--watch` stream).
    pub request_timeout: Option<std::time::Duration>,
    /// `--as` and `--as-group`: impersonation, as kubectl does it.
    pub impersonate: Option<String>,
    pub impersonate_groups: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The API's own message, printed as kubectl prints it.
    #[error("Error from server (Forbidden): {0}")]
    Forbidden(String),
    #[error("Error from server ({reason}): {message}")]
    Server { reason: String, message: String },
    #[error("{0}")]
    Request(kube::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("printing: {0}")]
    Output(String),
}

impl From<kube::Error> for ReadError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.code == 403 => ReadError::Forbidden(s.message),
            kube::Error::Api(s) => ReadError::Server {
                reason: s.reason,
                message: s.message,
            },
            other => ReadError::Request(other),
        }
    }
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Output(e.to_string())
    }
}

/// The label selector sent to the API: the series label, the state, the user's own.
pub fn selector(q: &Query) -> String {
    let mut s = managed_selector();
    if let Some(state) = &q.state {
        s.push_str(&format!(",{STATE_LABEL}={state}"));
    }
    if let Some(user) = q.selector.as_deref().filter(|u| !u.trim().is_empty()) {
        s.push(',');
        s.push_str(user);
    }
    s
}

async fn client(q: &Query) -> Result<(kube::Client, String), ReadError> {
    let options = KubeConfigOptions {
        context: q.context.clone(),
        ..KubeConfigOptions::default()
    };
    let bad = |e: kube::config::KubeconfigError| ReadError::Kubeconfig(e.to_string());
    let config = match &q.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(bad)?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(bad)?
        }
        None if q.context.is_some() => {
            kube::Config::from_kubeconfig(&options).await.map_err(bad)?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ReadError::Kubeconfig(e.to_string()))?,
    };
    let mut config = config;
    if let Some(deadline) = q.request_timeout.filter(|_| !q.watch) {
        config.connect_timeout = Some(deadline);
        config.read_timeout = Some(deadline);
        config.write_timeout = Some(deadline);
    }
    if let Some(user) = &q.impersonate {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !q.impersonate_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(q.impersonate_groups.clone());
    }
    let namespace = q
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config)?;
    Ok((client, namespace))
}

/// Every series object the query selects, a page of 500 at a time.
async fn list(api: &Api<Event>, selector: &str) -> Result<Vec<Event>, ReadError> {
    let mut items = Vec::new();
    let mut params = ListParams::default().labels(selector).limit(500);
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}

/// Runs the query, printing to `out` (tables, lists) and `err` (the "no series" notice, as kubectl
/// prints "No resources found" to stderr so that a pipe sees only data).
pub async fn get(q: &Query, out: &mut impl Write, err: &mut impl Write) -> Result<(), ReadError> {
    let (client, namespace) = client(q).await?;
    let api: Api<Event> = if q.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &namespace)
    };
    let selector = selector(q);
    let filter = Filter {
        regarding: q.regarding.clone(),
    };
    let layout = Layout {
        namespaces: q.all_namespaces,
        wide: q.format == Format::Wide,
        no_headers: q.no_headers,
    };
    let mut events = list(&api, &selector).await?;
    events.retain(|e| filter.admits(e));
    match q.format {
        Format::Json | Format::Yaml => {
            table::sort_events(&mut events);
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {},
                "items": events,
            });
            let text = if q.format == Format::Json {
                serde_json::to_string_pretty(&list).map_err(|e| ReadError::Output(e.to_string()))?
                    + "\n"
            } else {
                serde_yaml_ng::to_string(&list).map_err(|e| ReadError::Output(e.to_string()))?
            };
            out.write_all(text.as_bytes())?;
            return Ok(());
        }
        Format::Table | Format::Wide => {}
    }
    let rows = table::rows(&events, &filter);
    let now = chrono::Utc::now();
    let (text, columns) = table::render(&rows, layout, now);
    if rows.is_empty() {
        if q.all_namespaces {
            writeln!(err, "No series found.")?;
        } else {
            writeln!(err, "No series found in {namespace} namespace.")?;
        }
    } else {
        out.write_all(text.as_bytes())?;
    }
    out.flush()?;
    if q.watch {
        let printer = Printer {
            layout,
            columns,
            header_shown: q.no_headers || !rows.is_empty(),
        };
        follow(api, &selector, &filter, printer, out, err).await?;
    }
    Ok(())
}

/// Rows printed one at a time under the table (or under a header of their own when the table was
/// empty).
struct Printer {
    layout: Layout,
    columns: table::Columns,
    header_shown: bool,
}

impl Printer {
    fn row(&mut self, ev: &Event, out: &mut impl Write) -> std::io::Result<()> {
        let cells = self.layout.cells(&Row::of(ev), chrono::Utc::now());
        if !self.header_shown {
            let header = self.layout.header();
            self.columns.fit(&[header.clone(), cells.clone()]);
            out.write_all(self.columns.line(&header).as_bytes())?;
            self.header_shown = true;
        }
        out.write_all(self.columns.line(&cells).as_bytes())?;
        out.flush()
    }
}

/// `--watch`: a row for every series object created or written after the table, until interrupted.
/// The watch resumes by itself (kube's watcher, with bookmarks); a relist prints nothing again.
async fn follow(
    api: Api<Event>,
    selector: &str,
    filter: &Filter,
    mut printer: Printer,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), ReadError> {
    use kube::runtime::WatchStreamExt;
    let config = watcher::Config::default().labels(selector);
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut listing = true;
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(event) => event,
            Err(e) => {
                // Lost rights end the watch; anything else is retried with backoff.
                let e = match e {
                    watcher::Error::InitialListFailed(e)
                    | watcher::Error::WatchStartFailed(e)
                    | watcher::Error::WatchFailed(e) => ReadError::from(e),
                    other => ReadError::Output(other.to_string()),
                };
                if matches!(e, ReadError::Forbidden(_)) {
                    return Err(e);
                }
                writeln!(err, "watch: {e} (retrying)")?;
                continue;
            }
        };
        match event {
            watcher::Event::Init | watcher::Event::InitApply(_) => listing = true,
            watcher::Event::InitDone => listing = false,
            watcher::Event::Apply(ev) if !listing && filter.admits(&ev) => {
                printer.row(&ev, out)?;
            }
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => {}
        }
    }
    Ok(())
}
