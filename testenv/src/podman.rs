//! The host image (`scripts/image.sh`) and podman to run it, for the container test and the
//! image benchmark.
//!
//! [`Podman`] keeps its own storage, state, network configuration, volumes and
//! `containers.conf` under a temporary directory: nothing it loads, pulls or starts touches the
//! machine's podman, and it removes its containers, images and directory on drop. It runs
//! containers with runc and cgroupfs and no default ulimits, which works in sandboxed hosts where
//! crun, systemd cgroups or raising ulimits do not; callers pass `--network host` for the same
//! reason. [`build_image`] is the exception: `scripts/image.sh` builds with the machine's podman,
//! as a developer's build would.
//!
//! It needs root (rootful podman): the pod runner chowns volumes to the pod's `fsGroup`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// Why the image could not be built or podman could not run it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// podman is missing or cannot run containers on this machine.
    #[error("podman cannot run here: {0}; install Debian's podman and runc (scripts/test.sh does)")]
    Unavailable(String),
    /// A podman command failed.
    #[error("`podman {args}` failed: {output}")]
    Failed {
        /// Its arguments.
        args: String,
        /// What it printed.
        output: String,
    },
    /// `scripts/image.sh` or `scripts/release.sh` failed; it printed why above.
    #[error("{0}; its output above says why")]
    Build(String),
    /// A file or directory could not be made.
    #[error("{path}: {source}")]
    Io {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The image archive: `RECONCILED_IMAGE` if set (scripts/test.sh builds the image once per
/// suite; the file is trusted as is, however old), else built now with `scripts/image.sh` (a
/// release build for musl: minutes the first time).
pub fn image_archive() -> Result<PathBuf, Error> {
    match std::env::var_os("RECONCILED_IMAGE") {
        Some(path) => Ok(PathBuf::from(path)),
        None => build_image(&[]),
    }
}

/// Runs `scripts/image.sh` with `args` (its progress goes to stderr); the archive it wrote.
///
/// It builds with the machine's podman, not a [`Podman`]'s, and tags
/// `localhost/reconciled:<version>` there.
pub fn build_image(args: &[&OsStr]) -> Result<PathBuf, Error> {
    script("image.sh", args, &[]).map(PathBuf::from)
}

/// Runs `scripts/release.sh` with `args` and `env` (its progress goes to stderr): it builds the
/// amd64 and arm64 images with the machine's podman, pushes them as one list, signs it and
/// attaches each image's SBOM. The list's reference pinned by digest.
pub fn release(args: &[&OsStr], env: &[(&str, &str)]) -> Result<String, Error> {
    script("release.sh", args, env)
}

/// Runs `scripts/<name>`; the last line it printed on stdout.
fn script(name: &str, args: &[&OsStr], env: &[(&str, &str)]) -> Result<String, Error> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name);
    let mut cmd = Command::new("bash");
    // Under `cargo test` the environment carries the test crate's CARGO_PKG_* and friends;
    // build scripts (ring's) track some of them, so the nested cargo would rebuild from ring up.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_TARGET_DIR" {
            cmd.env_remove(key.as_ref());
        }
    }
    let out = cmd
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::Build(format!("cannot run {}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(Error::Build(format!(
            "scripts/{name} failed ({})",
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// podman with storage, configuration and containers of its own.
///
/// Dropping it kills and removes every container (no grace period), removes every image, then
/// the directory. A process killed before that leaves its containers running.
#[derive(Debug)]
pub struct Podman {
    dir: tempfile::TempDir,
    started: Mutex<Vec<String>>,
}

impl Podman {
    /// Sets podman up under a fresh temporary directory and checks that it runs.
    pub fn new() -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix("reconciled-podman-")
            .tempdir()
            .map_err(|source| Error::Io {
                path: std::env::temp_dir(),
                source,
            })?;
        let conf = dir.path().join("containers.conf");
        std::fs::write(
            &conf,
            "[containers]\ndefault_ulimits = []\nlog_driver = \"k8s-file\"\n\n\
             [engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\nevents_logger = \"file\"\n",
        )
        .map_err(|source| Error::Io { path: conf, source })?;
        let podman = Podman {
            dir,
            started: Mutex::default(),
        };
        match podman
            .command()
            .args(["info", "--format", "{{.Host.OCIRuntime.Name}}"])
            .output()
        {
            Ok(out) if out.status.success() => Ok(podman),
            Ok(out) => Err(Error::Unavailable(
                text(&out).lines().last().unwrap_or_default().to_string(),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::Unavailable("`podman` is not on PATH".into()))
            }
            Err(e) => Err(Error::Unavailable(e.to_string())),
        }
    }

    /// Its private directory, for files to mount into containers.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A podman command on this instance's storage and configuration. Containers started
    /// through it rather than [`Podman::start`] are missing from [`Podman::logs`].
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("podman");
        // Every path a rootful podman would otherwise share with the machine's: its libpod state
        // (`/run/libpod`), network definitions and named volumes, as well as images.
        let own =
            |flag: &str, dir: &str| [OsStr::new(flag).to_owned(), self.dir().join(dir).into()];
        cmd.env("CONTAINERS_CONF", self.dir().join("containers.conf"))
            .args(own("--root", "storage"))
            .args(own("--runroot", "run"))
            .args(own("--tmpdir", "libpod"))
            .args(own("--network-config-dir", "networks"))
            .args(own("--volumepath", "volumes-podman"))
            .args(["--storage-driver", "overlay"]);
        cmd
    }

    /// Runs podman with `args`; its stdout.
    pub fn run<I, S>(&self, args: I) -> Result<String, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command();
        let args: Vec<S> = args.into_iter().collect();
        cmd.args(&args);
        let out = cmd
            .output()
            .map_err(|e| Error::Unavailable(e.to_string()))?;
        if !out.status.success() {
            return Err(Error::Failed {
                args: args
                    .iter()
                    .map(|a| a.as_ref().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                output: text(&out),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One field of `image`'s description (a Go template, `{{.Id}}`), trimmed.
    pub fn inspect_image(&self, image: &str, format: &str) -> Result<String, Error> {
        Ok(self
            .run(["image", "inspect", "--format", format, image])?
            .trim()
            .to_string())
    }

    /// One field of container `name`'s state (`{{.State.Pid}}`), trimmed.
    pub fn inspect(&self, name: &str, format: &str) -> Result<String, Error> {
        Ok(self
            .run(["container", "inspect", "--format", format, name])?
            .trim()
            .to_string())
    }

    /// Starts a detached container `name` from a local `image` (never pulling) with `flags`
    /// before the image and `args` after it.
    pub fn start(
        &self,
        name: &str,
        flags: &[String],
        image: &str,
        args: &[String],
    ) -> Result<(), Error> {
        self.started.lock().unwrap().push(name.to_string());
        let mut all: Vec<&str> = vec!["run", "--detach", "--pull", "never", "--name", name];
        all.extend(flags.iter().map(String::as_str));
        all.push(image);
        all.extend(args.iter().map(String::as_str));
        self.run(all).map(drop)
    }

    /// The last lines of every container's log it started, for failure messages.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for name in self.started.lock().unwrap().iter() {
            let out = self.command().args(["logs", "--tail", "40", name]).output();
            let log = out.map(|o| text(&o)).unwrap_or_else(|e| e.to_string());
            all.push_str(&format!("--- {name}\n{log}"));
        }
        all
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self
            .command()
            .args(["rm", "--force", "--all", "--time", "0"])
            .output();
        // Unmounts the overlay layers, so that the directory can go. (Not `system reset`: that
        // also deletes the machine's podman networks and temporary state.)
        let _ = self.command().args(["rmi", "--all", "--force"]).output();
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
