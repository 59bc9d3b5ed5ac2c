//! A real OCI registry on loopback, with TLS and basic auth: go-containerregistry's registry
//! (`testenv/registry/main.go`), built from Go modules like the control plane and cached by
//! the hash of its sources. The same binary pulls with crane, to show that an artifact is an
//! ordinary one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// Why the registry could not be built, started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building it failed.
    #[error(
        "cannot build the test registry (testenv/registry) with Go: {0}; check that `go` 1.26 is on PATH and the module proxy is reachable"
    )]
    Build(String),
    /// Starting it failed.
    #[error("cannot start the test registry: {0}")]
    Start(String),
    /// Certificates could not be made.
    #[error(transparent)]
    Pki(#[from] crate::pki::Error),
    /// A crane pull failed.
    #[error("crane could not pull {reference}: {reason}")]
    Pull {
        /// What.
        reference: String,
        /// Its output.
        reason: String,
    },
    /// An oras pull failed (or oras could not be built).
    #[error("oras could not pull {reference}: {reason}")]
    Oras {
        /// What.
        reference: String,
        /// Its output.
        reason: String,
    },
}

const REGISTRY: crate::go_tool::Tool = crate::go_tool::Tool {
    name: "registry",
    module: "registry",
    sources: &[
        ("go.mod", include_str!("../registry/go.mod")),
        ("go.sum", include_str!("../registry/go.sum")),
        ("main.go", include_str!("../registry/main.go")),
    ],
    package: ".",
};

/// The registry binary, built first if the cache lacks one for these sources.
pub fn binary() -> Result<PathBuf, Error> {
    crate::go_tool::binary(&REGISTRY).map_err(Error::Build)
}

/// A running registry; stopped when dropped (it also exits when this process dies, as its
/// stdin closes).
#[derive(Debug)]
pub struct Registry {
    child: Child,
    _stdin: ChildStdin,
    host: String,
    dir: tempfile::TempDir,
    user: String,
    password: String,
}

impl Registry {
    /// Builds (if needed) and starts a registry on a free loopback port, serving TLS with a
    /// certificate of a fresh CA and accepting one user. It serves the OCI 1.1 referrers API.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(true)
    }

    /// [`Registry::start`], without the referrers API (a 404, as older registries answer), so
    /// that clients must keep the referrers tag themselves.
    pub fn start_without_referrers_api() -> Result<Self, Error> {
        Self::start_with(false)
    }

    fn start_with(referrers: bool) -> Result<Self, Error> {
        let bin = binary()?;
        let dir = tempfile::tempdir().map_err(|e| Error::Start(e.to_string()))?;
        let pki = crate::pki::Pki::new()?;
        let serving = pki.serving_cert()?;
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).map_err(|e| Error::Start(format!("{}: {e}", p.display())))?;
            Ok::<_, Error>(p)
        };
        write("ca.pem", pki.ca_pem())?;
        let cert = write("cert.pem", &serving.cert_pem)?;
        let key = write("key.pem", &serving.key_pem)?;
        let (user, password) = ("tester".to_string(), format!("pw-{}", std::process::id()));
        let mut child = Command::new(&bin)
            .args(["serve", "-addr", "127.0.0.1:0", "-cert"])
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .args(["-user", &user, "-password", &password])
            .arg(format!("-referrers={referrers}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::Start(format!("{}: {e}", bin.display())))?;
        let stdin = child.stdin.take().expect("stdin was piped");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout was piped"))
            .read_line(&mut line)
            .map_err(|e| Error::Start(e.to_string()))?;
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            return Err(Error::Start(format!(
                "it printed {line:?} instead of its address"
            )));
        };
        let host = addr.to_string();
        Ok(Registry {
            child,
            _stdin: stdin,
            host,
            dir,
            user,
            password,
        })
    }

    /// `127.0.0.1:<port>`, as references name it (its certificate names that address).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The CA file its certificate chains to.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The user it accepts.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// That user's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A `.dockerconfigjson` document with its login.
    pub fn dockerconfigjson(&self) -> String {
        serde_json::json!({"auths": {self.host.clone(): {
            "username": self.user, "password": self.password,
        }}})
        .to_string()
    }

    /// Pulls `reference`'s one layer into `out` with crane; returns what crane saw: the
    /// manifest, config and layer media types and the layer digest, space-separated.
    pub fn crane_pull(&self, reference: &str, out: &Path) -> Result<String, Error> {
        let bin = binary()?;
        let o = Command::new(bin)
            .args(["pull", "-ca"])
            .arg(self.ca_file())
            .args([
                "-user",
                &self.user,
                "-password",
                &self.password,
                "-ref",
                reference,
                "-out",
            ])
            .arg(out)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Pull {
                reference: reference.into(),
                reason: e.to_string(),
            })?;
        if !o.status.success() {
            return Err(Error::Pull {
                reference: reference.into(),
                reason: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }
}

impl Registry {
    /// Pulls `reference` into the folder `out` with the oras CLI (`oras pull`, logged in, the
    /// registry's CA trusted), as a user of any OCI artifact would; returns the names of the
    /// files it wrote. oras writes only layers that carry a file name
    /// (`org.opencontainers.image.title`).
    pub fn oras_pull(&self, reference: &str, out: &Path) -> Result<Vec<String>, Error> {
        let failed = |reason: String| Error::Oras {
            reference: reference.into(),
            reason,
        };
        let bin = crate::oras::binary().map_err(failed)?;
        std::fs::create_dir_all(out).map_err(|e| failed(e.to_string()))?;
        let o = Command::new(bin)
            .args(["pull", "--ca-file"])
            .arg(self.ca_file())
            .args(["-u", &self.user, "-p", &self.password, "-o"])
            .arg(out)
            .arg(reference)
            .env("HOME", out)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(e.to_string()))?;
        if !o.status.success() {
            return Err(failed(
                String::from_utf8_lossy(&o.stderr).trim().to_string(),
            ));
        }
        let mut names: Vec<String> = std::fs::read_dir(out)
            .map_err(|e| failed(e.to_string()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
