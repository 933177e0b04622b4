//! The series as a table: from series objects and an injected clock to rows and text. No I/O, so
//! that the table is tested to the character.

use crate::object::{STATE_LABEL, WRITTEN_AT_ANNOTATION};
pub use crate::reading::escape::visible;
use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::key::normalise::to_chrono;
use k8s_openapi::api::events::v1::Event;

/// One series, as `event-series get` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub namespace: String,
    /// `kind/name` of `regarding`, the kind in lower case as kubectl prints it.
    pub object: String,
    pub reason: String,
    pub count: u64,
    pub state: String,
    pub started: Option<DateTime<Utc>>,
    pub last_seen: Option<DateTime<Utc>>,
    /// When the operator last wrote the object (`eventseries.dev/written-at`): how old this view is.
    pub written: Option<DateTime<Utc>>,
    pub reporter: String,
    pub name: String,
    pub note: String,
}

impl Row {
    pub fn of(ev: &Event) -> Row {
        let regarding = ev.regarding.as_ref();
        let kind = regarding
            .and_then(|r| r.kind.as_deref())
            .unwrap_or("")
            .to_lowercase();
        let object_name = regarding.and_then(|r| r.name.as_deref()).unwrap_or("");
        let object = match (kind.is_empty(), object_name.is_empty()) {
            (true, true) => "<none>".to_owned(),
            _ => format!("{kind}/{object_name}"),
        };
        let started = ev.event_time.as_ref().map(|t| to_chrono(t.0));
        let last_seen = ev
            .series
            .as_ref()
            .map(|s| to_chrono(s.last_observed_time.0))
            .or(started);
        Row {
            namespace: ev.metadata.namespace.clone().unwrap_or_default(),
            object,
            reason: ev.reason.clone().unwrap_or_default(),
            count: ev
                .series
                .as_ref()
                .map_or(1, |s| u64::try_from(s.count).unwrap_or(0)),
            state: ev
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(STATE_LABEL))
                .cloned()
                .unwrap_or_default(),
            started,
            last_seen,
            written: ev
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(WRITTEN_AT_ANNOTATION))
                .and_then(|w| DateTime::parse_from_rfc3339(w).ok())
                .map(|w| w.with_timezone(&Utc)),
            reporter: ev.reporting_controller.clone().unwrap_or_default(),
            name: ev.metadata.name.clone().unwrap_or_default(),
            note: ev.note.clone().unwrap_or_default(),
        }
    }

    /// Last seen minus started: how long the loop has lasted.
    pub fn duration(&self) -> Option<TimeDelta> {
        Some(self.last_seen? - self.started?)
    }

    /// Occurrences per minute over the loop's duration; `None` under a minute, where two
    /// occurrences a second apart would read as a rate of 120.
    pub fn rate_per_minute(&self) -> Option<f64> {
        let d = self.duration()?;
        (d >= TimeDelta::minutes(1))
            .then(|| self.count as f64 * 60.0 / (d.num_milliseconds() as f64 / 1000.0))
    }
}

/// What the user asked to see, beyond what the API's label selector already filtered.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// `--for kind/name`: the kind compared case-insensitively, as `kubectl events --for` does.
    pub regarding: Option<(String, String)>,
}

impl Filter {
    pub fn admits(&self, ev: &Event) -> bool {
        let Some((kind, name)) = &self.regarding else {
            return true;
        };
        let r = ev.regarding.as_ref();
        r.and_then(|r| r.kind.as_deref())
            .is_some_and(|k| k.eq_ignore_ascii_case(kind))
            && r.and_then(|r| r.name.as_deref()) == Some(name)
    }
}

/// A `--for` value that is not `kind/name`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?}: expected kind/name, such as pod/web-0")]
pub struct BadFor(String);

/// Parses `--for`: `kind/name` (`pod/web-0`, `Deployment/api`).
pub fn parse_for(value: &str) -> Result<(String, String), BadFor> {
    match value.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((kind.to_owned(), name.to_owned()))
        }
        _ => Err(BadFor(value.to_owned())),
    }
}

