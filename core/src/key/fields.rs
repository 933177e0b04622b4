//! Field rules: how long each string of an event may be, and how each value the events.k8s.io/v1 API
//! would reject (apiserver `ValidateEventCreate` and `ValidateEventUpdate`) is mapped to one it
//! accepts.
//!
//! Two stages use them. Normalisation cuts every string of a raw event to its limit (the constants below)
//! before anything is stored, so a tenant's 1 MB message costs no more than a short one. The key's id
//! and the series object then use the mapped values, so that the id can be recomputed from a stored
//! object's own fields (which is how recovery tells a genuine series object from a copy). None drops
//! the event, and every rule is idempotent (mapping a mapped value changes nothing), because a series
//! rebuilt after a restart is written from its own object and the mapped fields are immutable.
//!
//! | field | API rule | mapping |
//! |---|---|---|
//! | `metadata.name` | DNS-1123 subdomain, ≤ 253 | `<regarding name, sanitised, ≤ 200>.<16 hex of key and start>` |
//! | `metadata.namespace` | for a cluster-scoped `regarding`: `default` or `kube-system` | always the raw event's namespace, which the API holds to the same rule for core/v1 Events |
//! | `reportingController` | required, a qualified name (`[prefix/]name`, name ≤ 63) | invalid characters become `-`, ends trimmed, name cut to 63, prefix lower-cased to a DNS subdomain or dropped; empty becomes `unknown` |
//! | `reportingInstance` | required, ≤ 128 | empty becomes the reportingController; cut to 128 bytes |
//! | `action` | required, ≤ 128 | empty becomes the reason (legacy events have no action); cut to 128 bytes |
//! | `reason` | required, ≤ 128 | empty becomes `Unknown`; cut to 128 bytes |
//! | `note` | ≤ 1024 | cut to 1024 bytes |
//! | `type` | `Normal` or `Warning` | empty becomes `Normal`; anything else `Warning` |
//! | `eventTime` | required, immutable | the series start |
//! | `series` | count ≥ 2, lastObservedTime required | count (at least 2, at most 2³¹−1), latest occurrence |
//! | deprecated fields | must be unset | never set |
//! | `regarding`, `related` | no limit in the API | cut at normalisation: apiVersion 317, kind 63, namespace 63, name 253, uid 128, fieldPath 512 bytes |
//!
//! Cuts happen on a character boundary, so unicode stays valid.

use std::borrow::Cow;

/// reason, action and reportingInstance.
pub const LENGTH_LIMIT: usize = 128;
pub const NOTE_LIMIT: usize = 1024;
const QUALIFIED_NAME_LIMIT: usize = 63;
const DNS_SUBDOMAIN_LIMIT: usize = 253;
/// A qualified name: a DNS subdomain prefix, `/`, a name.
pub const CONTROLLER_LIMIT: usize = DNS_SUBDOMAIN_LIMIT + 1 + QUALIFIED_NAME_LIMIT;

/// Byte limits of the fields of an object reference. The API validates none of them in an Event, so
/// these are the limits of what they name: a group/version, a kind, a namespace (a DNS label), an
/// object name (a DNS subdomain), a uid, and a field path with room for a container name.
pub mod reference {
    pub const API_VERSION: usize = super::CONTROLLER_LIMIT;
    pub const KIND: usize = 63;
    pub const NAMESPACE: usize = 63;
    pub const NAME: usize = super::DNS_SUBDOMAIN_LIMIT;
    pub const UID: usize = 128;
    pub const FIELD_PATH: usize = 512;
}

/// Longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

pub fn or_else<'a>(s: &'a str, fallback: &'a str) -> &'a str {
    if s.is_empty() { fallback } else { s }
}

/// Lower-cases and replaces anything outside `[a-z0-9.-]` with `-`, trims non-alphanumerics from both
/// ends: a DNS-1123 subdomain (or empty).
pub fn dns_subdomain(s: &str, max: usize) -> String {
    let mapped: String = s
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    let mut out = cut(&mapped, max)
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned();
    // Labels between dots must not be empty or start/end with '-'.
    while out.contains("..") || out.contains(".-") || out.contains("-.") {
        out = out.replace("..", ".").replace(".-", ".").replace("-.", ".");
    }
    out
}

/// The name part of a qualified name: `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63.
fn qualified_part(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '-',
        })
        .collect();
    let trim = |s: &str| {
        s.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_owned()
    };
    trim(cut(&trim(&mapped), QUALIFIED_NAME_LIMIT))
}

