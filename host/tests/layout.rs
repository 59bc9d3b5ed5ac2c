//! The house's shape, checked: `host/src` is the data path as folders, each stage imports only
//! from itself and the stages before it (so the stages form no cycle), and no source file is
//! long enough to hide two jobs.
//!
//! Read from the `use` lines and `crate::` paths of the code itself (comments and doc links
//! aside), so a new import that points downstream fails here, naming the file and the line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The stages in dependency order: a module may use its own stage and the ones above it.
///
/// The data path runs reflector → delta FIFO → store → handlers → work queue → worker → guest →
/// host imports. The worker *calls* the guest, so the guest (runtime, imports, grant) is a stage
/// the controller uses, not one that uses it; the endpoints' plumbing and the typed status
/// document (`ops`) are filled in by the supervisor, which therefore comes after them.
const STAGES: &[(&str, &[&str])] = &[
    (
        "shared",
        &["object", "backoff", "events", "names", "text", "selector"],
    ),
    ("informer", &["informer"]),
    ("guest", &["guest"]),
    ("controller", &["controller"]),
    // Guests run with no cluster: the controller's plan, offline informers, an in-memory server.
    ("offline", &["offline"]),
    ("replicas", &["replicas"]),
    ("ops", &["ops"]),
    ("supervisor", &["supervisor"]),
    ("sources", &["sources"]),
    ("config", &["config"]),
    // The binary's own subcommands (cli/, beside main.rs): they may use everything above.
    ("cli", &["cli"]),
];

/// Longest a source file may be, its `#[cfg(test)] mod tests` aside.
const MAX_LINES: usize = 700;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `informer/store.rs` → `informer`.
fn top_module(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn rank(module: &str) -> Option<usize> {
    STAGES
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The code of a file without comments (doc links may point anywhere) and without its test
/// module (tests may reach wherever they need).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string literal is rare in `use` lines and paths; good enough.
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every top-level module named after `crate::` in `code`, with its line: `crate::a::b` → `a`,
/// and each name of a `use crate::{a::X, b}` group.
fn crate_refs(code: &str) -> Vec<(usize, String)> {
    let mut refs = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let line = code[..i].matches('\n').count() + 1;
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: after `{` and after each comma at depth 0.
            let mut depth = 0;
            let mut at_name = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_name = true,
                    c if at_name && (c.is_alphanumeric() || c == '_') => name.push(c),
                    _ if at_name && !name.is_empty() => {
                        refs.push((line, std::mem::take(&mut name)));
                        at_name = false;
                    }
                    _ => {}
                }
            }
            if !name.is_empty() {
                refs.push((line, name));
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.push((line, name));
            }
        }
    }
    refs
}

#[test]
fn every_module_imports_only_from_its_own_stage_and_the_ones_before_it() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for file in &files {
        let module = top_module(file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(from) = rank(&module) else {
            wrong.push(format!(
                "{}: module `{module}` is in no stage; add it to STAGES in tests/layout.rs",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, target) in crate_refs(&code(&text)) {
            let Some(to) = rank(&target) else {
                wrong.push(format!(
                    "{}:{line}: `crate::{target}` is in no stage",
                    file.display()
                ));
                continue;
            };
            if to > from {
                wrong.push(format!(
                    "{}:{line}: stage {} imports from the downstream stage {} (crate::{target})",
                    file.display(),
                    STAGES[from].0,
                    STAGES[to].0
                ));
            }
            if to != from {
                edges
                    .entry((STAGES[from].0, STAGES[to].0))
                    .or_insert_with(|| format!("{}:{line}", file.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every edge points to an earlier stage, so the stages cannot form a cycle; say which are
    // used, for the reader of a failure.
    eprintln!("stage imports: {:?}", edges.keys().collect::<Vec<_>>());
}

#[test]
fn no_source_file_is_longer_than_700_lines_of_code() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => &text[..i],
                None => &text,
            };
            let lines = code.lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these along their jobs: {}",
        long.join(", ")
    );
}

#[test]
fn the_reference_parser_reads_paths_and_use_groups() {
    let refs = crate_refs("use crate::{a::X, b::{c, d}, e};\nfn f() { crate::g::h(); }");
    let names: Vec<&str> = refs.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["a", "b", "e", "g"]);
    assert_eq!(refs[3].0, 2, "line numbers count from 1");
}
