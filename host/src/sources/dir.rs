//! `reconciled dev`: a folder of `.wasm` modules, watched, each file one guest.
//!
//! Every `<name>.wasm` in the folder is reported once at start and again each time its content
//! changes; a file that goes away is reported as removed. Writers are not atomic, so each file's
//! events are debounced: a close after writing (or a rename into place) settles in
//! milliseconds, anything else waits for the writer to go quiet.
//!
//! A `<name>.settings.json` beside `<name>.wasm` holds the guest's settings (a JSON object, see
//! [`crate::guest::settings`]): editing it reports the module again, with the new text, and the
//! host reloads the guest with them and compiles nothing.
//!
//! Where it may surprise:
//! - Only the folder itself is watched, not subfolders, and only names ending in `.wasm` that
//!   do not start with `.`: editor and build temp files (`x.wasm.tmp`, `.x.wasm.swp`) are
//!   ignored until they are renamed to `x.wasm`.
//! - A change is content, not events: touching a file, or rewriting it with the same bytes,
//!   reports nothing.
//! - On Linux, whose watcher reports a writer closing a file, a file being written is read once
//!   its writer closes it, however long it pauses mid-file, up to `max_wait`. Elsewhere a writer
//!   that pauses longer than the settle time mid-file is read half-written. A file written for
//!   longer than `max_wait` is read half-written everywhere: the half version is reported, and
//!   the finished one follows once it is closed; guests that fail to load keep the previous
//!   version serving.
//! - Whoever may write to the folder chooses the names in it, so every file is opened beneath the
//!   folder's handle, opened once: no name or link reaches outside the folder. A symlink counts
//!   as the file it points to if that file is in the folder too (and only changes to the link
//!   itself are seen); one that leads outside is not read, and a warning says so.
//! - Two files whose names map to the same guest (`a_b.wasm`, `a-b.wasm`) both report under that
//!   name; the last one written wins, and a warning says so.
//! - Deleting or moving the folder stops the source: the receiver yields `None`. A move is
//!   seen at once; a deletion within a quarter of a second, since the OS does not report it while
//!   the folder's handle is open.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::guest::digest_of;
use crate::guest::settings::FILE_SUFFIX;

/// How many changes may wait for the consumer before the watcher stops reading files.
const CHANGES_BUFFER: usize = 64;

/// How often the folder is checked for having been deleted. While its handle is open the OS
/// keeps it, unlinked, and sends no event until the handle closes.
const FOLDER_CHECK: Duration = Duration::from_millis(250);

/// Why the folder cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The folder does not exist.
    #[error(
        "module folder {path} does not exist; create it, or point `reconciled dev` at the folder your build writes .wasm files to"
    )]
    Missing {
        /// The folder.
        path: PathBuf,
    },
    /// The path exists but is not a folder.
    #[error(
        "{path} is not a folder; `reconciled dev` watches a folder of .wasm modules, so pass the folder that holds it"
    )]
    NotAFolder {
        /// The path.
        path: PathBuf,
    },
    /// The folder could not be inspected or listed.
    #[error("cannot list module folder {path}: {source}; check that this user may read it")]
    Read {
        /// The folder.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The OS refused to watch the folder.
    #[error(
        "cannot watch module folder {path}: {source}; on Linux the usual cause is the inotify budget (sysctl fs.inotify.max_user_instances and fs.inotify.max_user_watches)"
    )]
    Watch {
        /// The folder.
        path: PathBuf,
        /// What the watcher said.
        #[source]
        source: notify::Error,
    },
}

/// A module file appeared, changed or went away.
#[derive(Clone)]
pub enum Change {
    /// The file exists with content not reported before (always, for the first report).
    Upsert {
        /// The guest name, from the file name (see [`guest_name`]).
        name: String,
        /// The file.
        path: PathBuf,
        /// Its whole content, as read once the writer had settled.
        bytes: Vec<u8>,
        /// sha256 of `bytes`, lowercase hex (the same as [`crate::guest::digest_of`]).
        digest: String,
        /// `<name>.settings.json` beside it, if there is one: unchecked, for the
        /// consumer to parse and refuse with the file's name.
        settings: Option<SettingsFile>,
        /// When the first filesystem event of this burst arrived (for the initial scan, when
        /// the scan ran): the start of the write-to-serving latency.
        changed_at: std::time::Instant,
    },
    /// The file is gone. Only sent for files that had an `Upsert`.
    Remove {
        /// The guest name, from the file name.
        name: String,
        /// The file that was removed (or renamed away).
        path: PathBuf,
    },
}

