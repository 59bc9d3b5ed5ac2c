//! Kubeconfig files for the loopback control plane, and the `kube::Config` read back from them.
//!
//! The file is written as JSON, which is valid YAML, so `kubectl` and kube-rs read the same bytes:
//! a test that passes through `kube::Config` exercises exactly what a human's `kubectl` uses.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use std::path::{Path, PathBuf};

use crate::pki::CertPair;

/// Errors from writing or reading a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be written.
    #[error("cannot write kubeconfig {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// kube-rs rejected what we wrote; a bug in this module.
    #[error("kube-rs cannot load kubeconfig {path}: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// kube-rs' error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes a kubeconfig for `user` at `path` and returns the matching `kube::Config`.
pub fn write(
    path: &Path,
    server: &str,
    ca_pem: &str,
    user: &str,
    client: &CertPair,
) -> Result<kube::Config> {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "testenv", "cluster": {
            "server": server,
            "certificate-authority-data": B64.encode(ca_pem),
        }}],
        "users": [{ "name": user, "user": {
            "client-certificate-data": B64.encode(&client.cert_pem),
            "client-key-data": B64.encode(&client.key_pem),
        }}],
        "contexts": [{ "name": "testenv", "context": { "cluster": "testenv", "user": user, "namespace": "default" }}],
        "current-context": "testenv",
    });
    let text = serde_json::to_string_pretty(&doc).expect("a JSON value serializes");
    std::fs::write(path, text).map_err(|source| Error::Write {
        path: path.into(),
        source,
    })?;
    load(path)
}

/// Reads a kubeconfig written by [`write()`] back into a `kube::Config`.
pub fn load(path: &Path) -> Result<kube::Config> {
    let load_err = |e: Box<dyn std::error::Error + Send + Sync>| Error::Load {
        path: path.into(),
        source: e,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| load_err(Box::new(e)))?;
    // Loading a certificate-only kubeconfig does no I/O that needs a reactor, so any executor
    // works, and this stays callable from both sync code and inside a tokio test.
    let cfg = futures::executor::block_on(kube::Config::from_custom_kubeconfig(
        kc,
        &Default::default(),
    ))
    .map_err(|e| load_err(Box::new(e)))?;
    Ok(cfg)
}
