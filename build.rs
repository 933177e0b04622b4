//! Build facts for `event_series_build_info` and `--version`: the commit (from git, or `EVENT_SERIES_COMMIT` where
//! the source has no repository, as in a container build) and the compiler's version.

use std::path::Path;
use std::process::Command;

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=EVENT_SERIES_COMMIT");
    let commit = std::env::var("EVENT_SERIES_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| output("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuilt when HEAD moves: HEAD itself, the branch it names, and the packed refs (where they exist).
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = output("git", &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for path in watched {
        if let Some(p) = output("git", &["rev-parse", "--git-path", &path])
            && Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = output(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=EVENT_SERIES_COMMIT={commit}");
    println!("cargo:rustc-env=EVENT_SERIES_RUSTC={rustc_version}");
    // `release` or `debug`: what `--version` says of a measured binary.
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=EVENT_SERIES_PROFILE={profile}");
}
