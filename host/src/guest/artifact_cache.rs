//! Precompiled-artifact cache: a module's native code, keyed by the module's sha256 and by the
//! engine's configuration, so that a restart, a reload back to an earlier version or a second
//! guest running the same module skips Cranelift (seconds for a large component) and loads in
//! milliseconds.
//!
//! Where it may surprise:
//! - Loading an artifact runs native code that this process did not just compile, so the cache
//!   is trusted exactly as much as the directory is. The directory is created private (0700)
//!   and a directory owned by another user, or writable by group or others, is refused: the
//!   host then compiles every time and says why once.
//! - Every file is opened beneath the directory's handle, opened once: a symlink planted in
//!   place of an artifact (or of the engine's subdirectory) is never followed, an artifact
//!   that is not a regular file is treated as corrupt, and a key that is not a plain digest is
//!   refused rather than joined into a path.
//! - A corrupt, truncated or incompatible artifact is not an error: it is deleted and the
//!   module is compiled again. Writes go to a temporary file that is renamed into place, so a
//!   crash mid-write never leaves a half artifact under the real name.
//! - Only validated modules are kept: the host stores an artifact once the module has passed
//!   `describe` and the grant check, so a stream of rejected uploads does not fill the disk.
//!   Until then a freshly compiled module is *staged* ([`ArtifactCache::stage`]): written to a
//!   hidden temporary file and mapped from it, so that its code is file-backed (shared with the
//!   page cache, reclaimable) from the first call rather than anonymous memory until the next
//!   restart. A staged file is renamed into place when the module is kept, and deleted when it
//!   is dropped unkept; one a crashed process left behind is deleted an hour later.
//! - The whole cache folder is pruned to [`ArtifactCache::with_max_bytes`] after each store,
//!   least recently loaded first, across every engine configuration's directory, so that an
//!   older wasmtime's or configuration's artifacts age out with the rest, and its directory is
//!   removed once empty. An artifact of a module this process has loaded (see
//!   [`ArtifactCache::pinning`]) is never evicted, even above the budget. 4 GiB by default, or
//!   `$RECONCILED_CACHE_MAX_MIB`; 1000 copies of a 420 KB guest take about 1.2 GB.
//! - Artifacts are written a page at a time (`PAGE_WRITE`), so that the page cache holds them
//!   in small folios and a call maps only the code around what it runs, not the whole file.
//!   An artifact read back from disk after its pages were evicted may come in larger folios.
//! - An artifact is mapped from the file the cache opened (through `/proc/self/fd/N`, since
//!   wasmtime maps only by path), never through whatever its name points to; without `/proc` it
//!   is read into memory, and a load briefly holds it twice.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt, OpenOptions, PermissionsExt};
// For `std::fs::Permissions::from_mode`, on the one path opened with ambient authority.
use std::os::unix::fs::PermissionsExt as _;
use wasmtime::Engine;
use wasmtime::component::Component;

/// Why the cache cannot be used. Never fatal: the host compiles without it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory could not be created or inspected.
    #[error(
        "precompile cache {path}: {source}; modules will be compiled on every load (set RECONCILED_CACHE_DIR to a writable directory)"
    )]
    Io {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The directory is not private to this user, so its contents cannot be trusted as code.
    #[error(
        "precompile cache {path} is {problem}; refusing to load native code from it, so modules will be compiled on every load (fix with: chmod 700 {path}, or set RECONCILED_CACHE_DIR)"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// Where an artifact came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Loaded from the cache: no compilation.
    Cache,
    /// Compiled now (and stored, if the cache is usable).
    Compiled,
    /// Already in memory: another guest, shadow or revision in this process runs the same
    /// digest, and this one shares its code.
    Memory,
}

/// A directory of `<engine hash>/<module sha256>.cwasm` files.
#[derive(Clone)]
pub struct ArtifactCache {
    /// The engine's subdirectory, for messages: files are reached through `dir` only.
    path: PathBuf,
    /// The folder of every engine's subdirectory, opened once, for pruning across them.
    root: Arc<Dir>,
    /// The engine's subdirectory's name in `root`.
    name: String,
    /// The engine's subdirectory, opened once: nothing below it is reached by path.
    dir: Arc<Dir>,
    max_bytes: u64,
    /// Digests whose artifacts pruning must keep; see [`ArtifactCache::pinning`].
    pinned: Option<Arc<InUse>>,
}

