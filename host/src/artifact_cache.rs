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
//! - A corrupt, truncated or incompatible artifact is not an error: it is deleted and the
//!   module is compiled again. Writes go to a temporary file that is renamed into place, so a
//!   crash mid-write never leaves a half artifact under the real name.
//! - Only validated modules are kept: the host stores an artifact once the module has passed
//!   `describe` and the grant check, so a stream of rejected uploads does not fill the disk.
//! - The directory is pruned to [`ArtifactCache::with_max_bytes`] (1 GiB by default) after each
//!   store, least recently loaded first.

use std::path::{Path, PathBuf};

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
    dir: PathBuf,
    max_bytes: u64,
}

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
    /// version or engine configuration are never even opened.
    pub fn open(dir: &Path, engine: &Engine) -> Result<Self, Error> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let dir = dir.join(format!("{:016x}", h.finish()));
        let io = |source| Error::Io {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        check_private(&dir)?;
        // The parent holds the per-engine directories; it must not let others swap them.
        if let Some(parent) = dir.parent() {
            check_private(parent)?;
        }
        Ok(Self {
            dir,
            max_bytes: 1 << 30,
        })
    }

    /// Sets the size the directory is pruned to.
    pub fn with_max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }

    /// The directory artifacts of this engine live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.cwasm"))
    }

    /// The component for `bytes` (whose sha256 is `digest`): loaded from the cache if present
    /// and valid, else compiled (and not stored: see [`ArtifactCache::store`]). Blocking: call
    /// it off the async runtime.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, Origin)> {
        let path = self.path(digest);
        if path.exists() {
            // SAFETY: `deserialize_file` trusts the file to be an artifact this wasmtime
            // produced. It lives in a directory `open` verified to be owned by this user and
            // closed to everyone else, and was written by `store` below under a name derived
            // from the module's sha256; wasmtime still checks its header, version and engine
            // configuration, and a failure falls through to compiling.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => {
                    // Recently used, for pruning.
                    if let Ok(f) = std::fs::File::options().append(true).open(&path) {
                        let _ = f.set_modified(std::time::SystemTime::now());
                    }
                    return Ok((c, Origin::Cache));
                }
                Err(e) => {
                    tracing::warn!(artifact = %path.display(), "discarding an unusable precompiled artifact: {e:#}");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let component = Component::new(engine, bytes)?;
        Ok((component, Origin::Compiled))
    }

    /// Stores `component`'s native code under `digest`, then prunes the directory. Blocking.
    /// Failures are logged, never fatal: the next load compiles again.
    pub fn store(&self, component: &Component, digest: &str) {
        let path = self.path(digest);
        if path.exists() {
            return;
        }
        let write = || -> wasmtime::Result<()> {
            let bytes = component.serialize()?;
            // Unique per writer: two loads of one module may store at once.
            let tmp = self.dir.join(format!(
                ".{digest}.{}.{:08x}.tmp",
                std::process::id(),
                fastrand::u32(..)
            ));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })?;
            Ok(())
        };
        if let Err(e) = write() {
            tracing::warn!(artifact = %path.display(), "could not store the precompiled artifact (the next load compiles again): {e}");
        }
        self.prune();
    }

    /// Deletes the least recently loaded artifacts until the directory fits `max_bytes`.
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

fn check_private(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(dir).map_err(|source| Error::Io {
        path: dir.into(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(Error::NotPrivate {
            path: dir.into(),
            problem: format!("owned by uid {}, not this user (uid {me})", meta.uid()),
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        // Ours, so tighten it rather than refuse: a fresh directory gets the umask's mode.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|_| {
            Error::NotPrivate {
                path: dir.into(),
                problem: format!("writable by group or others (mode {mode:o})"),
            }
        })?;
    }
    Ok(())
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

        std::fs::write(cache.path("abc"), b"garbage").unwrap();
        let (component, third) = cache
            .load_or_compile(&engine, "abc", EMPTY_COMPONENT)
            .unwrap();
        assert_eq!(third, Origin::Compiled);
        assert!(!cache.path("abc").exists(), "the corrupt artifact is gone");
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
            std::fs::metadata(cache.path("a")).unwrap().len()
        };
        let cache = cache.with_max_bytes(2 * one);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        let age = |d: &str, t| {
            let f = std::fs::File::options()
                .append(true)
                .open(cache.path(d))
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
        assert!(cache.path("a").exists());
        assert!(!cache.path("b").exists());
        assert!(cache.path("c").exists());
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
}
