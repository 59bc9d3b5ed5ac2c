//! `reconciled dev --build <project>`: rebuilds a guest when its sources change, into the folder
//! that a [`DirSource`](super::dir::DirSource) watches. A folder with a `Cargo.toml` is built by
//! cargo, in the [`DEV_PROFILE`], and the `.wasm` installed; any other folder with a `build.sh`
//! (what `reconciled new` writes for TypeScript, Python and Go) is built by running it with
//! [`OUT_DIR_ENV`] naming the folder to write the module into.
//!
//! Where it may surprise:
//! - For cargo, only the crate's `src/` (recursively), `Cargo.toml` and `build.rs` are watched: a
//!   change to a path dependency, a workspace manifest or `.cargo/config.toml` needs a save in
//!   `src/` to take effect. For `build.sh`, the whole folder is, but for `dev/`, `node_modules/`,
//!   `target/`, `__pycache__/`, hidden folders and the output folder. Editor temp files
//!   (`.x.swp`, `x~`, `#x#`) are ignored.
//! - A change is new content, not an event: a file touched, opened for writing and closed, or
//!   rewritten with the same bytes (what tools and editors do all the time) builds nothing. Each
//!   build's log line names the source files whose change started it, and the module it
//!   installed with its digest, which the load's log line names too. On Linux a file is read
//!   once its writer closes it; a writer that keeps a file open builds nothing until it closes.
//! - Builds never overlap: a change during a build waits for it, then one more build covers every
//!   change that came in meanwhile.
//! - The files `ignore`d (the kubeconfig `--write-kubeconfig` writes into the project) never
//!   build.
//! - A failed build changes nothing in the output folder, so the previous version keeps serving.
//!   So does a no-op build: an artifact identical to the installed one is not copied again.
//! - `cargo` is whatever is first on `PATH`, run in the crate's folder (so its
//!   `rust-toolchain.toml` applies), and inherits this process's environment.
//! - Every `.wasm` that the build produces is installed, so pointing it at a workspace installs
//!   one module per guest crate in it.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use serde::Deserialize;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Quiet needed after the last source change before building: saving several files, or an
/// editor's save dance, is one build.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// A tree that never goes quiet (a formatter over many files) still builds after this long.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// Why the crate cannot be watched, or why one build did not install anything.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The output folder could not be created.
    #[error(
        "cannot create the module folder {path}: {source}; check that this user may write there"
    )]
    OutDir {
        /// The folder.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The OS refused to watch part of the crate.
    #[error(
        "cannot watch {path}: {source}; on Linux the usual cause is the inotify budget (sysctl fs.inotify.max_user_instances and fs.inotify.max_user_watches)"
    )]
    Watch {
        /// What was to be watched.
        path: PathBuf,
        /// What the watcher said.
        #[source]
        source: notify::Error,
    },
    /// The folder has neither a `Cargo.toml` nor a `build.sh`.
    #[error(
        "{dir} has neither a Cargo.toml nor a build.sh; `--build` takes a guest project's folder (`reconciled new` writes one)"
    )]
    NotAProject {
        /// The folder given.
        dir: PathBuf,
    },
    /// `cargo` (or `build.sh`) could not be started or its output read.
    #[error("cannot run the build in {dir}: {source}; is cargo on PATH, and build.sh executable?")]
    Run {
        /// The crate.
        dir: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The build failed; cargo (or `build.sh`) has printed why.
    #[error(
        "the build in {dir} failed ({status}); fix the error above; the previous version keeps serving"
    )]
    Failed {
        /// The crate.
        dir: PathBuf,
        /// Cargo's exit status.
        status: std::process::ExitStatus,
    },
    /// The build succeeded without producing a module.
    #[error(
        "cargo build in {dir} produced no .wasm; a guest crate needs `crate-type = [\"cdylib\"]` (or a bin target), and the target needs `rustup target add wasm32-wasip2`"
    )]
    NoArtifact {
        /// The crate.
        dir: PathBuf,
    },
    /// The module could not be copied into the output folder.
    #[error("cannot install {from} as {to}: {source}; the previous version keeps serving")]
    Install {
        /// The built module.
        from: PathBuf,
        /// Where it was going.
        to: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// The environment variable that tells a project's `build.sh` where to write its module.
pub const OUT_DIR_ENV: &str = "RECONCILED_OUT_DIR";

/// How a project is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Toolchain {
    /// `cargo build`, then the `.wasm` it reports installed.
    Cargo,
    /// `./build.sh`, which writes the module itself.
    Script,
}

impl Toolchain {
    /// A `Cargo.toml` wins over a `build.sh`: a Rust project's `build.sh` only wraps cargo.
    fn of(dir: &Path) -> Option<Toolchain> {
        if dir.join("Cargo.toml").is_file() {
            Some(Toolchain::Cargo)
        } else if dir.join("build.sh").is_file() {
            Some(Toolchain::Script)
        } else {
            None
        }
    }
}

