//! The fuzz targets' invariants (`event_series_test_support::check`) on every seed (real events
//! captured from client-go recorders) and on every input a fuzz run found to fail
//! (`fuzz/regressions/`, one file per crash, kept after the fix): quick, so it runs with `just test`
//! too.

use event_series_test_support::raw::kubelet_backoff;
use event_series_test_support::{check, repo_root};

fn inputs(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = repo_root().join(dir);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_file() {
            let bytes = std::fs::read(&path).expect("readable input");
            out.push((path.display().to_string(), bytes));
        }
    }
    out.sort();
    out
}

#[test]
fn seed_events_keep_the_fuzz_invariants() {
    let seeds = inputs("fuzz/seeds/event");
    assert!(seeds.len() >= 10, "the seed corpus is there");
    for (path, bytes) in seeds {
        let ev: k8s_openapi::api::core::v1::Event =
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            event_series_core::key::normalise(&ev).is_ok(),
            "{path}: a real event normalises"
        );
        check::check_json(&bytes);
    }
}

#[test]
fn inputs_that_once_failed_keep_the_fuzz_invariants() {
    for (_path, bytes) in inputs("fuzz/regressions/event_json") {
        check::check_json(&bytes);
    }
}

/// The fuzzer's input `fuzz/regressions/event_fields/crash-ef64a62d…` restated readably: the CRD's
/// longest `seriesWindow` (about 292 years, the most CEL's `duration()` admits) and a legacy event
/// first seen counting 1,701,523,318 occurrences (`count` is an int32 the API accepts) must not crash
/// the operator: spreading that many occurrences over that many windows overflows a naive product.
#[test]
fn a_huge_first_count_under_the_longest_series_window() {
    let ev = kubelet_backoff("team-a", "raw", "web-0", 1_701_523_318);
    let longest = chrono::TimeDelta::seconds(check::MAX_DURATION_SECONDS);
    check::check_event(
        &ev,
        check::Timings {
            window: longest,
            ..check::Timings::default()
        },
    );
}