/// Whether a digest's module is in use, so that its artifact is kept.
type InUse = dyn Fn(&str) -> bool + Send + Sync;

impl std::fmt::Debug for ArtifactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactCache")
            .field("path", &self.path)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// Bytes per write of an artifact: one page.
///
/// The page cache keeps a file in folios as large as the writes that filled it (ext4 does on
/// Linux 6.18), and a fault on a mapped file maps the whole folio around it: written at once,
/// an artifact was resident almost whole after a few calls. Written a page at a time, a fault
/// maps only the kernel's fault-around window (64 KiB by default): 100 distinct guests' code
/// took 0.7 MiB each instead of 1.0 (`bench/RESULTS.md`). The price is a system call per page
/// when storing, a few milliseconds for a large guest whose compile took seconds.
const PAGE_WRITE: usize = 4096;

/// How old a hidden temporary file must be before pruning takes it for a crashed writer's.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(3600);

/// See [`ArtifactCache::default_max_bytes`].
const DEFAULT_MAX_BYTES: u64 = 4 << 30;

impl ArtifactCache {
    /// The default location: `$RECONCILED_CACHE_DIR/compiled`, else
    /// `$XDG_CACHE_HOME/reconciled/compiled`, else `~/.cache/reconciled/compiled`.
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("RECONCILED_CACHE_DIR") {
            return PathBuf::from(d).join("compiled");
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
            return PathBuf::from(d).join("reconciled/compiled");
        }
        let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
        home.join(".cache/reconciled/compiled")
    }

    /// Opens (creating, private) the cache under `dir` for `engine`'s configuration.
    ///
    /// The engine's compatibility hash names a subdirectory, so artifacts of another wasmtime
    /// version or engine configuration are never even opened. `dir` itself is the operator's
    /// choice and is followed wherever it leads (symlinks included); the subdirectory is not.
    pub fn open(dir: &Path, engine: &Engine) -> Result<Self, Error> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let name = format!("{:016x}", h.finish());
        let path = dir.join(&name);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        // The one use of ambient authority: the operator's directory, opened once.
        Dir::create_ambient_dir_all(dir, ambient_authority()).map_err(io(dir))?;
        let root = Dir::open_ambient_dir(dir, ambient_authority()).map_err(io(dir))?;
        // The root holds the per-engine directories; it must not let others swap them.
        check_private(&root, dir, || {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        })?;
        match root.create_dir(&name) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(&path)(e)),
            _ => {}
        }
        let engine_dir = root.open_dir_nofollow(&name).map_err(io(&path))?;
        check_private(&engine_dir, &path, || {
            root.set_permissions(&name, cap_std::fs::Permissions::from_mode(0o700))
        })?;
        Ok(Self {
            path,
            root: Arc::new(root),
            name,
            dir: Arc::new(engine_dir),
            max_bytes: Self::default_max_bytes(),
            pinned: None,
        })
    }

    /// Keeps the artifact of every digest for which `in_use` says yes when pruning, however
    /// far over the budget: the runtime pins the modules it holds in memory, whose code may be
    /// mapped from those very files, and which a restart would otherwise compile again.
    pub fn pinning(mut self, in_use: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.pinned = Some(Arc::new(in_use));
        self
    }

    /// The size the directory is pruned to unless [`ArtifactCache::with_max_bytes`] says
    /// otherwise: `$RECONCILED_CACHE_MAX_MIB` MiB if set to a number, else 4 GiB.
    /// A value that is not a number is logged and ignored.
    pub fn default_max_bytes() -> u64 {
        let Ok(value) = std::env::var("RECONCILED_CACHE_MAX_MIB") else {
            return DEFAULT_MAX_BYTES;
        };
        match value.trim().parse::<u64>() {
            Ok(mib) => mib.saturating_mul(1 << 20),
            Err(_) => {
                tracing::warn!(
                    value = %value,
                    "RECONCILED_CACHE_MAX_MIB is not a whole number of MiB; the precompile cache keeps its default of 4096 MiB"
                );
                DEFAULT_MAX_BYTES
            }
        }
    }

    /// Sets the size the directory is pruned to.
    pub fn with_max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }

    /// The directory artifacts of this engine live in.
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// The component for `bytes` (whose sha256 is `digest`): loaded from the cache if present
    /// and valid, else compiled (and not stored: see [`ArtifactCache::store`]). Blocking: call
    /// it off the async runtime.
    ///
    /// A `digest` that is not a plain digest (letters and digits) skips the cache.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, Origin)> {
        if let Some(name) = artifact_name(digest) {
            if let Some(component) = self.load(engine, &name) {
                return Ok((component, Origin::Cache));
            }
        } else {
            tracing::warn!(
                digest,
                "not a digest; compiling without the precompile cache"
            );
        }
        let component = Component::new(engine, bytes)?;
        Ok((component, Origin::Compiled))
    }

    /// The cached component called `name`, if there is a usable one; an unusable one is
    /// deleted (a symlink itself, never what it points to).
    fn load(&self, engine: &Engine, name: &str) -> Option<Component> {
        let loaded = (|| -> wasmtime::Result<Option<Component>> {
            let Some(file) = self.open_artifact(name)? else {
                return Ok(None);
            };
            // SAFETY: `deserialize` trusts the bytes to be an artifact this wasmtime produced.
            // They come from a regular file (not a symlink) in a directory `open` verified to
            // be owned by this user and closed to everyone else, written by `store` below under
            // a name derived from the module's sha256; wasmtime still checks the header,
            // version and engine configuration, and a failure falls through to compiling.
            let component = unsafe { deserialize(engine, &file) }?;
            // Recently used, for pruning. The file is ours, so a read-only handle may set it.
            let _ = file.set_modified(std::time::SystemTime::now());
            Ok(Some(component))
        })();
        match loaded {
            Ok(component) => component,
            Err(e) => {
                let artifact = self.path.join(name);
                tracing::warn!(artifact = %artifact.display(), "discarding an unusable precompiled artifact: {e:#}");
                let _ = self.dir.remove_file_or_symlink(name);
                None
            }
        }
    }

    /// Opens the artifact called `name` for reading: `None` when there is none, an error when
    /// it is a symlink or not a regular file.
    fn open_artifact(&self, name: &str) -> std::io::Result<Option<std::fs::File>> {
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No);
        let file = match self.dir.open_with(name, &options) {
            Ok(file) => file.into_std(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        Ok(Some(file))
    }

    /// Stores `component`'s native code under `digest`, then prunes the cache. Blocking.
    /// Failures are logged, never fatal: the next load compiles again.
    pub fn store(&self, component: &Component, digest: &str) {
        let Some(name) = artifact_name(digest) else {
            tracing::warn!(
                digest,
                "not a digest; the precompiled artifact is not stored"
            );
            return;
        };
        if self.dir.symlink_metadata(&name).is_ok_and(|m| m.is_file()) {
            return;
        }
        match self.write_temporary(&name, component) {
            Ok(tmp) => self.commit(&tmp, &name),
            Err(e) => {
                let artifact = self.path.join(&name);
                tracing::warn!(artifact = %artifact.display(), "could not store the precompiled artifact (the next load compiles again): {e}");
                self.prune();
            }
        }
    }

    /// A freshly compiled `component` (whose sha256 is `digest`) mapped again from a
    /// temporary file in the cache, with the file's [`Staged`] handle: the same code, but
    /// file-backed, so that it is shared with the page cache and reclaimable rather than held
    /// in anonymous memory for the life of the process. Blocking.
    ///
    /// `None` (logged) when the file cannot be written or mapped, or `digest` is not a plain
    /// digest: the caller keeps the component it has.
    pub fn stage(
        &self,
        engine: &Engine,
        component: &Component,
        digest: &str,
    ) -> Option<(Component, Staged)> {
        let name = artifact_name(digest)?;
        let staged = (|| -> wasmtime::Result<(Component, String)> {
            let tmp = self.write_temporary(&name, component)?;
            let mapped = (|| -> wasmtime::Result<Component> {
                let file = self
                    .open_artifact(&tmp)?
                    .ok_or_else(|| std::io::Error::other("the file vanished once written"))?;
                // SAFETY: `tmp` was written just now by `write_temporary`, from a component
                // this engine compiled, in the private directory (see `load`).
                unsafe { deserialize(engine, &file) }
            })();
            match mapped {
                Ok(component) => Ok((component, tmp)),
                Err(e) => {
                    let _ = self.dir.remove_file(&tmp);
                    Err(e)
                }
            }
        })();
        match staged {
            Ok((component, tmp)) => Some((
                component,
                Staged {
                    cache: self.clone(),
                    tmp: Some(tmp),
                    name,
                },
            )),
            Err(e) => {
                tracing::warn!(dir = %self.path.display(), digest, "could not map the freshly compiled module from the precompile cache; its code stays in anonymous memory: {e:#}");
                None
            }
        }
    }

    /// Writes `component`'s native code to a new hidden file named after `name`, and returns
    /// the file's name.
    fn write_temporary(&self, name: &str, component: &Component) -> wasmtime::Result<String> {
        let bytes = component.serialize()?;
        // Unique per writer: two loads of one module may store at once.
        let tmp = format!(
            ".{name}.{}.{:08x}.tmp",
            std::process::id(),
            fastrand::u32(..)
        );
        // create_new: never through whatever might already be there, symlink included.
        let mut file = self
            .dir
            .open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
        let written = bytes
            .chunks(PAGE_WRITE)
            .try_for_each(|page| file.write_all(page));
        drop(file);
        written.inspect_err(|_| {
            let _ = self.dir.remove_file(&tmp);
        })?;
        Ok(tmp)
    }

    /// Moves the written file `tmp` into place as `name` (or deletes it if an artifact is
    /// already there), then prunes.
    fn commit(&self, tmp: &str, name: &str) {
        let there = self.dir.symlink_metadata(name).is_ok_and(|m| m.is_file());
        // A rename replaces a symlink at `name` rather than writing through it.
        let moved = if there {
            self.dir.remove_file(tmp)
        } else {
            self.dir.rename(tmp, &self.dir, name)
        };
        if let Err(e) = moved {
            let _ = self.dir.remove_file(tmp);
            let artifact = self.path.join(name);
            tracing::warn!(artifact = %artifact.display(), "could not store the precompiled artifact (the next load compiles again): {e}");
        }
        self.prune();
    }

    /// Deletes the least recently loaded artifacts, across every engine's directory, until
    /// the cache fits `max_bytes`, never one that is pinned; then removes other engines'
    /// directories left empty, and temporary files a crashed writer left behind.
    fn prune(&self) {
        let mut dirs: Vec<(Option<String>, Arc<Dir>)> = vec![(None, self.dir.clone())];
        if let Ok(entries) = self.root.entries() {
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                // `file_type` does not follow a symlink: a link to a folder is not pruned.
                if name == self.name || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if let Ok(dir) = self.root.open_dir_nofollow(&name) {
                    dirs.push((Some(name), Arc::new(dir)));
                }
            }
        }
        let now = std::time::SystemTime::now();
        let mut total = 0u64;
        let mut candidates = Vec::new();
        for (index, (_, dir)) in dirs.iter().enumerate() {
            for file in artifacts_in(dir) {
                let stale = now
                    .duration_since(file.modified)
                    .is_ok_and(|age| age > STALE_TEMPORARY);
                if file.temporary {
                    if stale {
                        let _ = dir.remove_file(&file.name);
                    }
                    continue;
                }
                total += file.len;
                let pinned = index == 0
                    && self.pinned.as_ref().is_some_and(|in_use| {
                        file.name
                            .to_str()
                            .and_then(|n| n.strip_suffix(".cwasm"))
                            .is_some_and(|digest| in_use(digest))
                    });
                if !pinned {
                    candidates.push((file.modified, file.len, index, file.name));
                }
            }
        }
        candidates.sort();
        for (_, len, index, name) in candidates {
            if total <= self.max_bytes {
                break;
            }
            if dirs[index].1.remove_file(&name).is_ok() {
                total -= len;
            }
        }
        for (name, _) in &dirs {
            if let Some(name) = name {
                // Fails, as it should, unless the directory is empty.
                let _ = self.root.remove_dir(name);
            }
        }
    }
}

