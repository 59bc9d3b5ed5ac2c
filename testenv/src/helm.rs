//! The helm CLI (helm.sh/helm/v4), built from `testenv/helm` with the machine's Go like the
//! control plane and cached, and run against a control plane with a home of its own, so a test
//! never reads or writes the user's helm settings.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why helm could not be built or did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building it failed.
    #[error(
        "cannot build helm (testenv/helm) with Go: {0}; check that `go` 1.26 is on PATH and the module proxy is reachable"
    )]
    Build(String),
    /// Its home could not be made.
    #[error("cannot make a home for helm: {0}")]
    Home(#[source] std::io::Error),
    /// A helm command failed.
    #[error("`helm {args}` failed ({status}):\n{stderr}")]
    Failed {
        /// The arguments, joined.
        args: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
}

const HELM: crate::go_tool::Tool = crate::go_tool::Tool {
    name: "helm",
    module: "helm",
    sources: &[
        ("go.mod", include_str!("../helm/go.mod")),
        ("go.sum", include_str!("../helm/go.sum")),
        ("tools.go", include_str!("../helm/tools.go")),
    ],
    package: "helm.sh/helm/v4/cmd/helm",
};

/// The helm binary, built first if the cache lacks one for these sources.
pub fn binary() -> Result<PathBuf, Error> {
    crate::go_tool::binary(&HELM).map_err(Error::Build)
}

/// helm pointed at one cluster, with its cache, config and data in a folder of its own.
#[derive(Debug)]
pub struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    /// helm for the cluster of `kubeconfig` (building helm if needed).
    pub fn new(kubeconfig: &Path) -> Result<Self, Error> {
        Ok(Self {
            bin: binary()?,
            kubeconfig: kubeconfig.to_path_buf(),
            home: tempfile::Builder::new()
                .prefix("reconciled-helm-")
                .tempdir()
                .map_err(Error::Home)?,
        })
    }

    /// Runs `helm <args>`; its stdout, or [`Error::Failed`] with its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String, Error> {
        let home = self.home.path();
        let out = Command::new(&self.bin)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Failed {
                args: args.join(" "),
                status: "not started".into(),
                stderr: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(Error::Failed {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