/// Rebuilds a guest project on change and installs its module. Dropping it stops watching, and
/// kills a build in progress.
pub struct DevBuild {
    crate_dir: PathBuf,
    // Never read: owning it is what keeps the OS watches (and their thread) alive.
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for DevBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevBuild")
            .field("crate_dir", &self.crate_dir)
            .finish_non_exhaustive()
    }
}

impl Drop for DevBuild {
    fn drop(&mut self) {
        // Drops a running build's future, whose child is `kill_on_drop`.
        self.task.abort();
    }
}

impl DevBuild {
    /// Watches `crate_dir`'s sources (see the module docs), but for the files `ignore` names;
    /// on a change of content (debounced 200 ms) builds:
    /// `cargo build --target wasm32-wasip2` in the [`DEV_PROFILE`], installing each `.wasm` it
    /// produces into `out_dir` under its own file name, atomically (a dot-temp file renamed
    /// into place); or `./build.sh` with [`OUT_DIR_ENV`] set to `out_dir`. A
    /// [`DirSource`](super::dir::DirSource) on `out_dir` picks the module up. Also builds once at
    /// start.
    ///
    /// `out_dir` is created if missing. Build failures are logged, not returned: cargo's own
    /// output (on stderr, passed through) says what to fix.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(crate_dir: &Path, out_dir: &Path, ignore: &[PathBuf]) -> Result<DevBuild, Error> {
        let not_a_project = || Error::NotAProject {
            dir: crate_dir.into(),
        };
        let toolchain = Toolchain::of(crate_dir).ok_or_else(not_a_project)?;
        // notify reports paths under the watched path as given; the source filter compares
        // them with `crate_dir`, which a relative path (`--build guests/x`) would defeat.
        let crate_dir = &crate_dir.canonicalize().map_err(|_| not_a_project())?;
        std::fs::create_dir_all(out_dir).map_err(|source| Error::OutDir {
            path: out_dir.into(),
            source,
        })?;
        let out_dir = &out_dir.canonicalize().map_err(|source| Error::OutDir {
            path: out_dir.into(),
            source,
        })?;

        let (events_tx, events) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = events_tx.send(event);
        })
        .map_err(|source| Error::Watch {
            path: crate_dir.into(),
            source,
        })?;
        match toolchain {
            Toolchain::Cargo => watch_crate(&mut watcher, crate_dir)?,
            Toolchain::Script => watch_script_project(&mut watcher, crate_dir)?,
        }

        let sources = Sources {
            toolchain,
            dir: crate_dir.into(),
            out_dir: out_dir.into(),
            // As the watcher will name them: absolute, under the canonical project folder.
            ignore: ignore
                .iter()
                .filter_map(|p| {
                    let absolute = std::path::absolute(p).ok()?;
                    let parent = absolute.parent()?.canonicalize().ok()?;
                    Some(parent.join(absolute.file_name()?))
                })
                .collect(),
        };
        let mut seen = Seen::default();
        for file in sources.files() {
            let now = content(&file);
            seen.changed(&file, now);
        }
        let loop_ = BuildLoop {
            sources,
            seen,
            read: Box::new(content),
            events,
        };
        let (crate_dir2, out_dir) = (crate_dir.to_path_buf(), out_dir.to_path_buf());
        let task = tokio::spawn(loop_.run(move |cause: Vec<PathBuf>| {
            let (crate_dir, out_dir) = (crate_dir2.clone(), out_dir.clone());
            Box::pin(async move { build_and_log(toolchain, &crate_dir, &out_dir, &cause).await })
                as Pin<Box<dyn Future<Output = ()> + Send>>
        }));
        Ok(DevBuild {
            crate_dir: crate_dir.into(),
            _watcher: watcher,
            task,
        })
    }
}

/// What started a build, for its log line: `start`, or the source files changed (relative to
/// the project), the first few of them.
fn cause_of(crate_dir: &Path, changed: &[PathBuf]) -> String {
    if changed.is_empty() {
        return "start".into();
    }
    let mut names: Vec<String> = changed
        .iter()
        .map(|p| p.strip_prefix(crate_dir).unwrap_or(p).display().to_string())
        .collect();
    names.sort();
    names.dedup();
    let more = names.len().saturating_sub(3);
    names.truncate(3);
    let and = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{and} changed", names.join(", "))
}

