//! The benchmark tables in docs/ that are generated from result files (bench/tables.py) say what
//! their files say: a table edited by hand, or a result file replaced without regenerating the
//! table, fails here. So does a module map (docs/ARCHITECTURE.md) that has drifted from the code.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use std::path::Path;
use std::process::Command;

fn tables(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/tables.py"))
        .args(args)
        .output()
        .expect("python3 runs bench/tables.py")
}

#[test]
fn generated_tables_match_their_result_files() {
    let out = tables(&["--check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn docs_have_generated_tables() {
    // The check above would pass on a page with no generated table at all.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(root.join("docs/BENCHMARKS.md")).expect("docs/BENCHMARKS.md");
    for name in [
        "scale-steps",
        "scale-bill",
        "heartbeats",
        "economy",
        "node",
        "failover-standby:100000",
        "growth:message",
    ] {
        assert!(
            text.contains(&format!("<!-- table: {name} ")),
            "docs/BENCHMARKS.md has no generated table {name}"
        );
    }
}

/// A copy of bench/tables.py, the result files and the docs in a fresh temporary directory.
fn copy_of_the_docs(name: &str) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("event-series-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bench", "docs"] {
        std::fs::create_dir_all(dir.join(sub)).expect("temp dir");
    }
    std::fs::copy(root.join("bench/tables.py"), dir.join("bench/tables.py")).expect("copy");
    copy_tree(&root.join("bench/results"), &dir.join("bench/results"));
    for doc in ["docs/BENCHMARKS.md", "docs/FAULTS.md"] {
        std::fs::copy(root.join(doc), dir.join(doc)).expect("copy");
    }
    dir
}

#[test]
fn latest_moves_a_table_only_to_a_result_that_fits_it() {
    // A newer full scale run must take over the current scale table, but neither the tables kept
    // as a past run's evidence (`:history`) nor a growth table of other axes than the newest file's.
    let dir = copy_of_the_docs("latest");
    let results = dir.join("bench/results");
    let doc = dir.join("docs/BENCHMARKS.md");
    let before = std::fs::read_to_string(&doc).expect("doc");
    let marker = |text: &str, kind: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("<!-- table: {kind}")))
            .map(str::to_string)
            .collect()
    };
    let scale = marker(&before, "scale-steps ");
    let full = scale[0]
        .split(' ')
        .nth(3)
        .expect("a result path")
        .to_string();
    let newer = results.join("scale/29991231T000000Z");
    std::fs::create_dir_all(&newer).expect("mkdir");
    std::fs::copy(dir.join(&full), newer.join("summary.json")).expect("copy");
    for f in ["commit", "machine.json"] {
        let _ = std::fs::copy(dir.join(&full).with_file_name(f), newer.join(f));
    }
    let out = Command::new("python3")
        .arg(dir.join("bench/tables.py"))
        .arg("--latest")
        .output()
        .expect("python3");
    let after = std::fs::read_to_string(&doc).expect("doc");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker(&after, "scale-steps ")[0].contains("29991231T000000Z"));
    assert_eq!(
        marker(&after, "scale-steps:history"),
        marker(&before, "scale-steps:history")
    );
    assert!(!marker(&before, "scale-steps:history").is_empty());
    assert_eq!(marker(&after, "growth:"), marker(&before, "growth:"));
    assert_eq!(marker(&before, "growth:").len(), 2);
}

#[test]
fn an_edited_table_is_caught() {
    // The checker itself: a copy of the docs with one figure changed must fail the check.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = copy_of_the_docs("edited");
    for doc in ["docs/BENCHMARKS.md", "docs/FAULTS.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("doc");
        // The first figure cell of the first generated table, changed.
        let edited = edit_first_generated_row(&text);
        std::fs::write(dir.join(doc), edited).expect("write");
    }
    let out = Command::new("python3")
        .arg(dir.join("bench/tables.py"))
        .arg("--check")
        .output()
        .expect("python3");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "an edited table passed the check");
    assert!(String::from_utf8_lossy(&out.stderr).contains("scale-steps"));
}

fn edit_first_generated_row(text: &str) -> String {
    let first_row = || -> Option<usize> {
        let start = text.find("<!-- table: scale-steps ")?;
        // the marker line, the header, the separator: the first row starts after them
        let mut pos = start;
        for _ in 0..3 {
            pos += text[pos..].find('\n')? + 1;
        }
        text[pos..].starts_with("| ").then_some(pos + 2)
    };
    match first_row() {
        Some(at) => format!("{}9{}", &text[..at], &text[at..]),
        None => text.to_string(),
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).expect("copy");
        }
    }
}

/// Every Rust file of the product, as the module map names it: a `mod.rs` by its folder.
fn module_files(root: &Path, dir: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(root.join(dir)).expect(dir) {
        let path = entry.expect(dir).path();
        let rel = path.strip_prefix(root).expect("under the root");
        let rel = rel.to_str().expect("UTF-8 path").to_string();
        if path.is_dir() {
            module_files(root, &rel, out);
        } else if let Some(folder) = rel.strip_suffix("mod.rs") {
            out.push(folder.to_string());
        } else if rel.ends_with(".rs") {
            out.push(rel);
        }
    }
}

#[test]
fn the_module_map_names_every_module_file_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map =
        std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let mut files = Vec::new();
    module_files(root, "src", &mut files);
    module_files(root, "core/src", &mut files);
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !map.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's module map lacks {missing:?}"
    );
    let named: Vec<&str> = map
        .split('`')
        .filter(|s| {
            (s.starts_with("src/") || s.starts_with("core/src/"))
                && (s.ends_with(".rs") || s.ends_with('/'))
        })
        .collect();
    let gone: Vec<&&str> = named.iter().filter(|s| !root.join(s).exists()).collect();
    assert!(
        gone.is_empty(),
        "docs/ARCHITECTURE.md names {gone:?}, which do not exist"
    );
}
