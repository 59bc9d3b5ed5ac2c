//! Go programs the tests use beside the control plane (the OCI registry, helm), each built from
//! a module of its own under `testenv/` with the machine's Go and cached by the hash of that
//! module's sources, so only the first run on a machine builds them and an edit of the
//! sources (a version bump) builds afresh.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::Digest as _;

/// One Go program: where its module is and what to build.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// Its name: the binary's and the cache folder's.
    pub name: &'static str,
    /// Its module's folder under `testenv/`.
    pub module: &'static str,
    /// The module's files, embedded, whose hash keys the cache.
    pub sources: &'static [(&'static str, &'static str)],
    /// The package to build, relative to the module (`.`) or by import path.
    pub package: &'static str,
}

/// The tool's binary, built first if the cache lacks one for these sources; the error is the
/// last line Go printed, or why the cache could not be used.
///
/// Where it may surprise: two processes asking at once build once, the second waiting on a
/// file lock for the first (a build of helm takes minutes on two cores).
pub fn binary(tool: &Tool) -> Result<PathBuf, String> {
    let mut h = sha2::Sha256::new();
    for (_, text) in tool.sources {
        h.update(text.as_bytes());
    }
    let hash: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = crate::binaries::cache_dir().join(tool.name).join(hash);
    let bin = dir.join(tool.name);
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = std::fs::File::create(dir.with_extension("lock"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    lock.lock().map_err(|e| format!("{}: {e}", dir.display()))?;
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!(
        "testenv: building {} from testenv/{} (once per machine; cached in {})",
        tool.name,
        tool.module,
        dir.display()
    );
    let started = std::time::Instant::now();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(tool.module);
    let tmp = dir.join(format!("{}.tmp.{}", tool.name, std::process::id()));
    let out = Command::new("go")
        .current_dir(&src)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        // No symbol table or DWARF (`-s -w`): nobody debugs these, and writing them is a good
        // part of linking a binary of 100 MB.
        .args(["build", "-trimpath", "-ldflags=-s -w", "-o"])
        .arg(&tmp)
        .arg(tool.package)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run go: {e}"))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return Err(last.to_string());
    }
    std::fs::rename(&tmp, &bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    eprintln!("testenv: built {} in {:.0?}", tool.name, started.elapsed());
    Ok(bin)
}
