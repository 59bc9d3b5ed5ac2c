//! The house's shape, checked: `host/src` is the data path as folders, each stage imports only
//! from itself and the stages before it (so the stages form no cycle), the files of a folder
//! form no cycle either, and no file or function is long enough to hide two jobs.
//!
//! Read from the `use` lines and paths of the code itself (comments, docs and test modules
//! aside), so a new import that points downstream, or closes a loop between two files, fails
//! here, naming the files and the lines.

use std::collections::{BTreeMap, BTreeSet};
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
        &[
            "object", "backoff", "events", "fnv", "names", "text", "selector",
        ],
    ),
    ("informer", &["informer"]),
    ("guest", &["guest"]),
    // Decisions a rollout takes, which the controller's routing of keys reads.
    ("rollout", &["rollout"]),
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

/// Most lines of code a source file may hold: blank lines, comments, docs and its
/// `#[cfg(test)] mod tests` aside, so that documenting a file never pushes it over.
const MAX_CODE_LINES: usize = 700;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// One source file of the crate, as the module tree reaches it from `lib.rs` and `main.rs`.
#[derive(Debug)]
struct File {
    /// The module's path: `["informer", "store"]`; empty for `lib.rs` and `main.rs`.
    module: Vec<String>,
    /// The file, for messages.
    path: PathBuf,
    /// Whether it is a folder's `mod.rs` (or the crate root), whose child modules are its own.
    owns_folder: bool,
    /// Its code: comments and the test module removed, lines kept in place.
    code: String,
}

/// The files of the crate, following `mod name;` declarations from the two crate roots, so that
/// templates and other `.rs` files that are not modules are left out.
fn files() -> Vec<File> {
    let mut out = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        walk(&src().join(root), Vec::new(), true, &mut out);
    }
    out
}

fn walk(path: &Path, module: Vec<String>, owns_folder: bool, out: &mut Vec<File>) {
    let text = std::fs::read_to_string(path).unwrap();
    let code = code(&text);
    // A folder's `mod.rs` (or a crate root) finds its children beside it; `a/b.rs`, in `a/b/`.
    let dir = if owns_folder {
        path.parent().unwrap().to_path_buf()
    } else {
        path.with_extension("")
    };
    for child in declared_modules(&code) {
        let mut sub = module.clone();
        sub.push(child.clone());
        let file = dir.join(format!("{child}.rs"));
        if file.exists() {
            walk(&file, sub, false, out);
        } else {
            walk(&dir.join(&child).join("mod.rs"), sub, true, out);
        }
    }
    out.push(File {
        module,
        path: path.to_path_buf(),
        owns_folder,
        code,
    });
}

/// The modules a file declares with `mod name;` (with or without `pub` and attributes).
fn declared_modules(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = ["pub ", "pub(crate) ", "pub(super) "]
                .iter()
                .find_map(|p| l.strip_prefix(p))
                .unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(|n| n.trim().to_string())
        })
        .collect()
}

/// The code of a file without comments (doc links may point anywhere) and without its test
/// module (tests may reach wherever they need). Lines stay where they were, for messages.
fn code(text: &str) -> String {
    let test_module = ["mod tests", "pub(crate) mod tests", "pub(super) mod tests"]
        .iter()
        .filter_map(|m| text.find(&format!("#[cfg(test)]\n{m}")))
        .min();
    let text = match test_module {
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

/// Lines that hold code: not blank, not only a comment or a doc.
fn code_lines(text: &str) -> usize {
    code(text).lines().filter(|l| !l.trim().is_empty()).count()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path that follows `prefix` in `code` (`crate::`, `super::`, `self::`), with its line,
/// as its segments; a `use` group is expanded: `crate::{a::X, b::{c, d}}` gives `a::X`, `b::c`
/// and `b::d`.
fn paths_after(code: &str, prefix: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        if code[..i].ends_with(is_ident) || code[..i].ends_with("::") {
            continue;
        }
        let line = code[..i].matches('\n').count() + 1;
        for path in expand(&code[i + prefix.len()..]) {
            out.push((line, path));
        }
    }
    out
}

/// The paths a path or `use` tree at the start of `rest` names, each as its segments.
fn expand(rest: &str) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut out = Vec::new();
            for item in split_group(group) {
                for tail in expand(item.trim()) {
                    let mut path = segments.clone();
                    path.extend(tail);
                    out.push(path);
                }
            }
            return out;
        }
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        segments.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    vec![segments]
}

/// The items of a `use` group, up to its closing brace, split at the commas of its own level.
fn split_group(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The names a folder's file re-exports from its children (`pub use store::{Store, Writer};`),
/// each with the child it comes from.
fn re_exports(code: &str, children: &[&String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("pub use ") {
        let rest = &code[at + "pub use ".len()..];
        let Some(end) = rest.find(';') else { continue };
        let path: String = rest[..end].split_whitespace().collect();
        let Some((child, names)) = path.split_once("::") else {
            continue;
        };
        if !children.iter().any(|c| c.as_str() == child) {
            continue;
        }
        let names = names.trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',') {
            // `a as b` exports `b`; `self` and nested groups name modules, caught by path.
            let name = name.rsplit("as").next().unwrap_or(name);
            if !name.is_empty() && name != "self" && !name.contains("::") && !name.contains('{') {
                out.push((name.to_string(), child.to_string()));
            }
        }
    }
    out
}

/// Whether `text` uses the identifier `word` as a whole word.
fn uses_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        !text[..i].ends_with(is_ident) && !text[i + word.len()..].starts_with(is_ident)
    })
}

