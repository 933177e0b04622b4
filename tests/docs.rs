//! The benchmark tables in docs/ that are generated from result files (bench/tables.py) say what
//! their files say: a table edited by hand, or a result file replaced without regenerating the
//! table, fails here.

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
    for name in ["scale-steps", "scale-bill", "heartbeats"] {
        assert!(
            text.contains(&format!("<!-- table: {name} ")),
            "docs/BENCHMARKS.md has no generated table {name}"
        );
    }
}

#[test]
fn an_edited_table_is_caught() {
    // The checker itself: a copy of the docs with one figure changed must fail the check.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("event-series-docs-{}", std::process::id()));
    for sub in ["bench", "docs"] {
        std::fs::create_dir_all(dir.join(sub)).expect("temp dir");
    }
    std::fs::copy(root.join("bench/tables.py"), dir.join("bench/tables.py")).expect("copy");
    let results = dir.join("bench/results");
    copy_tree(&root.join("bench/results"), &results);
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
