//! The control-plane binaries: kube-apiserver, kube-controller-manager and kubectl built from Go
//! modules, etcd from a crate.
//!
//! The Go binaries are built from the published `k8s.io/kubernetes` module (see
//! `testenv/k8s/go.mod`) with the machine's Go, and cached by version outside the source tree,
//! so only the first run on a machine pays for the build (about a quarter of an hour on two
//! cores). A cached binary is trusted only if its `--version` output names the expected version;
//! anything else (a missing or truncated file, a different version) is rebuilt, and only those
//! binaries are rebuilt: the others stay as they are.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Errors from finding or building the control-plane binaries.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Go is not installed.
    #[error(
        "kube-apiserver is built from Go modules, but `go` is not on PATH: install Go {min_go} or newer and retry"
    )]
    NoGo {
        /// The oldest Go release that builds the pinned Kubernetes version.
        min_go: &'static str,
    },
    /// Go is installed but older than Kubernetes needs.
    #[error(
        "kube-apiserver {k8s} needs Go {min_go} or newer, but `go` is {found}: install a newer Go and retry"
    )]
    GoTooOld {
        /// The Kubernetes version being built.
        k8s: &'static str,
        /// The oldest Go release that builds it.
        min_go: &'static str,
        /// What `go env GOVERSION` printed.
        found: String,
    },
    /// `go mod download` could not reach the module proxy.
    #[error(
        "cannot download Go modules for kube-apiserver: the module proxy ({proxy}) is unreachable ({detail}); check GOPROXY and network access"
    )]
    ProxyUnreachable {
        /// The configured `GOPROXY`.
        proxy: String,
        /// The last line Go printed.
        detail: String,
    },
    /// The Go build ran and failed.
    #[error("building {what} {k8s} failed ({status}); last lines of the Go output:\n{tail}")]
    BuildFailed {
        /// The binaries being built, such as `kube-apiserver, kubectl`.
        what: String,
        /// The Kubernetes version being built.
        k8s: &'static str,
        /// The exit status.
        status: String,
        /// The end of the build log.
        tail: String,
    },
    /// A freshly built binary does not report the version it was built as.
    #[error(
        "the freshly built {path} reports {found:?}, not {expected}; the Go module cache may be corrupt (try `go clean -modcache`)"
    )]
    WrongVersion {
        /// The binary.
        path: PathBuf,
        /// What it printed.
        found: String,
        /// The version it should report.
        expected: &'static str,
    },
    /// The cache directory could not be used.
    #[error("cannot use the binary cache at {path}: {source}")]
    Cache {
        /// The directory or file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

const GO_MOD: &str = include_str!("../k8s/go.mod");

/// The oldest Go that builds the pinned Kubernetes (its `go.mod` says `go 1.26.0`).
pub const MIN_GO: &str = "1.26";

/// The pinned Kubernetes version, read from `testenv/k8s/go.mod` so there is one source of truth.
pub fn kubernetes_version() -> &'static str {
    GO_MOD
        .lines()
        .find_map(|l| l.trim().strip_prefix("require k8s.io/kubernetes "))
        .map(str::trim)
        .expect("testenv/k8s/go.mod requires k8s.io/kubernetes")
}

/// Paths of the binaries a control plane runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// kube-apiserver, built from Go modules.
    pub kube_apiserver: PathBuf,
    /// kube-controller-manager, built alongside kube-apiserver; runs the garbage collector and
    /// the namespace controller.
    pub kube_controller_manager: PathBuf,
    /// kubectl, built alongside kube-apiserver, for tests and humans.
    pub kubectl: PathBuf,
    /// etcd, from the `etcd-bin-vendored-linux-amd64` crate.
    pub etcd: PathBuf,
}

/// The directory binaries are cached in: `$RECONCILED_CACHE_DIR`, else `$XDG_CACHE_HOME/reconciled`,
/// else `~/.cache/reconciled`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RECONCILED_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("reconciled")
}