/// Maps a reporting controller to a valid qualified name (see the module table), borrowing it when it
/// already is one (the common case, on the path of every occurrence).
pub fn reporting_controller_cow(s: &str) -> Cow<'_, str> {
    let valid = |name: &str| {
        !name.is_empty()
            && name.len() <= QUALIFIED_NAME_LIMIT
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    };
    let ok = match s.split_once('/') {
        None => valid(s),
        Some((prefix, name)) => {
            valid(name)
                && !prefix.is_empty()
                && prefix.len() <= DNS_SUBDOMAIN_LIMIT
                && dns_subdomain(prefix, DNS_SUBDOMAIN_LIMIT) == prefix
        }
    };
    if ok {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(reporting_controller(s))
    }
}

/// Maps a reporting controller to a valid qualified name (see the module table).
pub fn reporting_controller(s: &str) -> String {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (dns_subdomain(p, DNS_SUBDOMAIN_LIMIT), qualified_part(n)),
        None => (String::new(), qualified_part(s)),
    };
    match (prefix.is_empty(), name.is_empty()) {
        (_, true) => "unknown".to_owned(),
        (true, false) => name,
        (false, false) => format!("{prefix}/{name}"),
    }
}

/// Maps a note to at most 1024 bytes.
pub fn note(s: &str) -> &str {
    cut(s, NOTE_LIMIT)
}

pub fn event_type(s: &str) -> &'static str {
    match s {
        "" | "Normal" => "Normal",
        _ => "Warning",
    }
}

/// The apiserver's `IsDNS1123Subdomain`, restated as the spec reads: the oracle the name mappings
/// are checked against (their tests, the fuzz targets), kept apart from the code that maps.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_borrowing_controller_mapping_agrees_with_the_owned_one() {
        for s in [
            "kubelet",
            "default-scheduler",
            "example.com/my-ctl",
            "",
            "my controller!",
            "Example.COM/x y",
            "/x",
            "a/",
            "---",
            "ünïcödé",
            "a/b/c",
            "a..b/c",
            "-a/b",
            "x_y.z",
        ] {
            assert_eq!(
                reporting_controller_cow(s),
                reporting_controller(s),
                "{s:?}"
            );
        }
        assert!(matches!(
            reporting_controller_cow("kubelet"),
            Cow::Borrowed(_)
        ));
    }

    /// The apiserver's `IsQualifiedName`, restated as the spec reads, to check the mapping against.
    fn is_qualified_name(s: &str) -> bool {
        let (prefix, name) = match s.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, s),
        };
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && name
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        name_ok && prefix.is_none_or(is_dns_subdomain)
    }

    #[test]
    fn reporting_controller_rules() {
        for (input, want) in [
            ("kubelet", "kubelet"),
            ("default-scheduler", "default-scheduler"),
            ("example.com/my-ctl", "example.com/my-ctl"),
            ("", "unknown"),
            ("my controller!", "my-controller"),
            ("Example.COM/x y", "example.com/x-y"),
            ("/x", "x"),
            ("a/", "unknown"),
            ("---", "unknown"),
            ("ünïcödé", "n-c-d"),
        ] {
            let got = reporting_controller(input);
            assert_eq!(got, want, "input {input:?}");
            assert!(is_qualified_name(&got), "{got:?} is not a qualified name");
        }
        let long = "x".repeat(300);
        let got = reporting_controller(&long);
        assert_eq!(got.len(), 63);
        assert!(is_qualified_name(&got));
    }

    #[test]
    fn mapping_is_idempotent() {
        for s in ["", "a b/c d", "x".repeat(100).as_str(), "Ab_c.d", "e/f/g"] {
            let once = reporting_controller(s);
            assert_eq!(reporting_controller(&once), once);
        }
        let long = "é".repeat(2000);
        let once = note(&long);
        assert!(once.len() <= 1024);
        assert_eq!(note(once), once);
    }

    #[test]
    fn cuts_respect_char_boundaries() {
        let s = "ü".repeat(100); // 200 bytes
        let c = cut(&s, 127);
        assert_eq!(c.len(), 126);
        assert_eq!(note(&"€".repeat(1000)).len(), 1023);
    }

    #[test]
    fn types() {
        assert_eq!(event_type(""), "Normal");
        assert_eq!(event_type("Normal"), "Normal");
        assert_eq!(event_type("Warning"), "Warning");
        assert_eq!(event_type("Error"), "Warning");
    }
}