/// Where each file's paths lead: the module each names (the longest module prefix of the
/// path), with the line. Paths are `crate::…`, `super::…` and `self::…`, and, in a file that
/// owns a folder, its child modules by name (`store::Writer`) and the names it re-exports from
/// them (`Writer`, after `pub use store::Writer`), except in the lines that only declare or
/// re-export them.
fn references(file: &File, modules: &BTreeSet<Vec<String>>) -> Vec<(usize, Vec<String>)> {
    let parent = file.module[..file.module.len().saturating_sub(1)].to_vec();
    let mut found = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", parent),
        ("self::", file.module.clone()),
    ] {
        for (line, path) in paths_after(&file.code, prefix) {
            let mut full = base.clone();
            for segment in path {
                if segment == "super" {
                    full.pop();
                } else {
                    full.push(segment);
                }
            }
            found.push((line, full));
        }
    }
    if file.owns_folder {
        let children: Vec<&String> = modules
            .iter()
            .filter(|m| m.len() == file.module.len() + 1 && m.starts_with(&file.module))
            .map(|m| m.last().unwrap())
            .collect();
        let exported = re_exports(&file.code, &children);
        let mut declaring = false;
        for (n, text) in file.code.lines().enumerate() {
            let t = text.trim_start();
            if declaring {
                declaring = !t.ends_with(';');
                continue;
            }
            let declares = t.starts_with("mod ")
                || (t.starts_with("pub") && (t.contains(" mod ") || t.contains(" use ")));
            if declares {
                // A `pub use a::{…}` that rustfmt spreads over lines goes on until its `;`.
                declaring = t.contains(" use ") && !t.ends_with(';');
                continue;
            }
            for child in &children {
                let needle = format!("{child}::");
                let by_path = text
                    .match_indices(&needle)
                    .any(|(i, _)| !text[..i].ends_with(is_ident) && !text[..i].ends_with("::"));
                // A name the folder re-exports from a child is that child's, wherever the
                // folder's own code uses it.
                let by_name = !t.starts_with("#[")
                    && (exported.iter())
                        .filter(|(_, from)| from == *child)
                        .any(|(name, _)| uses_word(text, name));
                if by_path || by_name {
                    let mut full = file.module.clone();
                    full.push((*child).clone());
                    found.push((n + 1, full));
                }
            }
        }
    }
    found
        .into_iter()
        .filter_map(|(line, path)| {
            (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
                .map(|m| (line, m))
        })
        .collect()
}

/// The top-level module a file belongs to: `informer/store.rs` → `informer`.
fn top_module(file: &File) -> Option<&str> {
    file.module.first().map(String::as_str)
}