/// Returns the binaries, building those the cache lacks a good copy of first.
///
/// Safe to call from several processes at once: builders serialize on a lock file, and the
/// binaries appear in the cache by atomic rename, so nobody runs a half-written file.
/// Blocks for the whole build (minutes) on a cold machine; progress goes to stderr.
pub fn ensure() -> Result<Binaries> {
    let version = kubernetes_version();
    let dir = cache_dir().join("k8s").join(version);
    let bins = Binaries {
        kube_apiserver: dir.join("kube-apiserver"),
        kube_controller_manager: dir.join("kube-controller-manager"),
        kubectl: dir.join("kubectl"),
        etcd: PathBuf::from(
            etcd_bin_vendored_linux_amd64::etcd_bin_path().unwrap_or_else(|e| match e {}),
        ),
    };
    if stale(&dir, version, false).is_empty() {
        return Ok(bins);
    }
    std::fs::create_dir_all(&dir).map_err(|source| Error::Cache {
        path: dir.clone(),
        source,
    })?;
    let lock_path = dir.with_extension("lock");
    let lock = File::create(&lock_path).map_err(|source| Error::Cache {
        path: lock_path.clone(),
        source,
    })?;
    lock.lock().map_err(|source| Error::Cache {
        path: lock_path.clone(),
        source,
    })?;
    // Another process may have built some or all of them while we waited for the lock.
    let packages = stale(&dir, version, true);
    if !packages.is_empty() {
        build(&dir, version, &packages)?;
        for path in packages.iter().map(|pkg| dir.join(binary_name(pkg))) {
            let found = reported_version(&path).unwrap_or_default();
            if !found.contains(version) {
                return Err(Error::WrongVersion {
                    path,
                    found,
                    expected: version,
                });
            }
        }
    }
    Ok(bins)
}

/// The packages in [`PACKAGES`] whose binary in `dir` is missing or does not report `version`.
/// With `explain`, says on stderr why each one that exists will be rebuilt.
fn stale(dir: &Path, version: &str, explain: bool) -> Vec<&'static str> {
    PACKAGES
        .into_iter()
        .filter(|pkg| {
            let path = dir.join(binary_name(pkg));
            let good = reported_version(&path).is_some_and(|v| v.contains(version));
            if !good && explain && path.exists() {
                eprintln!(
                    "testenv: cached {} does not report {version}; rebuilding it",
                    path.display()
                );
            }
            !good
        })
        .collect()
}

/// The file `go build` names a command package's binary: the last element of its path.
fn binary_name(package: &str) -> &str {
    package.rsplit('/').next().unwrap_or(package)
}

/// What `<binary> --version` (or `kubectl version --client`) prints, if it runs at all.
fn reported_version(path: &Path) -> Option<String> {
    if !path.is_file() {
        return None;
    }
    let mut cmd = Command::new(path);
    if path.file_name().is_some_and(|n| n == "kubectl") {
        cmd.args(["version", "--client"]);
    } else {
        cmd.arg("--version");
    }
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s")
}

fn go(module: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(module)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null());
    cmd
}

fn check_go(version: &'static str) -> Result<()> {
    let out = match Command::new("go").args(["env", "GOVERSION"]).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoGo { min_go: MIN_GO });
        }
        Err(_) => return Err(Error::NoGo { min_go: MIN_GO }),
    };
    let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let numbers = |s: &str| -> Vec<u32> {
        s.trim_start_matches("go")
            .split('.')
            .map_while(|p| p.parse().ok())
            .collect()
    };
    if numbers(&found) < numbers(MIN_GO) {
        return Err(Error::GoTooOld {
            k8s: version,
            min_go: MIN_GO,
            found,
        });
    }
    Ok(())
}

/// The commands built from `k8s.io/kubernetes`; `testenv/k8s/tools.go` pins the same list.
const PACKAGES: [&str; 3] = [
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    "k8s.io/kubernetes/cmd/kubectl",
];

