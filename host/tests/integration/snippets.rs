//! The snippets of the guide and the READMEs, as written: every `toml` block parses as what it
//! is (a host config, a Cargo fragment, a compat provenance), every `yaml` block is accepted by
//! the real API server (`kubectl apply --dry-run=server`, with the Reconciler CRDs installed; a
//! block that is only a `spec:` is applied as a Reconciler's), and every `reconciled` command
//! line in a shell block names a subcommand and flags that the binary has. The TypeScript
//! README's block is bundled and run by the SDK's own tests (`guests/js/unit/readme.test.ts`),
//! and the scaffolds' READMEs by `scaffold.rs`.
//!
//! Where it may surprise: shell blocks are not run, since most of them start hosts or name a
//! registry of the reader's; what is checked is that the commands they show exist as shown.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use testenv::ControlPlane;

/// A fenced block: the file and line it starts at, its language, its text.
#[derive(Debug)]
struct Snippet {
    file: PathBuf,
    line: usize,
    lang: String,
    text: String,
}

/// Every fenced block of `text` (indented ones included), with its fence's indentation removed.
fn snippets(file: &Path, text: &str) -> Vec<Snippet> {
    let mut found = Vec::new();
    let mut open: Option<(usize, usize, String, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(lang) = trimmed.strip_prefix("```") {
                    open = Some((n + 1, indent, lang.trim().to_string(), Vec::new()));
                }
            }
            Some((start, fence, lang, body)) => {
                if trimmed.starts_with("```") {
                    let text = body
                        .iter()
                        .map(|l| l.get(*fence..).unwrap_or(l.trim_start()))
                        .collect::<Vec<_>>()
                        .join("\n");
                    found.push(Snippet {
                        file: file.to_path_buf(),
                        line: *start,
                        lang: std::mem::take(lang),
                        text,
                    });
                    open = None;
                } else {
                    body.push(line);
                }
            }
        }
    }
    found
}

/// The guide, and every README of the checkout but the scaffolds' templates.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("git")
        .args(["ls-files", "--", "*.md"])
        .current_dir(&root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|f| f.ends_with("README.md") || f.starts_with("docs/"))
        .filter(|f| !f.starts_with("host/src/cli/templates/"))
        .map(|f| root.join(f))
        .collect()
}

fn all_snippets() -> Vec<Snippet> {
    documents()
        .iter()
        .flat_map(|f| snippets(f, &std::fs::read_to_string(f).unwrap()))
        .collect()
}

fn at(s: &Snippet) -> String {
    format!("{}:{}", s.file.display(), s.line)
}

#[test]
fn every_toml_snippet_parses_as_what_it_is() {
    let mut checked = 0;
    for s in all_snippets().iter().filter(|s| s.lang == "toml") {
        let cargo = ["[lib]", "[package]", "[dependencies]"]
            .iter()
            .any(|t| s.text.contains(t));
        let provenance = s.file.ends_with("guests/compat/README.md");
        if cargo || provenance {
            let table: Result<toml::Table, _> = toml::from_str(&s.text);
            assert!(table.is_ok(), "{}: {table:?}\n{}", at(s), s.text);
            if provenance {
                let t = table.unwrap();
                for key in ["commit", "dir", "command", "output", "rustc", "sha256"] {
                    assert!(t.contains_key(key), "{}: no {key}", at(s));
                }
            }
        } else {
            let config: Result<reconciled::config::Config, _> = toml::from_str(&s.text);
            assert!(config.is_ok(), "{}: {config:?}\n{}", at(s), s.text);
        }
        checked += 1;
    }
    assert!(checked >= 4, "the documents hold toml snippets: {checked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_yaml_snippet_is_accepted_by_the_api_server() {
    let cp = ControlPlane::shared();
    common::reconciler_crds(cp);
    let ns = "team-a";
    if cp
        .kubectl()
        .args(["get", "namespace", ns])
        .output()
        .is_ok_and(|o| !o.status.success())
    {
        common::namespace(&cp.admin_client(), ns).await;
    }
    let mut checked = 0;
    for s in all_snippets().iter().filter(|s| s.lang == "yaml") {
        // A block that is only a spec is shown as part of a Reconciler.
        let text = if s.text.starts_with("spec:") {
            format!(
                "apiVersion: reconciled.dev/v1alpha1\nkind: Reconciler\nmetadata: {{ name: snippet, namespace: {ns} }}\n{}\n  module: {{ image: registry.example/team-a/snippet:1 }}\n",
                s.text.trim_end()
            )
        } else {
            s.text.clone()
        };
        let mut child = cp
            .kubectl()
            .args(["apply", "--dry-run=server", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}: the API server refused it: {}\n{text}",
            at(s),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 2, "the documents hold yaml snippets: {checked}");
}

/// The long flags `reconciled <subcommand…> --help` lists.
fn flags_of(bin: &str, subcommand: &[&str]) -> Option<String> {
    let out = Command::new(bin)
        .args(subcommand)
        .arg("--help")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn every_reconciled_command_in_a_shell_snippet_exists_as_shown() {
    let bin = env!("CARGO_BIN_EXE_reconciled");
    let mut checked = 0;
    for s in all_snippets()
        .iter()
        .filter(|s| s.lang == "sh" || s.lang == "console")
    {
        for line in s.text.lines() {
            let line = line.trim().trim_start_matches("$ ");
            let Some(rest) = [
                "target/debug/reconciled ",
                "reconciled ",
                "kubectl reconciled ",
            ]
            .iter()
            .find_map(|p| line.strip_prefix(p)) else {
                continue;
            };
            let words: Vec<&str> = rest
                .split(" #")
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .take_while(|w| !["|", "&", "&&", ">", "\\"].contains(w))
                .collect();
            // The subcommand: the words before the first flag or argument that is not one.
            let mut subcommand: Vec<&str> = Vec::new();
            for w in &words {
                if w.starts_with('-') {
                    break;
                }
                let mut longer = subcommand.clone();
                longer.push(w);
                if flags_of(bin, &longer).is_some() {
                    subcommand = longer;
                } else {
                    break;
                }
            }
            assert!(
                !subcommand.is_empty(),
                "{}: `reconciled {rest}` names no subcommand the binary has",
                at(s)
            );
            let help = flags_of(bin, &subcommand).unwrap();
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                let flag = flag.split('=').next().unwrap_or_default();
                assert!(
                    help.contains(flag),
                    "{}: `reconciled {}` has no {flag}",
                    at(s),
                    subcommand.join(" ")
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "the documents show reconciled commands: {checked}"
    );
}