// Derived Debug would print megabytes of module bytes.
impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Upsert {
                name,
                path,
                bytes,
                digest,
                settings,
                changed_at,
            } => f
                .debug_struct("Upsert")
                .field("name", name)
                .field("path", path)
                .field("len", &bytes.len())
                .field("digest", digest)
                .field("settings", settings)
                .field("changed_at", changed_at)
                .finish(),
            Change::Remove { name, path } => f
                .debug_struct("Remove")
                .field("name", name)
                .field("path", path)
                .finish(),
        }
    }
}

/// How long a file must be quiet before it is read.
///
/// Each new event for a file restarts its wait; `max_wait` caps the total so that a file
/// rewritten continuously is still read now and then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// Quiet needed after the writer closed the file or renamed it into place [10 ms]: the
    /// write is most likely complete, and this is the latency every change pays.
    pub after_close: Duration,
    /// Quiet needed after any other event (data written, file created or removed) [100 ms]:
    /// the writer may still be writing, or about to recreate what it removed.
    pub after_other: Duration,
    /// Longest wait from the first event of a burst [2 s].
    pub max_wait: Duration,
    /// Data written to a file waits for its writer to close it (at most `max_wait`) rather than
    /// for `after_other` of quiet [on Linux, whose watcher reports the close; off elsewhere]. A writer that pauses mid-file (a slow disk's flush, a busy
    /// machine) is then never read half-written.
    pub wait_for_close: bool,
}

impl Default for Settle {
    fn default() -> Self {
        Self {
            after_close: Duration::from_millis(10),
            after_other: Duration::from_millis(100),
            max_wait: Duration::from_secs(2),
            wait_for_close: cfg!(target_os = "linux"),
        }
    }
}

/// Watches a folder of modules. Dropping it stops watching, and the receiver then yields
/// `None`.
pub struct DirSource {
    dir: PathBuf,
    // Never read: owning it is what keeps the OS watch (and its thread) alive.
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for DirSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirSource")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for DirSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DirSource {
    /// Starts watching `dir` (not its subfolders): first an `Upsert` for every module already
    /// there, in name order, then one change per settled write.
    ///
    /// The receiver yields `None` once the source stops: dropped, the folder deleted or moved,
    /// or the watcher failed (logged). A file being written while the source starts may be
    /// reported twice, half-written first.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(dir: &Path, settle: Settle) -> Result<(DirSource, mpsc::Receiver<Change>), Error> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(Error::NotAFolder { path: dir.into() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Missing { path: dir.into() });
            }
            Err(source) => {
                return Err(Error::Read {
                    path: dir.into(),
                    source,
                });
            }
        }
        // Events carry paths built from the watched one; an absolute path keeps every
        // comparison (and every path we report) unambiguous whatever the working directory.
        let dir = &dir.canonicalize().map_err(|source| Error::Read {
            path: dir.into(),
            source,
        })?;
        // The one use of ambient authority: every file is then opened beneath this handle.
        let folder =
            Dir::open_ambient_dir(dir, ambient_authority()).map_err(|source| Error::Read {
                path: dir.into(),
                source,
            })?;
        let folder = Arc::new(folder);

        // notify calls back on its own thread: stamp the event there (the latency starts at the
        // event, not when the task gets to it) and never block it.
        let (events_tx, events) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
            let _ = events_tx.send((std::time::Instant::now(), event));
        })
        .map_err(|source| Error::Watch {
            path: dir.into(),
            source,
        })?;
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|source| Error::Watch {
                path: dir.into(),
                source,
            })?;

        // Listed after the watch is in place, so a file written in between is either listed or
        // seen as an event (or both; the digest check drops the repeat).
        let existing = list_modules(&folder, dir).map_err(|source| Error::Read {
            path: dir.into(),
            source,
        })?;
        let now = Instant::now();
        let pending = existing
            .into_iter()
            .map(|path| {
                (
                    path,
                    Pending {
                        first: now,
                        deadline: now,
                    },
                )
            })
            .collect();

        let (changes, rx) = mpsc::channel(CHANGES_BUFFER);
        let task = tokio::spawn(
            Watch {
                dir: dir.into(),
                folder,
                settle,
                events,
                changes,
                pending,
                emitted: BTreeMap::new(),
            }
            .run(),
        );
        Ok((
            DirSource {
                dir: dir.into(),
                _watcher: watcher,
                task,
            },
            rx,
        ))
    }
}

/// The guest name a module file stands for: its file name without `.wasm`, with `_` turned
/// into `-` (so `configmap_generator.wasm`, as cargo names it, is guest `configmap-generator`).
///
/// A name that does not end in `.wasm` is kept whole; a name that is not UTF-8 is converted
/// lossily.
pub fn guest_name(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    file.strip_suffix(".wasm")
        .unwrap_or(&file)
        .replace('_', "-")
}

