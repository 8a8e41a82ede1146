//! The documentation as a newcomer meets it: every runnable example in `docs/*.md` runs as
//! written against the sample data, and the tracked files speak of the product only.
//!
//! A fenced `sh` block whose first line starts with `alphaloop` is runnable: it runs as one
//! bash script (`set -e`, so every line must succeed) in a scratch checkout that holds the
//! seeds, ideas, templates and sandbox examples of this one, an `alphaloop.toml` pointing at
//! `../shared/data/sp500_sample.parquet` with splits that fit it, and its own knowledge
//! base, runs and models, so nothing is written into this repository. Blocks fenced as
//! `text` are illustrations (an overnight run, a server) and are not run.

mod common;

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The runnable blocks of a Markdown file: (first line number, script).
fn runnable_blocks(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut block: Option<(usize, Vec<&str>)> = None;
    for (i, line) in md.lines().enumerate() {
        match &mut block {
            None if line.trim_start() == "```sh" => block = Some((i + 2, Vec::new())),
            Some(_) if line.trim_start().starts_with("```") => {
                let (at, lines) = block.take().expect("open block");
                if lines.first().is_some_and(|l| l.starts_with("alphaloop")) {
                    out.push((at, lines.join("\n")));
                }
            }
            Some((_, lines)) => lines.push(line),
            None => {}
        }
    }
    assert!(block.is_none(), "a fenced block is never closed");
    out
}

/// A scratch checkout: `root/work` is the working directory, `root/shared` the shared data.
fn scratch(root: &Path) -> PathBuf {
    let work = root.join("work");
    std::fs::create_dir_all(work.join("alpha_kb")).expect("scratch");
    std::os::unix::fs::symlink(repo().join("../shared"), root.join("shared")).expect("link shared");
    for rel in ["alpha_kb/seeds", "alpha_kb/ideas.toml", "templates", "sandbox"] {
        std::os::unix::fs::symlink(repo().join(rel), work.join(rel)).expect("link");
    }
    common::sample_config(&work, &common::shared("data/sp500_sample.parquet"), None);
    work
}

#[test]
fn every_runnable_example_in_docs_runs_as_written() {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 7, "docs/ holds a file per concern: {docs:?}");
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_alphaloop")).parent().expect("bin dir").to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("read doc");
        let blocks = runnable_blocks(&text);
        // Each doc starts with a runnable example: its first fenced block is one.
        let first_fence = text.lines().position(|l| l.trim_start().starts_with("```")).expect("a fenced block");
        assert_eq!(blocks.first().map(|b| b.0), Some(first_fence + 2), "{}: the first example is not a runnable `sh` block starting with `alphaloop`", doc.display());
        let root = tempfile::tempdir().expect("tmp");
        let work = scratch(root.path());
        for (line, script) in blocks {
            let out = std::process::Command::new("bash")
                .args(["-euo", "pipefail", "-c", &script])
                .current_dir(&work)
                .env("PATH", &path)
                .env("ALPHALOOP_MODEL", "small")
                .env_remove("ALPHALOOP_CONFIG")
                .env_remove("ALPHALOOP_DATA")
                .env_remove("ALPHALOOP_KB")
                .env_remove("ALPHALOOP_RUNS")
                .output()
                .expect("bash runs");
            assert!(
                out.status.success(),
                "{}:{line}: the example failed\n{script}\n--- stdout\n{}\n--- stderr\n{}",
                doc.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.stdout.is_empty(), "{}:{line}: the example printed nothing", doc.display());
        }
    }
}

#[test]
fn runnable_blocks_are_found_and_illustrations_skipped() {
    let md = "# T\n\n```sh\nalphaloop ops\nalphaloop eval x\n```\n\n```text\nalphaloop mine --hours 8\n```\n\n```sh\nexport A=1\n```\n";
    assert_eq!(runnable_blocks(md), vec![(4, "alphaloop ops\nalphaloop eval x".to_string())]);
}

/// Every tracked text file, by path relative to the repository, with its text.
fn tracked() -> Vec<(String, String)> {
    let out = std::process::Command::new("git").args(["ls-files", "-z"]).current_dir(repo()).output().expect("git runs");
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .filter_map(|f| {
            let rel = String::from_utf8_lossy(f).into_owned();
            let text = std::fs::read_to_string(repo().join(&rel)).ok()?;
            Some((rel, text))
        })
        .collect()
}

/// Every `unsafe` block carries a `SAFETY:` comment on its line or in the comment lines
/// just above its statement, saying what makes it sound.
#[test]
fn every_unsafe_block_says_why_it_is_sound() {
    let mut missing = Vec::new();
    let mut blocks = 0;
    for (rel, text) in tracked().into_iter().filter(|(rel, _)| rel.ends_with(".rs")) {
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let Some(at) = code.find("unsafe") else { continue };
            if !code[at + "unsafe".len()..].trim_start().starts_with('{') {
                continue;
            }
            blocks += 1;
            // Back from the block over its statement's earlier lines and the comments
            // above them, stopping at the previous statement's end.
            let said = line.contains("SAFETY") || lines[..n].iter().rev().take(6).take_while(|l| {
                let t = l.trim();
                t.starts_with("//") || !(t.ends_with(';') || t.ends_with('}') || t.ends_with('{'))
            }).any(|l| l.contains("SAFETY"));
            if !said {
                missing.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(blocks > 100, "found only {blocks} unsafe blocks: is the scan broken?");
    assert!(missing.is_empty(), "unsafe blocks without a SAFETY comment:\n{}", missing.join("\n"));
}

/// Tracked files speak of the product: a measurement carries its date, CPU and command,
/// never a work-log entry or a tracker's number.
#[test]
fn no_work_log_or_tracker_talk_in_tracked_files() {
    let files = tracked();
    assert!(files.len() > 100, "git ls-files listed {} text files", files.len());
    // Built from parts so that this file does not match itself.
    let words = [["ses", "sion"].concat(), ["iss", "ue"].concat()];
    let mut found = Vec::new();
    for (rel, text) in files {
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            for w in &words {
                let mut rest = lower.as_str();
                while let Some(at) = rest.find(w.as_str()) {
                    let after = &rest[at + w.len()..];
                    if after.strip_prefix(' ').is_some_and(|a| a.starts_with(|c: char| c.is_ascii_digit())) {
                        found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                    }
                    rest = after;
                }
            }
        }
    }
    assert!(found.is_empty(), "work-log or tracker references:\n{}", found.join("\n"));
}