fn rank(module: &str) -> Option<usize> {
    STAGES
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

#[test]
fn every_module_imports_only_from_its_own_stage_and_the_ones_before_it() {
    let files = files();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for file in &files {
        let Some(module) = top_module(file) else {
            continue;
        };
        let Some(from) = rank(module) else {
            wrong.push(format!(
                "{}: module `{module}` is in no stage; add it to STAGES in tests/layout.rs",
                file.path.display()
            ));
            continue;
        };
        for (line, target) in references(file, &modules) {
            let Some(target) = target.first() else {
                continue;
            };
            let Some(to) = rank(target) else {
                wrong.push(format!(
                    "{}:{line}: `crate::{target}` is in no stage",
                    file.path.display()
                ));
                continue;
            };
            if to > from {
                wrong.push(format!(
                    "{}:{line}: stage {} imports from the downstream stage {} (crate::{target})",
                    file.path.display(),
                    STAGES[from].0,
                    STAGES[to].0
                ));
            }
            if to != from {
                edges
                    .entry((STAGES[from].0, STAGES[to].0))
                    .or_insert_with(|| format!("{}:{line}", file.path.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every edge points to an earlier stage, so the stages cannot form a cycle; say which are
    // used, for the reader of a failure.
    eprintln!("stage imports: {:?}", edges.keys().collect::<Vec<_>>());
}

/// For each folder, which of its entries (files, subfolders, and `mod.rs` itself) uses which,
/// with the first place each edge was seen.
type FolderGraph = BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>;

fn folder_graphs(files: &[File]) -> FolderGraph {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let folders: BTreeSet<Vec<String>> = files
        .iter()
        .filter(|f| f.owns_folder && !f.module.is_empty())
        .map(|f| f.module.clone())
        .collect();
    // The entry of `folder` a module is or lies in: `mod.rs` for the folder's own file.
    let entry = |folder: &[String], module: &[String]| -> Option<String> {
        if module == folder {
            Some("mod.rs".to_string())
        } else if module.len() > folder.len() && module.starts_with(folder) {
            Some(module[folder.len()].clone())
        } else {
            None
        }
    };
    let mut graphs = FolderGraph::new();
    for folder in &folders {
        let name = folder.join("/");
        for file in files {
            let Some(from) = entry(folder, &file.module) else {
                continue;
            };
            for (line, target) in references(file, &modules) {
                let Some(to) = entry(folder, &target) else {
                    continue;
                };
                if to != from {
                    graphs
                        .entry(name.clone())
                        .or_default()
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_insert_with(|| format!("{}:{line}", file.path.display()));
                }
            }
        }
    }
    graphs
}

/// The loops of a graph: its strongly connected components of more than one node (Tarjan's).
fn loops(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let i = w.index.len();
        w.index.insert(v, i);
        w.low.insert(v, i);
        w.stack.push(v);
        for next in w.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let next = next.as_str();
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[v].min(w.low[next]);
                w.low.insert(v, low);
            } else if w.stack.contains(&next) {
                let low = w.low[v].min(w.index[next]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().position(|n| *n == v).unwrap();
            let mut members: Vec<String> = w.stack.drain(at..).map(str::to_string).collect();
            if members.len() > 1 {
                members.sort();
                w.found.push(members);
            }
        }
    }
    let mut w = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.found
}

#[test]
fn the_files_of_a_folder_form_no_loop() {
    let graphs = folder_graphs(&files());
    let mut wrong = Vec::new();
    for (folder, graph) in &graphs {
        for members in loops(graph) {
            let mut why = format!("host/src/{folder}: {} use each other:", members.join(", "));
            for from in &members {
                for (to, at) in &graph[from] {
                    if members.contains(to) {
                        why.push_str(&format!("\n  {from} → {to} ({at})"));
                    }
                }
            }
            wrong.push(why);
        }
    }
    assert!(
        wrong.is_empty(),
        "split out what both sides use, so the files read in one order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_source_file_is_longer_than_700_lines_of_code() {
    let long: Vec<String> = files()
        .iter()
        .filter_map(|f| {
            let lines = code_lines(&std::fs::read_to_string(&f.path).unwrap());
            (lines > MAX_CODE_LINES).then(|| format!("{}: {lines} lines", f.path.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these along their jobs: {}",
        long.join(", ")
    );
}

#[test]
fn functions_over_100_lines_are_linted_and_each_exception_says_why() {
    for root in ["lib.rs", "main.rs"] {
        let text = std::fs::read_to_string(src().join(root)).unwrap();
        assert!(
            text.contains("#![warn(clippy::too_many_lines)]"),
            "host/src/{root} must turn on clippy::too_many_lines"
        );
    }
    let mut silent = Vec::new();
    for file in files() {
        let text = std::fs::read_to_string(&file.path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let exempts = line.contains("clippy::too_many_lines")
                && (line.contains("allow(") || line.contains("expect("));
            if exempts && !line.contains("reason = \"") {
                silent.push(format!("{}:{}", file.path.display(), n + 1));
            }
        }
    }
    assert!(
        silent.is_empty(),
        "say why each of these functions is one job: #[expect(clippy::too_many_lines, reason = \"…\")]: {silent:?}"
    );
}

#[test]
fn every_module_file_is_reached() {
    // A file the walk misses would escape every rule here.
    let reached: BTreeSet<PathBuf> = files().into_iter().map(|f| f.path).collect();
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    let missed: Vec<String> = all
        .iter()
        .filter(|p| !reached.contains(*p) && !p.starts_with(src().join("cli/templates")))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missed.is_empty(),
        "not reached from lib.rs or main.rs: {missed:?}"
    );
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

#[test]
fn the_path_reader_expands_use_groups() {
    let code = "use crate::{a::X, b::{c, d::E}, e};\nfn f() { crate::g::h(); x::crate::no(); }";
    let paths: Vec<String> = paths_after(code, "crate::")
        .iter()
        .map(|(_, p)| p.join("::"))
        .collect();
    assert_eq!(paths, ["a::X", "b::c", "b::d::E", "e", "g::h"]);
    assert_eq!(
        paths_after(code, "crate::")[4].0,
        2,
        "line numbers count from 1"
    );
}

#[test]
fn code_lines_leave_out_comments_docs_blank_lines_and_tests() {
    let text = "//! A module.\n\n/// Docs.\nfn f() {} // why\n\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(code_lines(text), 1);
    let shared = "fn f() {}\n#[cfg(test)]\npub(crate) mod tests {\n    const X: u8 = 1;\n}\n";
    assert_eq!(
        code_lines(shared),
        1,
        "a test module others use is a test module too"
    );
}

#[test]
fn a_loop_through_mod_rs_is_found() {
    let mut graph = BTreeMap::new();
    let edge = |to: &str| BTreeMap::from([(to.to_string(), String::new())]);
    graph.insert("mod.rs".to_string(), edge("worker"));
    graph.insert("worker".to_string(), edge("mod.rs"));
    graph.insert("plan".to_string(), edge("worker"));
    assert_eq!(
        loops(&graph),
        [vec!["mod.rs".to_string(), "worker".to_string()]]
    );
}