/// A module's settings file as read: where it is, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsFile {
    /// The file.
    pub path: PathBuf,
    /// Its content, unchecked.
    pub bytes: Vec<u8>,
}

/// The module `path` is the settings file of, if it is one directly in `dir`.
fn module_of_settings(dir: &Path, path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(FILE_SUFFIX)?;
    (path.parent() == Some(dir) && !stem.is_empty() && !name.starts_with('.'))
        .then(|| dir.join(format!("{stem}.wasm")))
}

/// Reads the settings file of module `name` (`x.wasm` → `x.settings.json`) in `folder` (at
/// `dir`), with its sha256: `None` when there is none. Read as the module is, beneath the
/// folder's handle.
fn read_settings(
    folder: &Dir,
    dir: &Path,
    name: &OsStr,
) -> std::io::Result<Option<(SettingsFile, String)>> {
    let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wasm")) else {
        return Ok(None);
    };
    let file = format!("{stem}{FILE_SUFFIX}");
    Ok(
        read_module(folder, OsStr::new(&file))?.map(|(bytes, digest)| {
            let path = dir.join(&file);
            (SettingsFile { path, bytes }, digest)
        }),
    )
}

/// Whether `path` is a module file directly in `dir`.
fn is_module(dir: &Path, path: &Path) -> bool {
    path.parent() == Some(dir)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".wasm") && !n.starts_with('.'))
}

/// The module files in `folder` (at `dir`) that are regular files or symlinks; whether a link
/// leads to a module inside the folder is for [`read_module`] to find out, and say.
fn list_modules(folder: &Dir, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in folder.entries()? {
        let entry = entry?;
        let path = dir.join(entry.file_name());
        let kind = entry.file_type()?;
        if is_module(dir, &path) && (kind.is_file() || kind.is_symlink()) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Reads the module called `name` in `folder`: `None` when it is gone (or is not a regular
/// file). `name` must be a plain file name; a symlink is followed only within the folder.
fn read_module(folder: &Dir, name: &OsStr) -> std::io::Result<Option<(Vec<u8>, String)>> {
    use std::io::{Error, ErrorKind};
    let gone = |e: &Error| e.kind() == ErrorKind::NotFound;
    // Names come from events and listings, so this never fails; were it to, `..` or a path
    // must not reach the folder's handle, which would refuse it less clearly.
    let mut parts = Path::new(name).components();
    if !matches!(
        (parts.next(), parts.next()),
        (Some(std::path::Component::Normal(_)), None)
    ) {
        let name = Path::new(name).display();
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{name:?} is not a file name in the module folder"),
        ));
    }
    let mut file = match folder.open(name) {
        Ok(file) => file,
        Err(e) if gone(&e) => return Ok(None),
        Err(e)
            if e.kind() == ErrorKind::PermissionDenied
                && folder.symlink_metadata(name).is_ok_and(|m| m.is_symlink()) =>
        {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                "it is a symlink that leads outside the module folder, and only files inside \
                 it are read; copy the module into the folder, or run `reconciled dev` on the \
                 folder the link points into",
            ));
        }
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    match file.read_to_end(&mut bytes) {
        Ok(_) => {
            let digest = digest_of(&bytes);
            Ok(Some((bytes, digest)))
        }
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A file with events not yet acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    /// The first event of the burst.
    first: Instant,
    /// When to read the file, unless another event comes first.
    deadline: Instant,
}

impl Pending {
    /// Accounts for an event at `at` that wants `quiet` after it.
    fn bump(this: Option<Pending>, at: Instant, quiet: Duration, max_wait: Duration) -> Pending {
        let first = this.map_or(at, |p| p.first.min(at));
        Pending {
            first,
            // The latest event decides, even when it shortens the wait: a close after a write
            // means the writer is done.
            deadline: (at + quiet).min(first + max_wait),
        }
    }
}

/// What an event of `kind` means for a path it names: how long to wait for quiet, or `None`
/// when it does not change content.
fn quiet_for(kind: &EventKind, settle: &Settle) -> Option<Duration> {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Some(settle.after_close),
        // Opens and reads, including our own.
        EventKind::Access(_) => None,
        EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Any)) => {
            Some(settle.after_close)
        }
        // A writer at work, which will close the file: its close ends the wait. (Not a create:
        // a link or a hard link is created with no close after it.)
        EventKind::Modify(ModifyKind::Data(_)) if settle.wait_for_close => Some(settle.max_wait),
        _ => Some(settle.after_other),
    }
}