/// Builds once, for `cause` (the source files changed, none at start), and says how it went:
/// what started it, and each module it installed with its digest.
async fn build_and_log(toolchain: Toolchain, crate_dir: &Path, out_dir: &Path, cause: &[PathBuf]) {
    let started = std::time::Instant::now();
    let cause = cause_of(crate_dir, cause);
    tracing::info!(crate_dir = %crate_dir.display(), %cause, "building guest project");
    let built = match toolchain {
        Toolchain::Cargo => build(crate_dir, out_dir).await,
        Toolchain::Script => run_build_sh(crate_dir, out_dir).await,
    };
    match built {
        Ok(installed) if installed.is_empty() => {
            tracing::info!(crate_dir = %crate_dir.display(), %cause, took = ?started.elapsed(), "build finished; module unchanged");
        }
        Ok(installed) => {
            let installed: Vec<String> = installed
                .iter()
                .map(|(path, digest)| format!("{} (sha256 {digest})", path.display()))
                .collect();
            tracing::info!(crate_dir = %crate_dir.display(), %cause, took = ?started.elapsed(), ?installed, "build finished; module installed");
        }
        Err(e) => tracing::error!(crate_dir = %crate_dir.display(), %cause, "{e}"),
    }
}

/// The `.wasm` files of `out_dir` and their digests.
fn modules_in(out_dir: &Path) -> HashMap<PathBuf, String> {
    std::fs::read_dir(out_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .filter_map(|p| Some((p.clone(), content(&p)?)))
        .collect()
}

/// Runs `./build.sh` once with [`OUT_DIR_ENV`] set; it writes the module itself. Returns the
/// modules of `out_dir` whose content it changed, with their digests.
async fn run_build_sh(dir: &Path, out_dir: &Path) -> Result<Vec<(PathBuf, String)>, Error> {
    let before = modules_in(out_dir);
    let status = tokio::process::Command::new(dir.join("build.sh"))
        .env(OUT_DIR_ENV, out_dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        // Its progress and errors, straight to the developer.
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| Error::Run {
            dir: dir.into(),
            source,
        })?;
    if !status.success() {
        return Err(Error::Failed {
            dir: dir.into(),
            status,
        });
    }
    let mut changed: Vec<(PathBuf, String)> = modules_in(out_dir)
        .into_iter()
        .filter(|(path, digest)| before.get(path) != Some(digest))
        .collect();
    changed.sort();
    Ok(changed)
}

/// Runs cargo once and installs what it built; returns the files that changed in `out_dir`,
/// with their digests.
async fn build(crate_dir: &Path, out_dir: &Path) -> Result<Vec<(PathBuf, String)>, Error> {
    let cargo_err = |source| Error::Run {
        dir: crate_dir.into(),
        source,
    };
    let mut child = tokio::process::Command::new("cargo")
        .args(["build", "--target", "wasm32-wasip2"])
        .args(dev_profile())
        .arg("--message-format=json-render-diagnostics")
        .current_dir(crate_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // Progress and rendered compiler errors, straight to the developer.
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(cargo_err)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut artifacts = Vec::new();
    while let Some(line) = lines.next_line().await.map_err(cargo_err)? {
        artifacts.extend(wasm_artifacts(&line));
    }
    let status = child.wait().await.map_err(cargo_err)?;
    if !status.success() {
        return Err(Error::Failed {
            dir: crate_dir.into(),
            status,
        });
    }
    if artifacts.is_empty() {
        return Err(Error::NoArtifact {
            dir: crate_dir.into(),
        });
    }
    // Off the runtime: modules are megabytes.
    let out_dir = out_dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut installed = Vec::new();
        for artifact in artifacts {
            installed.extend(install(&artifact, &out_dir)?);
        }
        Ok(installed)
    })
    .await
    .map_err(|e| Error::Run {
        dir: crate_dir.into(),
        source: std::io::Error::other(e),
    })?
}

/// cargo's arguments for the profile a rebuild uses, [`DEV_PROFILE`], defined on the command
/// line so that a guest crate needs nothing in its manifest: the release profile (so
/// `panic = "abort"`, `strip` and the crate's own release settings hold) without what makes a
/// release build slow to repeat.
/// Link-time optimisation and one codegen unit are what made a one-line edit take seconds;
/// incremental compilation keeps the crate's unchanged functions. `opt-level = 1` keeps the
/// module near the release build's size (the scaffolded project: 0.50 MB against 0.39 MB), so
/// the host's compile of it stays a fraction of a second.
pub fn dev_profile() -> Vec<String> {
    let set = |key: &str, value: &str| {
        [
            "--config".into(),
            format!("profile.{DEV_PROFILE}.{key}={value}"),
        ]
    };
    let mut args = vec!["--profile".to_owned(), DEV_PROFILE.to_owned()];
    for (key, value) in [
        ("inherits", "\"release\""),
        ("opt-level", "1"),
        ("lto", "false"),
        ("codegen-units", "16"),
        ("incremental", "true"),
    ] {
        args.extend(set(key, value));
    }
    args
}

/// The cargo profile of `reconciled dev --build`: its output is in
/// `target/wasm32-wasip2/reconciled-dev/`, beside, never over, a release build's. A crate may
/// define `[profile.reconciled-dev]` itself; the settings above take precedence over it.
pub const DEV_PROFILE: &str = "reconciled-dev";

