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
//! - The directory is pruned to [`ArtifactCache::with_max_bytes`] after each store, least
//!   recently loaded first: 4 GiB by default, or `$RECONCILED_CACHE_MAX_MIB`. A host whose
//!   guests' artifacts exceed it recompiles some at every start, and worse, a start that loads
//!   them in order evicts each next one as it stores the last, so that all recompile: 1000
//!   copies of a 420 KB guest (about 1.2 MB of artifact each) do not fit in 1 GiB.
//! - Each engine configuration has a directory of its own, pruned on its own: the directories
//!   of an older wasmtime or configuration are left as they are.
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
}

/// A directory of `<engine hash>/<module sha256>.cwasm` files.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    /// The engine's subdirectory, for messages: files are reached through `dir` only.
    path: PathBuf,
    /// The engine's subdirectory, opened once: nothing below it is reached by path.
    dir: Arc<Dir>,
    max_bytes: u64,
}

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
            dir: Arc::new(engine_dir),
            max_bytes: Self::default_max_bytes(),
        })
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

    /// Stores `component`'s native code under `digest`, then prunes the directory. Blocking.
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
        let write = || -> wasmtime::Result<()> {
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
            let written = file.write_all(&bytes);
            drop(file);
            // A rename replaces a symlink at `name` rather than writing through it.
            written
                .and_then(|()| self.dir.rename(&tmp, &self.dir, &name))
                .inspect_err(|_| {
                    let _ = self.dir.remove_file(&tmp);
                })?;
            Ok(())
        };
        if let Err(e) = write() {
            let artifact = self.path.join(&name);
            tracing::warn!(artifact = %artifact.display(), "could not store the precompiled artifact (the next load compiles again): {e}");
        }
        self.prune();
    }

    /// Deletes the least recently loaded artifacts until the directory fits `max_bytes`.
    fn prune(&self) {
        let Ok(entries) = self.dir.entries() else {
            return;
        };
        // Regular files only: a symlink's size says nothing about what it costs here.
        let mut files: Vec<(std::time::SystemTime, u64, std::ffi::OsString)> = entries
            .filter_map(Result::ok)
            .filter(|e| {
                Path::new(&e.file_name())
                    .extension()
                    .is_some_and(|x| x == "cwasm")
            })
            .filter_map(|e| {
                let m = e.metadata().ok().filter(|m| m.is_file())?;
                Some((m.modified().ok()?.into_std(), m.len(), e.file_name()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, name) in files {
            if total <= self.max_bytes {
                break;
            }
            if self.dir.remove_file(&name).is_ok() {
                total -= len;
            }
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