/// The task behind a [`DirSource`].
struct Watch {
    dir: PathBuf,
    /// `dir`, opened once: every read goes through it.
    folder: Arc<Dir>,
    settle: Settle,
    events: mpsc::UnboundedReceiver<(std::time::Instant, notify::Result<Event>)>,
    changes: mpsc::Sender<Change>,
    pending: BTreeMap<PathBuf, Pending>,
    /// The digest last reported per file; a file is here iff its last report was an `Upsert`.
    emitted: BTreeMap<PathBuf, String>,
}

impl Watch {
    async fn run(mut self) {
        let mut check = tokio::time::interval(FOLDER_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Everything already queued first: an event that arrived just before a deadline
            // postpones it, rather than letting us read a file its writer has resumed writing.
            loop {
                match self.events.try_recv() {
                    Ok((at, event)) => {
                        if self.on_event(at, event).is_break() {
                            return;
                        }
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                }
            }
            if self.flush_due().await.is_break() {
                return;
            }
            let next = self.pending.values().map(|p| p.deadline).min();
            tokio::select! {
                event = self.events.recv() => match event {
                    Some((at, event)) => {
                        if self.on_event(at, event).is_break() {
                            return;
                        }
                    }
                    None => return,
                },
                () = sleep_until(next) => {}
                _ = check.tick() => {
                    if self.folder_deleted() {
                        tracing::error!(folder = %self.dir.display(), "the module folder was deleted; no further changes will be picked up (recreate it and restart `reconciled dev`)");
                        return;
                    }
                }
            }
        }
    }

    /// Whether the folder has been deleted: it has no links left. An error inspecting it
    /// (which its own handle should never give) is not taken for a deletion.
    fn folder_deleted(&self) -> bool {
        use cap_std::fs::MetadataExt;
        self.folder.dir_metadata().is_ok_and(|m| m.nlink() == 0)
    }

    fn on_event(
        &mut self,
        at: std::time::Instant,
        event: notify::Result<Event>,
    ) -> ControlFlow<()> {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::error!(folder = %self.dir.display(), error = %e, "watching the module folder failed; no further changes will be picked up (restart `reconciled dev`)");
                return ControlFlow::Break(());
            }
        };
        let at = Instant::from_std(at);
        if event.need_rescan() {
            return self.rescan(at);
        }
        for (i, path) in event.paths.iter().enumerate() {
            if path.as_path() == self.dir {
                if matches!(
                    event.kind,
                    EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
                ) {
                    tracing::error!(folder = %self.dir.display(), "the module folder was removed or moved; no further changes will be picked up (recreate it and restart `reconciled dev`)");
                    return ControlFlow::Break(());
                }
                continue;
            }
            // A settings file stands for its module: the module is read again, with it.
            let module = module_of_settings(&self.dir, path);
            let path = match &module {
                Some(module) => module,
                None if is_module(&self.dir, path) => path,
                None => continue,
            };
            let quiet = match event.kind {
                // A rename reported as one event: from, then to.
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if i == 0 => {
                    Some(self.settle.after_other)
                }
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                    Some(self.settle.after_close)
                }
                ref kind => quiet_for(kind, &self.settle),
            };
            if let Some(quiet) = quiet {
                self.mark(path.clone(), at, quiet);
            }
        }
        ControlFlow::Continue(())
    }

    fn mark(&mut self, path: PathBuf, at: Instant, quiet: Duration) {
        let previous = self.pending.get(&path).copied();
        self.pending.insert(
            path,
            Pending::bump(previous, at, quiet, self.settle.max_wait),
        );
    }

    /// Events were lost (the OS queue overflowed): every file may have changed.
    fn rescan(&mut self, at: Instant) -> ControlFlow<()> {
        tracing::warn!(folder = %self.dir.display(), "file events were lost; rereading every module in the folder");
        let listed = match list_modules(&self.folder, &self.dir) {
            Ok(listed) => listed,
            Err(e) => {
                tracing::error!(folder = %self.dir.display(), error = %e, "cannot list the module folder; no further changes will be picked up (restart `reconciled dev`)");
                return ControlFlow::Break(());
            }
        };
        // Reported files that are no longer listed get read too, which reports them removed.
        let known: Vec<PathBuf> = self.emitted.keys().cloned().collect();
        for path in listed.into_iter().chain(known) {
            self.mark(path, at, self.settle.after_close);
        }
        ControlFlow::Continue(())
    }

    /// Reads every file whose wait is over and reports what changed.
    async fn flush_due(&mut self) -> ControlFlow<()> {
        let now = Instant::now();
        let due: Vec<(PathBuf, Pending)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(path, p)| (path.clone(), *p))
            .collect();
        for (path, pending) in due {
            self.pending.remove(&path);
            let (folder, dir, name) = (
                self.folder.clone(),
                self.dir.clone(),
                path.file_name().map(OsStr::to_owned),
            );
            // Off the runtime: a module is megabytes, and hashing it takes milliseconds.
            let read = tokio::task::spawn_blocking(move || match name {
                Some(name) => std::io::Result::Ok(match read_module(&folder, &name)? {
                    Some((bytes, digest)) => {
                        Some((bytes, digest, read_settings(&folder, &dir, &name)?))
                    }
                    None => None,
                }),
                // `is_module` admitted it, so it has one.
                None => Ok(None),
            })
            .await;
            let change = match read {
                Ok(Ok(Some((bytes, digest, settings)))) => {
                    // What was reported: the module and its settings together.
                    let (settings, seen) = match settings {
                        Some((file, of_file)) => (Some(file), format!("{digest}+{of_file}")),
                        None => (None, digest.clone()),
                    };
                    if self.emitted.get(&path) == Some(&seen) {
                        continue;
                    }
                    let name = guest_name(&path);
                    if let Some(other) = self
                        .emitted
                        .keys()
                        .find(|p| **p != path && guest_name(p) == name)
                    {
                        tracing::warn!(guest = %name, file = %path.display(), other = %other.display(), "two module files map to the same guest; the last one written wins (rename one of them)");
                    }
                    self.emitted.insert(path.clone(), seen);
                    Change::Upsert {
                        name,
                        path,
                        bytes,
                        digest,
                        settings,
                        changed_at: pending.first.into_std(),
                    }
                }
                Ok(Ok(None)) => {
                    if self.emitted.remove(&path).is_none() {
                        continue;
                    }
                    Change::Remove {
                        name: guest_name(&path),
                        path,
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(file = %path.display(), error = %e, "cannot read module; the previous version keeps serving, and the file is read again on its next change");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "reading module failed; the previous version keeps serving, and the file is read again on its next change");
                    continue;
                }
            };
            if self.changes.send(change).await.is_err() {
                // Nobody is listening any more.
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
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
    use std::io::Write;

    use super::*;

    /// A folder under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "reconciled-dir-{}-{test}-{}",
                std::process::id(),
                fastrand::u64(..)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The changes that arrive: `expected` of them, waited for as long as a busy machine may
    /// take (10 s), then any more within [`WINDOW`], for the test to find too many.
    async fn changes(rx: &mut mpsc::Receiver<Change>, expected: usize) -> Vec<Change> {
        let mut got = Vec::new();
        let patient = Instant::now() + Duration::from_secs(10);
        while got.len() < expected {
            match tokio::time::timeout_at(patient, rx.recv()).await {
                Ok(Some(change)) => got.push(change),
                _ => return got,
            }
        }
        let end = Instant::now() + WINDOW;
        while let Ok(Some(change)) = tokio::time::timeout_at(end, rx.recv()).await {
            got.push(change);
        }
        got
    }

    fn upsert(change: &Change) -> (&str, &[u8]) {
        match change {
            Change::Upsert {
                name,
                bytes,
                digest,
                ..
            } => {
                assert_eq!(*digest, digest_of(bytes));
                (name.as_str(), bytes.as_slice())
            }
            Change::Remove { .. } => panic!("expected an Upsert, got {change:?}"),
        }
    }

    /// How long past the changes expected a test waits for one it did not expect: longer than
    /// any settle (100 ms after a create). A change that comes later still goes unseen.
    const WINDOW: Duration = Duration::from_millis(400);

    #[test]
    fn guest_names_come_from_file_names() {
        assert_eq!(
            guest_name(Path::new("/m/configmap_generator.wasm")),
            "configmap-generator"
        );
        assert_eq!(guest_name(Path::new("a.b.wasm")), "a.b");
        assert_eq!(guest_name(Path::new("plain")), "plain");
        let dir = Path::new("/m");
        assert!(is_module(dir, Path::new("/m/x.wasm")));
        assert!(!is_module(dir, Path::new("/m/x.wasm.tmp")));
        assert!(!is_module(dir, Path::new("/m/.x.wasm.swp")));
        assert!(!is_module(dir, Path::new("/m/.x.wasm")));
        assert!(!is_module(dir, Path::new("/m/sub/x.wasm")));
    }

    #[test]
    fn default_settle_coalesces_a_chunked_write_and_caps_the_wait() {
        // The debounce arithmetic of test (b) below, exactly and with the defaults: ten chunks
        // 5 ms apart, each written then closed.
        let s = Settle::default();
        let t0 = Instant::now();
        let mut p = None;
        for chunk in 0..10u64 {
            let written = t0 + Duration::from_millis(5 * chunk);
            let closed = written + Duration::from_micros(200);
            let q = Pending::bump(p, written, s.after_other, s.max_wait);
            assert_eq!(q.deadline, written + s.after_other);
            let q = Pending::bump(Some(q), closed, s.after_close, s.max_wait);
            assert_eq!(q.deadline, closed + s.after_close);
            if let Some(prev) = p {
                assert!(prev.deadline > written, "chunk {chunk} would be read early");
            }
            p = Some(q);
        }
        let p = p.unwrap();
        assert_eq!(p.first, t0);
        assert_eq!(
            p.deadline,
            t0 + Duration::from_millis(45) + Duration::from_micros(200) + s.after_close
        );

        // A writer that never goes quiet is read after max_wait.
        let mut p = None;
        for ms in (0..3000).step_by(50) {
            p = Some(Pending::bump(
                p,
                t0 + Duration::from_millis(ms),
                s.after_other,
                s.max_wait,
            ));
            assert!(p.unwrap().deadline <= t0 + s.max_wait);
        }
    }

    #[test]
    fn event_kinds_choose_the_wait() {
        use notify::event::{CreateKind, DataChange, RemoveKind};
        let s = Settle {
            wait_for_close: false,
            ..Settle::default()
        };
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        let to = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        let from = EventKind::Modify(ModifyKind::Name(RenameMode::From));
        let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert_eq!(quiet_for(&close, &s), Some(s.after_close));
        assert_eq!(quiet_for(&to, &s), Some(s.after_close));
        assert_eq!(quiet_for(&open, &s), None);
        for kind in [
            from,
            data,
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
        ] {
            assert_eq!(quiet_for(&kind, &s), Some(s.after_other), "{kind:?}");
        }
    }

    #[test]
    fn a_file_being_written_waits_for_its_close_where_closes_are_reported() {
        use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind};
        let s = Settle {
            wait_for_close: true,
            ..Settle::default()
        };
        let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert_eq!(quiet_for(&data, &s), Some(s.max_wait));
        // Nothing need close after these (a symlink is created, a file touched or removed):
        // the usual quiet.
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Remove(RemoveKind::File),
        ] {
            assert_eq!(quiet_for(&kind, &s), Some(s.after_other), "{kind:?}");
        }

        // A writer that pauses 500 ms mid-file (a flush on a busy disk) is read only once it
        // closes the file.
        let t0 = Instant::now();
        let first = Pending::bump(None, t0, s.max_wait, s.max_wait);
        let paused = t0 + Duration::from_millis(500);
        let resumed = Pending::bump(Some(first), paused, s.max_wait, s.max_wait);
        assert!(resumed.deadline > paused, "not read during the pause");
        let closed = paused + Duration::from_millis(1);
        let done = Pending::bump(Some(resumed), closed, s.after_close, s.max_wait);
        assert_eq!(
            done.deadline,
            closed + s.after_close,
            "the close ends the wait"
        );
    }

    #[tokio::test]
    async fn start_refuses_a_missing_folder_or_a_file() {
        let dir = TempDir::new("refuses");
        let missing = dir.path("nope");
        let err = DirSource::start(&missing, Settle::default()).unwrap_err();
        assert!(matches!(err, Error::Missing { .. }), "{err}");
        assert!(
            err.to_string().contains(&*missing.to_string_lossy()),
            "{err}"
        );
        let file = dir.path("x.wasm");
        std::fs::write(&file, b"x").unwrap();
        let err = DirSource::start(&file, Settle::default()).unwrap_err();
        assert!(matches!(err, Error::NotAFolder { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_module_present_at_start_is_reported_once() {
        let dir = TempDir::new("existing");
        std::fs::write(dir.path("b_guest.wasm"), b"bbb").unwrap();
        std::fs::write(dir.path("a.wasm"), b"aaa").unwrap();
        std::fs::write(dir.path("notes.txt"), b"not a module").unwrap();
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        let got = changes(&mut rx, 2).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(upsert(&got[0]), ("a", &b"aaa"[..]), "sorted by name");
        assert_eq!(upsert(&got[1]), ("b-guest", &b"bbb"[..]));
    }

    #[tokio::test]
    async fn a_folder_given_as_a_relative_path_is_watched() {
        let dir = TempDir::new("relative");
        // The same folder, relative to the working directory (`reconciled dev ./modules`).
        let cwd = std::env::current_dir().unwrap();
        let mut relative = PathBuf::new();
        for _ in cwd.components().skip(1) {
            relative.push("..");
        }
        relative.push(dir.0.strip_prefix("/").unwrap());
        let (_source, mut rx) = DirSource::start(&relative, Settle::default()).unwrap();
        std::fs::write(dir.path("r.wasm"), b"rrr").unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(upsert(&got[0]), ("r", &b"rrr"[..]));
    }

    #[tokio::test]
    async fn a_write_in_chunks_is_reported_once_with_the_final_bytes() {
        let dir = TempDir::new("chunks");
        // The default 10 ms after a close leaves 5 ms of slack over these 5 ms gaps, which a
        // busy two-core machine can eat; 40 ms keeps the test about the behaviour (gaps shorter
        // than the settle coalesce), and the test above checks the defaults' arithmetic.
        let settle = Settle {
            after_close: Duration::from_millis(40),
            ..Settle::default()
        };
        let (_source, mut rx) = DirSource::start(&dir.0, settle).unwrap();
        let path = dir.path("m.wasm");
        let mut expected = Vec::new();
        for chunk in 0..10u8 {
            let bytes = vec![chunk; 1000];
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(&bytes).unwrap();
            drop(f);
            expected.extend_from_slice(&bytes);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(upsert(&got[0]), ("m", &expected[..]));
    }

    #[tokio::test]
    async fn a_temp_file_renamed_into_place_is_reported_once() {
        let dir = TempDir::new("rename");
        // A rename settles after `after_close`; were it treated as a write, it would wait the
        // 5 s `after_other`.
        let settle = Settle {
            after_other: Duration::from_secs(5),
            max_wait: Duration::from_secs(6),
            ..Settle::default()
        };
        let (_source, mut rx) = DirSource::start(&dir.0, settle).unwrap();
        let tmp = dir.path("m.wasm.tmp");
        std::fs::write(&tmp, b"new version").unwrap();
        let renamed = Instant::now();
        std::fs::rename(&tmp, dir.path("m.wasm")).unwrap();
        let got = changes(&mut rx, 1).await;
        assert!(
            renamed.elapsed() < Duration::from_secs(4),
            "read after {:?}, as a write would be",
            renamed.elapsed()
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(upsert(&got[0]), ("m", &b"new version"[..]));
    }

    #[tokio::test]
    async fn rewriting_the_same_bytes_reports_nothing() {
        let dir = TempDir::new("same");
        let path = dir.path("m.wasm");
        std::fs::write(&path, b"v1").unwrap();
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        assert_eq!(changes(&mut rx, 1).await.len(), 1);
        std::fs::write(&path, b"v1").unwrap();
        let got = changes(&mut rx, 0).await;
        assert!(got.is_empty(), "{got:?}");
        // A real change after that is still seen.
        std::fs::write(&path, b"v2").unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(upsert(&got[0]), ("m", &b"v2"[..]));
    }

    #[tokio::test]
    async fn deleting_a_module_reports_a_remove() {
        let dir = TempDir::new("delete");
        let path = dir.path("m.wasm");
        std::fs::write(&path, b"v1").unwrap();
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        assert_eq!(changes(&mut rx, 1).await.len(), 1);
        std::fs::remove_file(&path).unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        match &got[0] {
            Change::Remove { name, path: p } => assert_eq!((name.as_str(), p), ("m", &path)),
            other => panic!("expected a Remove, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn files_that_are_not_modules_report_nothing() {
        let dir = TempDir::new("others");
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        std::fs::write(dir.path("notes.txt"), b"x").unwrap();
        std::fs::write(dir.path("m.wasm.tmp"), b"x").unwrap();
        std::fs::write(dir.path(".m.wasm.swp"), b"x").unwrap();
        std::fs::create_dir(dir.path("sub")).unwrap();
        std::fs::write(dir.path("sub/n.wasm"), b"x").unwrap();
        std::fs::remove_file(dir.path("m.wasm.tmp")).unwrap();
        let got = changes(&mut rx, 0).await;
        assert!(got.is_empty(), "{got:?}");
    }

    #[tokio::test]
    async fn two_files_changed_together_are_reported_once_each() {
        let dir = TempDir::new("two");
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        std::fs::write(dir.path("a.wasm"), b"aaa").unwrap();
        std::fs::write(dir.path("b.wasm"), b"bbb").unwrap();
        let got = changes(&mut rx, 2).await;
        assert_eq!(got.len(), 2, "{got:?}");
        let mut seen: Vec<_> = got.iter().map(upsert).collect();
        seen.sort();
        assert_eq!(seen, [("a", &b"aaa"[..]), ("b", &b"bbb"[..])]);
    }

    fn settings_of(change: &Change) -> Option<&str> {
        match change {
            Change::Upsert { settings, .. } => settings
                .as_ref()
                .map(|f| std::str::from_utf8(&f.bytes).unwrap()),
            Change::Remove { .. } => panic!("expected an Upsert, got {change:?}"),
        }
    }

    #[tokio::test]
    async fn a_settings_file_comes_with_its_module_and_an_edit_of_it_reports_the_module_again() {
        let dir = TempDir::new("settings");
        std::fs::write(dir.path("m.wasm"), b"mmm").unwrap();
        std::fs::write(dir.path("m.settings.json"), br#"{"v":1}"#).unwrap();
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(
            got.len(),
            1,
            "the settings file is no guest of its own: {got:?}"
        );
        assert_eq!(upsert(&got[0]), ("m", &b"mmm"[..]));
        assert_eq!(settings_of(&got[0]), Some(r#"{"v":1}"#));

        std::fs::write(dir.path("m.settings.json"), br#"{"v":2}"#).unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(settings_of(&got[0]), Some(r#"{"v":2}"#));

        std::fs::remove_file(dir.path("m.settings.json")).unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(settings_of(&got[0]), None, "back to no settings");

        // Settings of a module that is not there report nothing.
        std::fs::write(dir.path("absent.settings.json"), b"{}").unwrap();
        assert!(changes(&mut rx, 0).await.is_empty());
    }

    #[test]
    fn only_a_plain_name_ending_in_settings_json_is_a_modules_settings_file() {
        let dir = Path::new("/m");
        assert_eq!(
            module_of_settings(dir, Path::new("/m/a.settings.json")),
            Some(PathBuf::from("/m/a.wasm"))
        );
        assert_eq!(
            module_of_settings(dir, Path::new("/m/.a.settings.json")),
            None
        );
        assert_eq!(
            module_of_settings(dir, Path::new("/m/.settings.json")),
            None
        );
        assert_eq!(
            module_of_settings(dir, Path::new("/m/sub/a.settings.json")),
            None
        );
        assert_eq!(module_of_settings(dir, Path::new("/m/a.json")), None);
    }

    #[tokio::test]
    async fn deleting_the_folder_stops_the_source() {
        let dir = TempDir::new("gone");
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        std::fs::remove_dir(&dir.0).unwrap();
        let end = tokio::time::timeout(WINDOW, rx.recv()).await;
        assert!(matches!(end, Ok(None)), "{end:?}");
    }

    #[tokio::test]
    async fn dropping_the_source_closes_the_receiver() {
        let dir = TempDir::new("drop");
        let (source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        drop(source);
        let end = tokio::time::timeout(WINDOW, rx.recv()).await;
        assert!(matches!(end, Ok(None)), "{end:?}");
    }

    #[tokio::test]
    async fn a_symlink_leading_outside_the_folder_is_not_read() {
        let dir = TempDir::new("escape");
        let outside = TempDir::new("escape-outside");
        std::fs::write(outside.path("secret.wasm"), b"not yours").unwrap();
        std::os::unix::fs::symlink(outside.path("secret.wasm"), dir.path("secret.wasm")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path("passwd.wasm")).unwrap();
        std::os::unix::fs::symlink("../x/../../etc/passwd", dir.path("dots.wasm")).unwrap();
        let (_source, mut rx) = DirSource::start(&dir.0, Settle::default()).unwrap();
        // One made after the start is seen as an event, and not read either.
        std::os::unix::fs::symlink(outside.path("secret.wasm"), dir.path("late.wasm")).unwrap();
        // A link to a file inside the folder still counts as that file.
        std::fs::write(dir.path(".real.bin"), b"inside").unwrap();
        std::os::unix::fs::symlink(".real.bin", dir.path("alias.wasm")).unwrap();
        let got = changes(&mut rx, 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(upsert(&got[0]), ("alias", &b"inside"[..]));
    }

    #[test]
    fn reading_a_link_outside_the_folder_says_why_it_is_refused() {
        let dir = TempDir::new("escape-read");
        std::os::unix::fs::symlink("/etc/passwd", dir.path("passwd.wasm")).unwrap();
        let folder = Dir::open_ambient_dir(&dir.0, ambient_authority()).unwrap();
        let err = read_module(&folder, OsStr::new("passwd.wasm")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(
            err.to_string().contains("leads outside the module folder"),
            "{err}"
        );
    }

    #[test]
    fn names_that_are_not_plain_file_names_are_refused() {
        let base = TempDir::new("names");
        std::fs::create_dir(base.path("modules")).unwrap();
        std::fs::write(base.path("up.wasm"), b"above the folder").unwrap();
        let folder = Dir::open_ambient_dir(base.path("modules"), ambient_authority()).unwrap();
        for name in ["../up.wasm", "..", ".", "sub/x.wasm", "/etc/passwd", ""] {
            let err = read_module(&folder, OsStr::new(name)).unwrap_err();
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::InvalidInput,
                "{name:?}: {err}"
            );
        }
    }
}