/// Builds `packages` (some of [`PACKAGES`]) into `dir`, each binary appearing by atomic rename.
fn build(dir: &Path, version: &'static str, packages: &[&str]) -> Result<()> {
    check_go(version)?;
    let module = module_dir();
    let started = Instant::now();
    let what = packages
        .iter()
        .map(|p| binary_name(p))
        .collect::<Vec<_>>()
        .join(", ");
    eprintln!(
        "testenv: building {what} {version} from Go modules (once per machine; cached in {})",
        dir.display()
    );

    let out = go(&module)
        .args(["mod", "download"])
        .output()
        .map_err(|_| Error::NoGo { min_go: MIN_GO })?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let detail = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .to_string();
        let proxy = go(&module)
            .args(["env", "GOPROXY"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        return Err(Error::ProxyUnreachable { proxy, detail });
    }

    // `go list -deps` with `.Stale` counts the packages the Go build cache lacks (with the same
    // -trimpath as the build, which is part of the cache key), so progress can say "n of N" even
    // when most of the graph is cached from building the other binaries.
    let total = go(&module)
        .args([
            "list",
            "-trimpath",
            "-deps",
            "-f",
            "{{if .Stale}}stale{{end}}",
        ])
        .args(packages)
        .output()
        .map(|o| {
            o.stdout
                .split(|&b| b == b'\n')
                .filter(|l| l == b"stale")
                .count()
        })
        .unwrap_or(0);

    let staging = dir.join(".building");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(|source| Error::Cache {
        path: staging.clone(),
        source,
    })?;
    let minor = minor(version);
    let date = build_date();
    let mut ldflags = String::from("-s -w");
    for pkg in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        ldflags.push_str(&format!(
            " -X {pkg}.gitVersion={version} -X {pkg}.gitMajor=1 -X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean -X {pkg}.buildDate={date}"
        ));
    }
    let mut child = go(&module)
        .args(["build", "-v", "-trimpath", "-ldflags", &ldflags, "-o"])
        .arg(format!("{}/", staging.display()))
        .args(packages)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|_| Error::NoGo { min_go: MIN_GO })?;

    // `go build -v` names each package as it compiles it (not those it finds in the Go build
    // cache): count them for progress, keep the tail for the error message.
    let mut tail: Vec<String> = Vec::new();
    let mut done = 0usize;
    let mut last_report = Instant::now();
    for line in BufReader::new(child.stderr.take().expect("piped"))
        .lines()
        .map_while(|l| l.ok())
    {
        done += 1;
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            let of = if total > 0 {
                format!(" of ~{total}")
            } else {
                String::new()
            };
            eprintln!(
                "testenv: building {what}: {done}{of} packages compiled, {:.0?} elapsed",
                started.elapsed()
            );
        }
        tail.push(line);
        if tail.len() > 40 {
            tail.remove(0);
        }
    }
    let status = child.wait().map_err(|source| Error::Cache {
        path: staging.clone(),
        source,
    })?;
    if !status.success() {
        return Err(Error::BuildFailed {
            what,
            k8s: version,
            status: status.to_string(),
            tail: tail.join("\n"),
        });
    }
    for name in packages.iter().map(|p| binary_name(p)) {
        let from = staging.join(name);
        let to = dir.join(name);
        std::fs::rename(&from, &to).map_err(|source| Error::Cache {
            path: to.clone(),
            source,
        })?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    eprintln!(
        "testenv: built {what} {version} in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// The minor number of `v1.<minor>.<patch>`, which `/version` reports on its own.
fn minor(version: &str) -> &str {
    version.split('.').nth(1).unwrap_or("0")
}

/// Now, in the second-precision RFC 3339 form `/version` reports as `buildDate`.
fn build_date() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_date_is_rfc3339_to_the_second() {
        let d = build_date();
        assert_eq!(d.len(), "2026-01-01T00:00:00Z".len(), "{d}");
        assert!(d.ends_with('Z') && d.as_bytes()[10] == b'T', "{d}");
    }

    #[test]
    fn version_comes_from_go_mod() {
        let v = kubernetes_version();
        assert!(v.starts_with("v1.3"), "{v}");
        assert_eq!(minor("v1.37.2"), "37");
    }

    #[test]
    fn binary_names_are_the_last_path_element() {
        let names: Vec<_> = PACKAGES.iter().map(|p| binary_name(p)).collect();
        assert_eq!(
            names,
            ["kube-apiserver", "kube-controller-manager", "kubectl"]
        );
    }

    #[test]
    fn tools_go_pins_every_package() {
        let tools = include_str!("../k8s/tools.go");
        for pkg in PACKAGES {
            assert!(tools.contains(&format!("_ \"{pkg}\"")), "{pkg}");
        }
    }
}
