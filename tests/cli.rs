//! The command line shape (Names): `run`, `crd`, `--help`, `--version`.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use std::process::Command;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_event-series"))
        .args(args)
        .output()
        .expect("binary runs")
}

#[test]
fn version_prints_the_crate_version() {
    let out = cli(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!("event-series {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&want), "{text}");
    assert!(
        text.contains(", rustc ") && text.trim().ends_with("debug)"),
        "the build's commit, compiler and profile: {text}"
    );
    let short = cli(&["-V"]);
    assert_eq!(
        String::from_utf8_lossy(&short.stdout).trim(),
        format!("event-series {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_lists_the_subcommands() {
    let out = cli(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["run", "crd"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(sub)),
            "{sub} missing from:\n{text}"
        );
    }
    let run = cli(&["run", "--help"]);
    let text = String::from_utf8_lossy(&run.stdout);
    for flag in [
        "--metrics-addr",
        "--metrics-secure",
        "--metrics-cert-dir",
        "--health-addr",
        "--log-format",
        "--heartbeat-interval",
        "--finish-after",
        "--leader-elect",
        "--lease-namespace",
        "--lease-duration",
        "--renew-deadline",
        "--retry-period",
        "--request-timeout",
        "--watch-timeout",
    ] {
        assert!(text.contains(flag), "{flag} missing from run --help");
    }
}

#[test]
fn unknown_arguments_are_refused() {
    let out = cli(&["frobnicate"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("frobnicate"));
}

/// Install: `crds/` holds the generated CRD. Regenerate with `just crds`.
#[test]
fn crds_dir_matches_event_series_crd() {
    let out = cli(&["crd"]);
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).expect("UTF-8");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crds/eventseries.dev_eventseriespolicies.yaml"
    );
    let committed = std::fs::read_to_string(path).expect("crds/ file");
    assert!(
        generated == committed,
        "crds/ differs from `event-series crd`: run `just crds`"
    );
    assert!(generated.contains("kind: CustomResourceDefinition"));
}

/// `kubectl series` runs the binary as `kubectl-series`: it answers as `event-series get`.
#[test]
fn as_kubectl_series_the_binary_is_get() {
    let dir = std::env::temp_dir().join(format!("event-series-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plugin = dir.join("kubectl-series");
    // A link, not a copy: executing a file this process just wrote fails with ETXTBSY while a
    // child another test forks still holds the write descriptor (seen once in CI).
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_event-series"), &plugin)
        .expect("links the binary");
    let help = std::process::Command::new(&plugin)
        .arg("--help")
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&help.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(help.status.success(), "{text}");
    for flag in [
        "--all-namespaces",
        "--state",
        "--selector",
        "--for <KIND/NAME>",
        "--output",
        "--watch",
        "--kubeconfig",
        "--context",
    ] {
        assert!(
            text.contains(flag),
            "{flag} missing from kubectl series --help:\n{text}"
        );
    }
}

#[test]
fn get_refuses_a_malformed_for_and_a_bad_state() {
    let out = cli(&["get", "--for", "web-0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected kind/name"));
    let out = cli(&["get", "--state", "Sleeping"]);
    assert_eq!(out.status.code(), Some(2));
    let out = cli(&["get", "-A", "-n", "x"]);
    assert_eq!(out.status.code(), Some(2), "-A and -n conflict");
}

/// Reading: `event-series completion bash|zsh|fish` prints a script for the shell, naming the
/// subcommands and the reader's flags.
#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef event-series"),
        ("fish", "complete -c event-series"),
    ] {
        let out = cli(&["completion", shell]);
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: no {marker:?}");
        for word in ["get", "no-headers", "request-timeout", "as-group"] {
            assert!(text.contains(word), "{shell}: {word} missing");
        }
    }
    assert!(!cli(&["completion", "tcsh"]).status.success());
}