/// One line of cargo's JSON output, as far as artifacts go.
#[derive(Debug, Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    target: Option<Target>,
    #[serde(default)]
    filenames: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Target {
    kind: Vec<String>,
}

/// The modules a line of `cargo build --message-format=json` reports built: `.wasm` files of a
/// `compiler-artifact` for a cdylib or bin target. Anything else, including a line that is not
/// JSON, yields none.
fn wasm_artifacts(line: &str) -> Vec<PathBuf> {
    let Ok(message) = serde_json::from_str::<Message>(line) else {
        return Vec::new();
    };
    let module_target = message
        .target
        .is_some_and(|t| t.kind.iter().any(|k| k == "cdylib" || k == "bin"));
    if message.reason != "compiler-artifact" || !module_target {
        return Vec::new();
    }
    message
        .filenames
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "wasm"))
        .collect()
}

/// Copies `artifact` into `out_dir` under its file name, atomically; with its digest, or `None`
/// when the installed file already has the same bytes.
fn install(artifact: &Path, out_dir: &Path) -> Result<Option<(PathBuf, String)>, Error> {
    let name = artifact.file_name().unwrap_or_default().to_string_lossy();
    let to = out_dir.join(&*name);
    let err = |source| Error::Install {
        from: artifact.into(),
        to: to.clone(),
        source,
    };
    let bytes = std::fs::read(artifact).map_err(err)?;
    // A no-op rebuild must not wake the folder watcher (or rewrite a file that is being read).
    if std::fs::read(&to).is_ok_and(|old| old == bytes) {
        return Ok(None);
    }
    // A dot name that does not end in .wasm: the folder watcher ignores it until the rename.
    let tmp = out_dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, &bytes).map_err(err)?;
    if let Err(e) = std::fs::rename(&tmp, &to) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(Some((to, crate::guest::digest_of(&bytes))))
}

/// Watches a crate's folder (for `Cargo.toml` and `build.rs`) and its `src/`, recursively.
fn watch_crate(watcher: &mut notify::RecommendedWatcher, dir: &Path) -> Result<(), Error> {
    let watch = |watcher: &mut notify::RecommendedWatcher, path: &Path, mode| {
        watcher.watch(path, mode).map_err(|source| Error::Watch {
            path: path.into(),
            source,
        })
    };
    // The folder rather than the two files: editors save by renaming a new file over the old
    // one, which would end a watch on the file itself.
    watch(watcher, dir, RecursiveMode::NonRecursive)?;
    let src = dir.join("src");
    if src.is_dir() {
        watch(watcher, &src, RecursiveMode::Recursive)?;
    } else {
        tracing::warn!(crate_dir = %dir.display(), "the crate has no src/ folder; only Cargo.toml and build.rs are watched");
    }
    Ok(())
}

/// Folders of a `build.sh` project that hold what tools write, not sources: watching them would
/// rebuild on every build.
const NOT_SOURCES: [&str; 5] = ["dev", "node_modules", "target", "__pycache__", "dist"];

/// Watches `dir` and every folder under it that may hold sources, each on its own (so that
/// `node_modules/` costs no watches). A folder created later is not watched: save a file beside
/// it, or restart.
fn watch_script_project(watcher: &mut notify::RecommendedWatcher, dir: &Path) -> Result<(), Error> {
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        watcher
            .watch(&folder, RecursiveMode::NonRecursive)
            .map_err(|source| Error::Watch {
                path: folder.clone(),
                source,
            })?;
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() && !name.starts_with('.') && !NOT_SOURCES.contains(&&*name) {
                folders.push(path);
            }
        }
    }
    Ok(())
}

/// What a source file holds, as far as a rebuild goes: its bytes' sha256, or `None` when it
/// is not there (or is not a file).
type Content = Option<String>;

/// Reads what `path` holds now.
fn content(path: &Path) -> Content {
    std::fs::read(path)
        .ok()
        .map(|bytes| crate::guest::digest_of(&bytes))
}

/// What each source file held when last looked at: a change is new content, not an event.
#[derive(Debug, Default)]
struct Seen(HashMap<PathBuf, Content>);

impl Seen {
    /// Whether `path` now holding `now` is a change, remembering it. A file never seen is one
    /// if it is there.
    fn changed(&mut self, path: &Path, now: Content) -> bool {
        match self.0.insert(path.to_path_buf(), now.clone()) {
            Some(before) => before != now,
            None => now.is_some(),
        }
    }
}

/// What a project's builds read, to tell its changes from everything else's.
#[derive(Debug)]
struct Sources {
    toolchain: Toolchain,
    dir: PathBuf,
    out_dir: PathBuf,
    /// Files never counted, whatever they are (the kubeconfig written into the project).
    ignore: Vec<PathBuf>,
}