/// Newest last, like `kubectl events`: by last seen, then namespace and name, so the order is stable.
pub fn sort(rows: &mut [Row]) {
    rows.sort_by(|a, b| {
        a.last_seen
            .cmp(&b.last_seen)
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// How much of the note `-o wide` shows.
pub const NOTE_WIDTH: usize = 60;

/// The columns to print.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    /// `-A`: a NAMESPACE column first.
    pub namespaces: bool,
    /// `-o wide`: REPORTER, NAME and NOTE too.
    pub wide: bool,
    /// `--no-headers`: rows only.
    pub no_headers: bool,
}

impl Layout {
    pub fn header(&self) -> Vec<String> {
        let mut h: Vec<&str> = Vec::new();
        if self.namespaces {
            h.push("NAMESPACE");
        }
        h.extend([
            "OBJECT",
            "REASON",
            "COUNT",
            "STATE",
            "STARTED",
            "LAST SEEN",
            "WRITTEN",
            "DURATION",
            "RATE",
        ]);
        if self.wide {
            h.extend(["REPORTER", "NAME", "NOTE"]);
        }
        h.into_iter().map(str::to_owned).collect()
    }

    /// The row's cells, every text from the object made visible ([`visible`]).
    pub fn cells(&self, row: &Row, now: DateTime<Utc>) -> Vec<String> {
        let ago = |t: Option<DateTime<Utc>>| t.map_or("<unknown>".to_owned(), |t| age(now - t));
        let mut c = Vec::new();
        if self.namespaces {
            c.push(visible(&row.namespace));
        }
        c.extend([
            visible(&row.object),
            visible(&row.reason),
            row.count.to_string(),
            visible(&row.state),
            ago(row.started),
            ago(row.last_seen),
            ago(row.written),
            row.duration().map_or("<unknown>".to_owned(), age),
            row.rate_per_minute()
                .map_or("-".to_owned(), |r| format!("{r:.1}")),
        ]);
        if self.wide {
            c.extend([
                visible(&row.reporter),
                visible(&row.name),
                one_line(&row.note),
            ]);
        }
        c
    }
}

/// The note on one line, made visible, cut at [`NOTE_WIDTH`] characters: line breaks and tabs
/// become spaces, other hidden characters are escaped as by [`visible`].
fn one_line(note: &str) -> String {
    let flat: String = note
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect();
    let flat = visible(&flat);
    if flat.chars().count() <= NOTE_WIDTH {
        return flat;
    }
    let mut cut: String = flat.chars().take(NOTE_WIDTH - 3).collect();
    cut.push_str("...");
    cut
}

/// Column widths that only grow, so that rows printed later (`--watch`) line up with the table
/// above them, as far as they fit.
#[derive(Clone, Debug, Default)]
pub struct Columns {
    widths: Vec<usize>,
}

impl Columns {
    /// Widens the columns to fit `lines`.
    pub fn fit(&mut self, lines: &[Vec<String>]) {
        for line in lines {
            if self.widths.len() < line.len() {
                self.widths.resize(line.len(), 0);
            }
            for (w, cell) in self.widths.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }

    /// One line, cells padded to the columns and three spaces apart (kubectl's tabwriter look); the
    /// last cell is not padded.
    pub fn line(&self, cells: &[String]) -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                let width = self.widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count()) + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
        out
    }
}

/// The whole table, header and rows in the order given, and its columns (for rows that follow).
pub fn render(rows: &[Row], layout: Layout, now: DateTime<Utc>) -> (String, Columns) {
    let mut lines = Vec::with_capacity(rows.len() + 1);
    if !layout.no_headers {
        lines.push(layout.header());
    }
    lines.extend(rows.iter().map(|r| layout.cells(r, now)));
    let mut columns = Columns::default();
    columns.fit(&lines);
    (lines.iter().map(|l| columns.line(l)).collect(), columns)
}

/// A duration as kubectl prints ages: two significant units while they matter (`90s`, `5m30s`,
/// `2h15m`, `3d4h`), one after; a negative one (a clock ahead) as `0s`.
pub fn age(d: TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    let (m, h, days) = (s / 60, s / 3_600, s / 86_400);
    let years = days / 365;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        match s % 60 {
            0 => format!("{m}m"),
            rest => format!("{m}m{rest}s"),
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            rest => format!("{h}h{rest}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if years < 8 {
        match days % 365 {
            0 => format!("{years}y"),
            rest => format!("{years}y{rest}d"),
        }
    } else {
        format!("{years}y")
    }
}

/// Rows of `events` that `filter` admits, sorted newest last.
pub fn rows(events: &[Event], filter: &Filter) -> Vec<Row> {
    let mut rows: Vec<Row> = events
        .iter()
        .filter(|e| filter.admits(e))
        .map(Row::of)
        .collect();
    sort(&mut rows);
    rows
}

/// The same order for the objects themselves (`-o json|yaml`).
pub fn sort_events(events: &mut [Event]) {
    events.sort_by_cached_key(|e| {
        let r = Row::of(e);
        (r.last_seen, r.namespace, r.name)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (-5, "0s"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (330, "5m30s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3_600, "3h"),
            (2 * 3_600 + 15 * 60 + 3 * 3_600, "5h15m"),
            (8 * 3_600, "8h"),
            (47 * 3_600, "47h"),
            (2 * 86_400, "2d"),
            (3 * 86_400 + 4 * 3_600, "3d4h"),
            (10 * 86_400, "10d"),
            (3 * 365 * 86_400 + 86_400, "3y1d"),
            (9 * 365 * 86_400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(age(TimeDelta::seconds(secs)), want, "{secs} s");
        }
    }

    #[test]
    fn for_takes_kind_slash_name() {
        assert_eq!(
            parse_for("pod/web-0"),
            Ok(("pod".to_owned(), "web-0".to_owned()))
        );
        for bad in ["pod", "/web", "pod/", "a/b/c", ""] {
            assert!(parse_for(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_long_or_multiline_note_stays_on_one_short_line() {
        assert_eq!(one_line("a\nb\tc"), "a b c");
        let long = "x".repeat(200);
        let cut = one_line(&long);
        assert_eq!(cut.chars().count(), NOTE_WIDTH);
        assert!(cut.ends_with("..."));
    }
}