/// A file in an engine's directory that pruning may delete.
struct CachedFile {
    name: std::ffi::OsString,
    modified: std::time::SystemTime,
    len: u64,
    /// A hidden `.tmp` file (a staged or half-written artifact), not an artifact.
    temporary: bool,
}

/// The regular `.cwasm` and hidden `.tmp` files in `dir`: a symlink's size says nothing about
/// what it costs here, and what it points to is not the cache's to delete.
fn artifacts_in(dir: &Dir) -> Vec<CachedFile> {
    let Ok(entries) = dir.entries() else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let path = Path::new(&name);
            let temporary = name.to_string_lossy().starts_with('.')
                && path.extension().is_some_and(|x| x == "tmp");
            let artifact = path.extension().is_some_and(|x| x == "cwasm");
            if !temporary && !artifact {
                return None;
            }
            let m = e.metadata().ok().filter(|m| m.is_file())?;
            Some(CachedFile {
                modified: m.modified().ok()?.into_std(),
                len: m.len(),
                name,
                temporary,
            })
        })
        .collect()
}

/// A freshly compiled module's artifact in a temporary file its code is mapped from (see
/// [`ArtifactCache::stage`]).
///
/// Where it may surprise: dropping it unkept deletes the file's name only; the code stays
/// mapped, and the disk space taken, until the module's last user is gone.
pub struct Staged {
    cache: ArtifactCache,
    /// The file's name while it is not kept.
    tmp: Option<String>,
    /// The artifact's name once kept.
    name: String,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("tmp", &self.tmp)
            .finish_non_exhaustive()
    }
}