impl Sources {
    /// The paths of an event that may be sources (their content decides whether they changed).
    fn named_by<'e>(&self, event: &'e Event) -> Vec<&'e PathBuf> {
        match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
            // Opens and reads: the build reading the sources would otherwise loop forever.
            EventKind::Access(_) => return Vec::new(),
            // On Linux a write is judged when its writer closes the file, which reports the
            // close: read at the write's own event, a file being rewritten is seen empty or
            // half written (a change), then whole again (another), and an edit that changed
            // nothing would build twice.
            #[cfg(target_os = "linux")]
            EventKind::Modify(notify::event::ModifyKind::Data(_)) => return Vec::new(),
            _ => {}
        }
        (event.paths.iter())
            .filter(|path| self.is_source(path))
            .collect()
    }

    /// The source files there are now, for the first look at their content.
    fn files(&self) -> Vec<PathBuf> {
        let mut folders = vec![self.dir.clone()];
        let mut files = Vec::new();
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
                let path = entry.path();
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let walk = !name.starts_with('.') && !NOT_SOURCES.contains(&&*name);
                if path.is_dir() && walk {
                    folders.push(path);
                } else if path.is_file() && self.is_source(&path) {
                    files.push(path);
                }
            }
        }
        files
    }

    fn is_source(&self, path: &Path) -> bool {
        if self.ignore.iter().any(|i| i == path) {
            return false;
        }
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        let temp = name.starts_with('.') || name.starts_with('#') || name.ends_with('~');
        match self.toolchain {
            Toolchain::Cargo => {
                let src = self.dir.join("src");
                if path.starts_with(&src) && path != src {
                    !temp
                } else {
                    // Not Cargo.lock or target/: cargo writes those itself.
                    path.parent() == Some(&self.dir) && (name == "Cargo.toml" || name == "build.rs")
                }
            }
            Toolchain::Script => {
                let Ok(inside) = path.strip_prefix(&self.dir) else {
                    return false;
                };
                let written = inside.components().any(|c| {
                    let c = c.as_os_str().to_string_lossy();
                    c.starts_with('.') || NOT_SOURCES.contains(&&*c)
                });
                !temp && !written && !path.starts_with(&self.out_dir) && path != self.dir
            }
        }
    }
}

/// Decides when builds run: at most one at a time, and one more after it if anything changed
/// while it ran, however many changes that was.
#[derive(Debug, Default)]
struct Coalesce {
    running: bool,
    again: bool,
}

impl Coalesce {
    /// Something changed; true when a build should start now.
    fn changed(&mut self) -> bool {
        if self.running {
            self.again = true;
            false
        } else {
            self.running = true;
            true
        }
    }

    /// The running build ended; true when another should start now.
    fn finished(&mut self) -> bool {
        if std::mem::take(&mut self.again) {
            true
        } else {
            self.running = false;
            false
        }
    }
}

/// The task behind a [`DevBuild`], with the build itself (and how a file is read) left to the
/// caller, so tests can drive it without cargo.
struct BuildLoop {
    sources: Sources,
    seen: Seen,
    read: Box<dyn Fn(&Path) -> Content + Send>,
    events: mpsc::UnboundedReceiver<notify::Result<Event>>,
}

type BuildFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl BuildLoop {
    /// Builds at start, then for each quiet burst of changes, one build at a time;
    /// `start_build` is given the files whose change it covers (none at start).
    async fn run(mut self, mut start_build: impl FnMut(Vec<PathBuf>) -> BuildFuture) {
        let mut coalesce = Coalesce::default();
        let mut running: Option<BuildFuture> = None;
        // (first change of the burst, when to build)
        let mut pending: Option<(Instant, Instant)> = None;
        // The files changed in the burst, and those waiting for the build after the one running.
        let (mut burst, mut queued): (Vec<PathBuf>, Vec<PathBuf>) = (Vec::new(), Vec::new());
        if coalesce.changed() {
            running = Some(start_build(Vec::new()));
        }
        loop {
            let deadline = pending.map(|(_, at)| at);
            tokio::select! {
                event = self.events.recv() => match event {
                    Some(Ok(event)) => {
                        let changed: Vec<PathBuf> = (self.sources.named_by(&event).into_iter())
                            .filter(|path| !path.is_dir())
                            .filter(|path| {
                                let now = (self.read)(path);
                                self.seen.changed(path, now)
                            })
                            .cloned()
                            .collect();
                        if !changed.is_empty() {
                            burst.extend(changed);
                            let now = Instant::now();
                            let first = pending.map_or(now, |(first, _)| first);
                            pending = Some((first, (now + DEBOUNCE).min(first + MAX_WAIT)));
                        }
                    }
                    Some(Err(e)) => {
                        tracing::error!(crate_dir = %self.sources.dir.display(), error = %e, "watching the guest project failed; it is no longer rebuilt on change (restart `reconciled dev`)");
                        return;
                    }
                    None => return,
                },
                () = sleep_until(deadline) => {
                    pending = None;
                    let cause = std::mem::take(&mut burst);
                    if coalesce.changed() {
                        running = Some(start_build(cause));
                    } else {
                        queued.extend(cause);
                    }
                }
                () = async { running.as_mut().expect("guarded").await }, if running.is_some() => {
                    running = coalesce
                        .finished()
                        .then(|| start_build(std::mem::take(&mut queued)));
                }
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use notify::event::{CreateKind, DataChange, ModifyKind};
    use tokio::sync::Semaphore;

    use super::*;

    const LIB: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///g#cmgen@0.1.0","manifest_path":"/g/Cargo.toml","target":{"kind":["cdylib"],"crate_types":["cdylib"],"name":"configmap_generator","src_path":"/g/src/lib.rs","edition":"2024","doctest":false,"test":false},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/g/target/wasm32-wasip2/release/configmap_generator.wasm"],"executable":null,"fresh":false}"#;
    const BIN: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///g#tool@0.1.0","manifest_path":"/g/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"tool","src_path":"/g/src/main.rs","edition":"2024","doctest":false,"test":false},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/g/target/wasm32-wasip2/release/tool.wasm"],"executable":"/g/target/wasm32-wasip2/release/tool.wasm","fresh":true}"#;
    const DEP: &str = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#serde@1.0.0","manifest_path":"/r/serde/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"serde","src_path":"/r/serde/src/lib.rs","edition":"2018","doctest":true,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":["std"],"filenames":["/g/target/wasm32-wasip2/release/deps/libserde-1.rlib","/g/target/wasm32-wasip2/release/deps/libserde-1.rmeta"],"executable":null,"fresh":true}"#;
    const BUILD_SCRIPT: &str = r#"{"reason":"build-script-executed","package_id":"path+file:///g#cmgen@0.1.0","linked_libs":[],"linked_paths":[],"cfgs":[],"env":[],"out_dir":"/g/target/release/build/x/out"}"#;
    const MESSAGE: &str = r#"{"reason":"compiler-message","package_id":"path+file:///g#cmgen@0.1.0","manifest_path":"/g/Cargo.toml","target":{"kind":["cdylib"],"crate_types":["cdylib"],"name":"configmap_generator","src_path":"/g/src/lib.rs","edition":"2024","doctest":false,"test":false},"message":{"rendered":"error: x","message":"x","level":"error","spans":[],"children":[],"code":null}}"#;
    const FINISHED: &str = r#"{"reason":"build-finished","success":true}"#;

    #[test]
    fn finds_the_wasm_artifacts_in_cargo_json() {
        assert_eq!(
            wasm_artifacts(LIB),
            [PathBuf::from(
                "/g/target/wasm32-wasip2/release/configmap_generator.wasm"
            )]
        );
        assert_eq!(
            wasm_artifacts(BIN),
            [PathBuf::from("/g/target/wasm32-wasip2/release/tool.wasm")]
        );
        for line in [
            DEP,
            BUILD_SCRIPT,
            MESSAGE,
            FINISHED,
            "",
            "warning: not json",
        ] {
            assert!(wasm_artifacts(line).is_empty(), "{line}");
        }
    }

    #[test]
    fn coalesces_changes_during_a_build_into_one_more() {
        let mut c = Coalesce::default();
        assert!(c.changed(), "idle: build now");
        assert!(!c.changed(), "running: wait");
        assert!(!c.changed(), "still one more, not two");
        assert!(c.finished(), "the one more");
        assert!(!c.finished(), "nothing changed during it");
        assert!(c.changed(), "idle again");
        assert!(!c.finished());
    }

    fn sources(toolchain: Toolchain) -> Sources {
        Sources {
            toolchain,
            dir: "/g".into(),
            out_dir: "/g/modules".into(),
            ignore: vec!["/g/kubeconfig".into()],
        }
    }

    /// Whether `event` names a source (its content then decides).
    fn names_a_source(sources: &Sources, event: &Event) -> bool {
        !sources.named_by(event).is_empty()
    }

    /// An editor's save: a file written and closed, or renamed into place.
    fn modify(p: &str) -> Event {
        if cfg!(target_os = "linux") {
            Event::new(EventKind::Access(AccessKind::Close(AccessMode::Write))).add_path(p.into())
        } else {
            Event::new(EventKind::Modify(ModifyKind::Data(DataChange::Any))).add_path(p.into())
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_being_rewritten_is_judged_once_its_writer_closes_it() {
        let script = sources(Toolchain::Script);
        let write = Event::new(EventKind::Modify(ModifyKind::Data(DataChange::Any)))
            .add_path("/g/src/index.ts".into());
        assert!(
            !names_a_source(&script, &write),
            "the truncate or write itself"
        );
        let renamed = Event::new(EventKind::Create(notify::event::CreateKind::File))
            .add_path("/g/src/index.ts".into());
        assert!(names_a_source(&script, &renamed), "saved by a rename");
        assert!(names_a_source(&script, &modify("/g/src/index.ts")));
    }

    #[test]
    fn only_the_crates_sources_count() {
        let cargo = sources(Toolchain::Cargo);
        for p in [
            "/g/src/lib.rs",
            "/g/src/a/b.rs",
            "/g/Cargo.toml",
            "/g/build.rs",
        ] {
            assert!(names_a_source(&cargo, &modify(p)), "{p}");
        }
        for p in [
            "/g/Cargo.lock",
            "/g/target/release/x.wasm",
            "/g/src/.lib.rs.swp",
            "/g/src/lib.rs~",
            "/g/src/#lib.rs#",
            "/g/README.md",
            "/g/sub/Cargo.toml",
        ] {
            assert!(!names_a_source(&cargo, &modify(p)), "{p}");
        }
        let open = Event::new(EventKind::Access(AccessKind::Open(AccessMode::Any)))
            .add_path("/g/src/lib.rs".into());
        assert!(!names_a_source(&cargo, &open), "rustc reading sources");
        let close = Event::new(EventKind::Access(AccessKind::Close(AccessMode::Write)))
            .add_path("/g/src/lib.rs".into());
        assert!(names_a_source(&cargo, &close));
    }

    #[test]
    fn a_build_sh_project_counts_everything_but_what_tools_write() {
        let script = sources(Toolchain::Script);
        for p in [
            "/g/src/index.ts",
            "/g/app.py",
            "/g/main.go",
            "/g/go.mod",
            "/g/lib/x.py",
        ] {
            assert!(names_a_source(&script, &modify(p)), "{p}");
        }
        for p in [
            "/g/kubeconfig",
            "/g/modules/hello.wasm",
            "/g/dev/hello.wasm",
            "/g/node_modules/x/index.js",
            "/g/__pycache__/app.cpython-311.pyc",
            "/g/.venv/lib/site.py",
            "/g/.app.py.swp",
            "/g/app.py~",
            "/g",
            "/elsewhere/app.py",
        ] {
            assert!(!names_a_source(&script, &modify(p)), "{p}");
        }
    }

    #[test]
    fn a_build_sh_project_counts_a_file_only_when_its_bytes_changed() {
        let dir = std::env::temp_dir().join(format!(
            "reconciled-dev-content-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let file = dir.join("src/index.ts");
        std::fs::write(&file, "export const a = 1;\n").unwrap();
        let sources = Sources {
            toolchain: Toolchain::Script,
            dir: dir.clone(),
            out_dir: dir.join("dev"),
            ignore: Vec::new(),
        };
        let mut seen = Seen::default();
        for f in sources.files() {
            let now = content(&f);
            seen.changed(&f, now);
        }
        // A touch, an open for writing closed at once, the same bytes written again: nothing.
        let same = std::fs::read(&file).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        std::fs::write(&file, &same).unwrap();
        assert!(!seen.changed(&file, content(&file)), "the same bytes");
        // An edit is a change, once.
        std::fs::write(&file, "export const a = 2;\n").unwrap();
        assert!(seen.changed(&file, content(&file)));
        assert!(!seen.changed(&file, content(&file)), "seen already");
        // A new file is one; a file removed is one; a folder is none.
        let new = dir.join("src/new.ts");
        std::fs::write(&new, "x").unwrap();
        assert!(seen.changed(&new, content(&new)));
        std::fs::remove_file(&new).unwrap();
        assert!(seen.changed(&new, content(&new)));
        let folder = dir.join("src/lib");
        std::fs::create_dir(&folder).unwrap();
        assert!(!seen.changed(&folder, content(&folder)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_build_names_the_files_whose_change_started_it() {
        let dir = Path::new("/g");
        assert_eq!(cause_of(dir, &[]), "start");
        assert_eq!(
            cause_of(dir, &["/g/src/status.ts".into(), "/g/src/status.ts".into()]),
            "src/status.ts changed"
        );
        let many: Vec<PathBuf> = (0..5).map(|i| format!("/g/src/{i}.ts").into()).collect();
        assert_eq!(
            cause_of(dir, &many),
            "src/0.ts, src/1.ts, src/2.ts and 2 more changed"
        );
    }

    #[test]
    fn a_cargo_toml_wins_over_a_build_sh_and_a_folder_with_neither_is_refused() {
        let dir = std::env::temp_dir().join(format!(
            "reconciled-dev-build-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let found = [
            ("build.sh", Some(Toolchain::Script)),
            ("Cargo.toml", Some(Toolchain::Cargo)),
        ]
        .map(|(file, _)| {
            std::fs::write(dir.join(file), "").unwrap();
            Toolchain::of(&dir)
        });
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, [Some(Toolchain::Script), Some(Toolchain::Cargo)]);
        assert_eq!(Toolchain::of(Path::new("/nonexistent")), None);
    }

    /// Drives the real loop with fake builds that wait for a permit; yields the number of builds
    /// started so far, after letting the loop catch up.
    struct Harness {
        events: mpsc::UnboundedSender<notify::Result<Event>>,
        builds: Arc<AtomicUsize>,
        causes: Arc<std::sync::Mutex<Vec<Vec<PathBuf>>>>,
        permits: Arc<Semaphore>,
        _task: tokio::task::JoinHandle<()>,
    }

    impl Harness {
        fn start() -> Self {
            let (events, rx) = mpsc::unbounded_channel();
            let builds = Arc::new(AtomicUsize::new(0));
            let causes: Arc<std::sync::Mutex<Vec<Vec<PathBuf>>>> = Arc::default();
            let permits = Arc::new(Semaphore::new(0));
            let (b, c, p) = (builds.clone(), causes.clone(), permits.clone());
            // Every look at a file finds new content: each touch is an edit.
            let edits = AtomicUsize::new(0);
            let task = tokio::spawn(
                BuildLoop {
                    sources: sources(Toolchain::Cargo),
                    seen: Seen::default(),
                    read: Box::new(move |_| Some(edits.fetch_add(1, Ordering::SeqCst).to_string())),
                    events: rx,
                }
                .run(move |cause| {
                    b.fetch_add(1, Ordering::SeqCst);
                    c.lock().unwrap().push(cause);
                    let p = p.clone();
                    Box::pin(async move { p.acquire().await.unwrap().forget() })
                }),
            );
            Self {
                events,
                builds,
                causes,
                permits,
                _task: task,
            }
        }

        fn touch(&self, path: &str) {
            let e = Event::new(EventKind::Create(CreateKind::File)).add_path(path.into());
            self.events.send(Ok(e)).unwrap();
        }

        async fn builds_after(&self, wait: Duration) -> usize {
            tokio::time::sleep(wait).await;
            self.builds.load(Ordering::SeqCst)
        }

        fn finish_one(&self) {
            self.permits.add_permits(1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn builds_at_start_then_once_per_quiet_burst_never_two_at_once() {
        let h = Harness::start();
        let ms = Duration::from_millis;
        assert_eq!(h.builds_after(ms(1)).await, 1, "the build at start");

        // Changes during the build: debounced, then held until it ends.
        for _ in 0..5 {
            h.touch("/g/src/lib.rs");
            assert_eq!(h.builds_after(ms(50)).await, 1);
        }
        assert_eq!(h.builds_after(ms(500)).await, 1, "never two at once");
        h.finish_one();
        assert_eq!(h.builds_after(ms(1)).await, 2, "one more for all of them");
        h.finish_one();
        assert_eq!(h.builds_after(ms(1000)).await, 2, "and no third");

        // Idle: a burst of changes is one build, 200 ms after the last.
        h.touch("/g/src/a.rs");
        assert_eq!(h.builds_after(ms(150)).await, 2);
        h.touch("/g/Cargo.toml");
        assert_eq!(h.builds_after(ms(150)).await, 2, "the wait restarted");
        assert_eq!(h.builds_after(ms(60)).await, 3);
        h.finish_one();

        // What cargo itself writes never builds.
        h.touch("/g/Cargo.lock");
        h.touch("/g/target/x");
        assert_eq!(h.builds_after(ms(1000)).await, 3);

        // Each build was told what it covers.
        let causes = h.causes.lock().unwrap().clone();
        let at = |p: &str| PathBuf::from(p);
        assert_eq!(
            causes,
            [
                vec![],
                vec![at("/g/src/lib.rs"); 5],
                vec![at("/g/src/a.rs"), at("/g/Cargo.toml")],
            ]
        );
    }

    #[tokio::test]
    async fn start_refuses_a_folder_without_cargo_toml_or_build_sh() {
        let dir = std::env::temp_dir().join(format!(
            "reconciled-cargo-build-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let err = DevBuild::start(&dir, &dir.join("out"), &[]).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(err, Error::NotAProject { .. }), "{err}");
        assert!(err.to_string().contains(&*dir.to_string_lossy()), "{err}");
    }

    #[test]
    fn installs_atomically_and_skips_an_unchanged_module() {
        let dir = std::env::temp_dir().join(format!(
            "reconciled-cargo-install-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let built = dir.join("m.wasm");
        std::fs::write(&built, b"v1").unwrap();
        let installed = |bytes: &[u8]| Some((out.join("m.wasm"), crate::guest::digest_of(bytes)));
        assert_eq!(install(&built, &out).unwrap(), installed(b"v1"));
        assert_eq!(install(&built, &out).unwrap(), None, "unchanged");
        std::fs::write(&built, b"v2").unwrap();
        assert_eq!(install(&built, &out).unwrap(), installed(b"v2"));
        assert_eq!(std::fs::read(out.join("m.wasm")).unwrap(), b"v2");
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(left.len(), 1, "no temp file left behind");
    }
}
