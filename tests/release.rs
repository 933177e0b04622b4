//! The release's checks. `just verify-release` (`hack/release.py verify`) accepts a signed release
//! and names the file when one byte of it, or of a signature, changed: on a fake release of stub
//! binaries (`hack/release.py fake`: the layout, image index, SBOM, signatures and provenance of
//! `just release` in under a second). And the image index of both platforms, built by
//! `hack/image.sh` as `just release` builds it, holds an arm64 binary that runs under qemu: ignored
//! in a plain `cargo test` (the arm64 release build takes minutes), run by `just test` once its
//! background builds made it (hack/test.sh).

use event_series_test_support::repo_root;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `python3 hack/release.py ARGS`.
fn release_py(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo_root().join("hack/release.py"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("python3 runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// An empty directory under target/ for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = repo_root().join("target/test-release").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("target/ is writable");
    dir
}

/// One byte of the file changed: the middle one, to another letter where it is a letter or digit
/// (a base64 signature stays base64, so that the signature check, not the decoding, refuses it).
fn flip_one_byte(path: &Path) -> Vec<u8> {
    let original = std::fs::read(path).expect("the file exists");
    let mut changed = original.clone();
    let i = changed.len() / 2;
    changed[i] = match changed[i] {
        b'A' => b'B',
        b if b.is_ascii_alphanumeric() => b'A',
        b => b ^ 0xff,
    };
    std::fs::write(path, &changed).expect("the file is writable");
    original
}

#[test]
fn verify_release_accepts_a_signed_release_and_names_each_changed_file() {
    let dir = scratch("verify");
    let dist = dir.join("dist");
    let d = dist.to_str().expect("a UTF-8 path");
    let made = release_py(&["fake", d]);
    assert!(made.status.success(), "release.py fake: {}", text(&made));
    let ok = release_py(&["verify", d]);
    assert!(ok.status.success(), "a signed release: {}", text(&ok));
    assert!(text(&ok).contains("verified"), "{}", text(&ok));

    // (file changed, what verify-release must say)
    let cases = [
        (
            "event-series-v0.0.0-test.oci.tar",
            "event-series-v0.0.0-test.oci.tar: its SHA-256 differs from SHA256SUMS",
        ),
        (
            "install.yaml",
            "install.yaml: its SHA-256 differs from SHA256SUMS",
        ),
        (
            "SHA256SUMS",
            "SHA256SUMS.sig: not a valid signature of SHA256SUMS",
        ),
        (
            "SHA256SUMS.sig",
            "SHA256SUMS.sig: not a valid signature of SHA256SUMS",
        ),
        (
            "image-signature.json.sig",
            "image-signature.json.sig: not a valid signature of image-signature.json",
        ),
        (
            "provenance.intoto.jsonl",
            "provenance.intoto.jsonl: its SHA-256 differs from SHA256SUMS",
        ),
    ];
    for (file, says) in cases {
        let path = dist.join(file);
        let original = flip_one_byte(&path);
        let out = release_py(&["verify", d]);
        std::fs::write(&path, original).expect("restored");
        assert!(!out.status.success(), "{file} changed, yet: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("FAILED: {says}")),
            "{file} changed: {err}"
        );
    }

    // The same files checked against another key than the one that signed them.
    let other = dir.join("other.pem");
    let key = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .output()
        .expect("openssl runs");
    std::fs::write(&other, &key.stdout).expect("written");
    let public = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&other)
        .output()
        .expect("openssl runs");
    std::fs::write(dir.join("other.pub"), &public.stdout).expect("written");
    let pubkey = dir.join("other.pub");
    let out = release_py(&["verify", d, "--key", pubkey.to_str().expect("UTF-8")]);
    assert!(!out.status.success(), "another key: {}", text(&out));
    assert!(
        text(&out).contains("FAILED: SHA256SUMS.sig: not a valid signature"),
        "{}",
        text(&out)
    );
    let again = release_py(&["verify", d]);
    assert!(again.status.success(), "restored: {}", text(&again));
}

/// `qemu-aarch64-static`, or `None` (a skip, said out loud) outside CI where it is missing.
fn qemu() -> Option<&'static str> {
    let found = Command::new("qemu-aarch64-static")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("qemu-aarch64-static");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "qemu-aarch64-static is missing (Debian: apt-get install qemu-user-static; .ci/run installs it)"
    );
    println!("skipped: qemu-aarch64-static is missing (apt-get install qemu-user-static)");
    None
}

fn version_of(bin: &Path, runner: Option<&str>) -> Output {
    let mut cmd = match runner {
        Some(r) => {
            let mut c = Command::new(r);
            c.arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.arg("-V").output().expect("the binary starts")
}

#[test]
#[ignore = "builds the arm64 release binary (minutes); `just test` runs it after its background build"]
fn the_image_index_holds_both_platforms_and_its_arm64_binary_runs_under_qemu() {
    let Some(qemu) = qemu() else { return };
    let dir = scratch("multiarch");
    let built = Command::new("bash")
        .arg("hack/image.sh")
        .env("IMAGE_PLATFORMS", "linux/amd64 linux/arm64")
        .env("IMAGE_DIR", &dir)
        .current_dir(repo_root())
        .output()
        .expect("bash runs");
    assert!(built.status.success(), "hack/image.sh: {}", text(&built));

    // The index: both platforms, each image config of its architecture, each binary an ELF of it.
    let archive = dir.join("event-series.oci.tar");
    let binaries = dir.join("binaries");
    let out = release_py(&[
        "image",
        archive.to_str().expect("UTF-8"),
        "--extract",
        binaries.to_str().expect("UTF-8"),
    ]);
    assert!(out.status.success(), "release.py image: {}", text(&out));
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        listed,
        ["linux/amd64", "linux/arm64", "index"],
        "{}",
        text(&out)
    );

    let want = format!("event-series {}\n", env!("CARGO_PKG_VERSION"));
    // `-V`: the version alone (`--version` also names the commit, the compiler and the profile).
    let arm64 = binaries.join("arm64/event-series");
    let emulated = version_of(&arm64, Some(qemu));
    assert!(emulated.status.success(), "under qemu: {}", text(&emulated));
    assert_eq!(String::from_utf8_lossy(&emulated.stdout), want);
    let native = version_of(&binaries.join("amd64/event-series"), None);
    assert_eq!(
        String::from_utf8_lossy(&native.stdout),
        want,
        "{}",
        text(&native)
    );
    // Without qemu (none registered with binfmt_misc), the arm64 binary does not run here: it is
    // not the host's binary renamed.
    if cfg!(target_arch = "x86_64") && !Path::new("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists()
    {
        let direct = Command::new(&arm64).arg("--version").output();
        assert!(
            direct.is_err() || !direct.is_ok_and(|o| o.status.success()),
            "the arm64 binary ran natively on x86_64"
        );
    }
}