impl Staged {
    /// Keeps the artifact under its module's digest (unless one is already there) and prunes
    /// the cache. Blocking.
    pub fn keep(mut self) {
        if let Some(tmp) = self.tmp.take() {
            self.cache.commit(&tmp, &self.name);
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = self.cache.dir.remove_file(&tmp);
        }
    }
}

/// The file name of `digest`'s artifact, if `digest` is a plain digest: letters and digits
/// only, so that it can name nothing but a file directly in the directory.
fn artifact_name(digest: &str) -> Option<String> {
    let plain = !digest.is_empty()
        && digest.len() <= 128
        && digest.bytes().all(|b| b.is_ascii_alphanumeric());
    plain.then(|| format!("{digest}.cwasm"))
}

/// Refuses `dir` (at `path`) if another user owns it; tightens it with `tighten` if it is ours
/// and group or others may write to it.
fn check_private(
    dir: &Dir,
    path: &Path,
    tighten: impl FnOnce() -> std::io::Result<()>,
) -> Result<(), Error> {
    let meta = dir.dir_metadata().map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(Error::NotPrivate {
            path: path.into(),
            problem: format!("owned by uid {}, not this user (uid {me})", meta.uid()),
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        // Ours, so tighten it rather than refuse: a fresh directory gets the umask's mode.
        tighten().map_err(|_| Error::NotPrivate {
            path: path.into(),
            problem: format!("writable by group or others (mode {mode:o})"),
        })?;
    }
    Ok(())
}

/// The component in the open artifact `file`.
///
/// Where `/proc` is mounted, wasmtime maps it through `/proc/self/fd/N`: the file already
/// opened (without following a symlink), not whatever its name points to now, and mapped rather
/// than read, so a 12 MB guest's artifact loads in well under a millisecond instead of being
/// copied. Elsewhere it is read into memory.
///
/// # Safety
///
/// As [`Component::deserialize`]: the bytes must be an artifact this wasmtime produced.
unsafe fn deserialize(engine: &Engine, file: &std::fs::File) -> wasmtime::Result<Component> {
    #[cfg(target_os = "linux")]
    if std::path::Path::new("/proc/self/fd").is_dir() {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        // SAFETY: passed on from the caller.
        return unsafe { Component::deserialize_file(engine, path) };
    }
    // No /proc (not Linux, or not mounted): read it, rather than take a good artifact for a
    // corrupt one.
    use std::io::Read;
    let mut artifact = Vec::new();
    (&*file).read_to_end(&mut artifact)?;
    // SAFETY: passed on from the caller.
    unsafe { Component::deserialize(engine, &artifact) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "reconciled-artifacts-{tag}-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Where `digest`'s artifact is, for looking at it from outside the cache.
    fn artifact(cache: &ArtifactCache, digest: &str) -> PathBuf {
        cache.dir().join(format!("{digest}.cwasm"))
    }

    // The smallest valid component: the header only.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    #[test]
    fn second_load_comes_from_the_cache_and_a_corrupt_artifact_is_recompiled() {
        let engine = Engine::default();
        let root = temp("reuse");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let (component, first) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(first, Origin::Compiled);
        let (_, unstored) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(unstored, Origin::Compiled, "nothing is stored until asked");
        cache.store(&component, "abc");
        let (_, second) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(second, Origin::Cache);

        std::fs::write(artifact(&cache, "abc"), b"garbage").unwrap();
        let (component, third) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(third, Origin::Compiled);
        assert!(
            !artifact(&cache, "abc").exists(),
            "the corrupt artifact is gone"
        );
        cache.store(&component, "abc");
        let (_, fourth) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(fourth, Origin::Cache);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn pruning_keeps_the_most_recently_used_within_the_budget() {
        let engine = Engine::default();
        let root = temp("prune");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let (component, _) = cache
            .load_or_compile(&engine, "x", EMPTY_COMPONENT)
            .unwrap();
        let one = {
            cache.store(&component, "a");
            std::fs::metadata(artifact(&cache, "a")).unwrap().len()
        };
        let cache = cache.with_max_bytes(2 * one);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        let age = |d: &str, t| {
            let f = std::fs::File::options()
                .append(true)
                .open(artifact(&cache, d))
                .unwrap();
            f.set_modified(t).unwrap();
        };
        age("a", old);
        cache.store(&component, "b");
        age("b", old + std::time::Duration::from_secs(1));
        // Loading "a" makes it the most recent; storing "c" must then evict "b".
        let (_, origin) = cache
            .load_or_compile(&engine, "a", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(origin, Origin::Cache);
        cache.store(&component, "c");
        assert!(artifact(&cache, "a").exists());
        assert!(!artifact(&cache, "b").exists());
        assert!(artifact(&cache, "c").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn pruning_keeps_pinned_artifacts_and_ages_out_other_configurations() {
        let engine = Engine::default();
        let root = temp("prune-pinned");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let (component, _) = cache
            .load_or_compile(&engine, "x", EMPTY_COMPONENT)
            .unwrap();
        // Another configuration's directory, with an artifact and a crashed writer's file.
        let other = root.join("0123456789abcdef");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("old.cwasm"), b"an older engine's code").unwrap();
        let ours_stale = cache.dir().join(".a.cwasm.1.00000000.tmp");
        let ours_fresh = cache.dir().join(".a.cwasm.2.00000000.tmp");
        std::fs::write(&ours_stale, b"half").unwrap();
        std::fs::write(&ours_fresh, b"being written").unwrap();
        let long_ago = std::time::SystemTime::now() - 2 * STALE_TEMPORARY;
        std::fs::File::options()
            .append(true)
            .open(&ours_stale)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();

        let cache = cache.with_max_bytes(0).pinning(|d| d == "held");
        cache.store(&component, "held");
        cache.store(&component, "loose");
        assert!(
            artifact(&cache, "held").exists(),
            "a pinned artifact was pruned"
        );
        assert!(!artifact(&cache, "loose").exists());
        assert!(
            !other.exists(),
            "the other configuration's directory is left"
        );
        assert!(!ours_stale.exists(), "a crashed writer's file is left");
        assert!(ours_fresh.exists(), "a file being written was deleted");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_staged_artifact_is_kept_under_its_name_or_deleted_unkept() {
        let engine = Engine::default();
        let root = temp("staged");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let (component, _) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        let files = || std::fs::read_dir(cache.dir()).unwrap().count();

        let (_, staged) = cache.stage(&engine, &component, "abc").unwrap();
        assert_eq!(files(), 1, "the staged file");
        assert!(
            !artifact(&cache, "abc").exists(),
            "kept before it was asked"
        );
        drop(staged);
        assert_eq!(files(), 0, "an unkept staged file stays behind");

        let (mapped, staged) = cache.stage(&engine, &component, "abc").unwrap();
        staged.keep();
        assert_eq!(files(), 1);
        let (_, origin) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(origin, Origin::Cache);
        // The component mapped from the staged file still serializes after the rename.
        assert!(!mapped.serialize().unwrap().is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_open_directory_is_tightened_and_the_engine_gets_its_own_subdirectory() {
        use std::os::unix::fs::PermissionsExt;
        let engine = Engine::default();
        let root = temp("private");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        assert_eq!(cache.dir().parent().unwrap(), root.as_path());
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o022, 0, "mode {mode:o}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_planted_in_place_of_an_artifact_is_not_followed() {
        let engine = Engine::default();
        // A valid artifact outside the cache: were the link followed, it would load from it.
        let elsewhere = temp("elsewhere");
        let other = ArtifactCache::open(&elsewhere, &engine).unwrap();
        let (component, _) = other
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        other.store(&component, "abc");
        let target = artifact(&other, "abc");
        let original = std::fs::read(&target).unwrap();

        let root = temp("planted");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let link = artifact(&cache, "abc");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (component, origin) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(origin, Origin::Compiled, "loaded through the symlink");
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "the link itself is deleted"
        );
        cache.store(&component, "abc");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        assert_eq!(
            std::fs::read(&target).unwrap(),
            original,
            "the target is untouched"
        );
        let (_, origin) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(origin, Origin::Cache);
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[test]
    fn a_symlink_in_place_of_the_engine_directory_is_refused() {
        let engine = Engine::default();
        let root = temp("engine-link");
        let name = ArtifactCache::open(&root, &engine)
            .unwrap()
            .dir()
            .file_name()
            .unwrap()
            .to_owned();
        let elsewhere = temp("engine-elsewhere");
        std::fs::remove_dir(root.join(&name)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join(&name)).unwrap();
        let err = ArtifactCache::open(&root, &engine).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[test]
    fn a_key_that_is_not_a_plain_digest_names_no_file() {
        for key in [
            "",
            "..",
            "../escape",
            "a/b",
            "/etc/passwd",
            "x.cwasm",
            "sha256:ab",
        ] {
            assert_eq!(artifact_name(key), None, "{key:?}");
        }
        assert_eq!(
            artifact_name(&"0a".repeat(32)),
            Some(format!("{}.cwasm", "0a".repeat(32)))
        );

        let engine = Engine::default();
        let root = temp("keys");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let (component, origin) = cache
            .load_or_compile(&engine, "../escape", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(origin, Origin::Compiled);
        cache.store(&component, "../escape");
        assert!(!root.join("escape.cwasm").exists(), "written outside");
        assert_eq!(
            std::fs::read_dir(cache.dir()).unwrap().count(),
            0,
            "nothing stored under a key that is not a digest"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn pruning_counts_and_deletes_regular_files_only() {
        let engine = Engine::default();
        let root = temp("prune-links");
        let cache = ArtifactCache::open(&root, &engine).unwrap();
        let (component, _) = cache
            .load_or_compile(&engine, "x", EMPTY_COMPONENT)
            .unwrap();
        cache.store(&component, "a");
        let outside = temp("prune-outside");
        let victim = outside.join("victim.cwasm");
        std::fs::write(&victim, b"not the cache's to delete").unwrap();
        std::os::unix::fs::symlink(&victim, artifact(&cache, "link")).unwrap();
        let cache = cache.with_max_bytes(0);
        cache.store(&component, "b");
        assert!(victim.exists(), "the symlink's target was pruned");
        assert!(!artifact(&cache, "a").exists() && !artifact(&cache, "b").exists());
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
