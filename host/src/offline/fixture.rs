//! Fixtures: a folder per case, in YAML.
//!
//! ```text
//! fixtures/
//!   crd.yaml               CustomResourceDefinitions of the kinds the guest reads (any
//!                          top-level .yaml file; symlinks are followed)
//!   creates-copies/
//!     fixture.yaml         the request, and optionally: now, seed, faults, stale
//!     objects.yaml         what the cache (and the server) holds, one document per object
//!     expected.yaml        the outcome, writes and Events; `--update` writes it
//! ```
//!
//! `fixture.yaml`:
//!
//! ```yaml
//! request: {namespace: default, name: greeting}
//! now: 2026-01-01T00:00:00Z      # the guest's clock, and the server's timestamps
//! seed: 1                        # the guest's random bytes
//! faults:                        # answers imposed on matching requests
//!   - {verb: update, subresource: status, kind: ConfigMapGenerator, answer: conflict, times: 1}
//! stale:                         # the cache holds these one version behind the server
//!   - {apiVersion: v1, kind: ConfigMap, namespace: default, name: greeting-0}
//! # Read by `--chaos` only:
//! changes:                       # a user's edits, each once the guest has settled
//!   - apply: {apiVersion: v1, kind: ConfigMap, metadata: {name: greeting, namespace: default},
//!             data: {copies: "2"}}
//!   - delete: {apiVersion: v1, kind: ConfigMap, namespace: default, name: greeting}
//! settle: 10                     # reconciles a run may take to stop writing, per change
//! nondeterministic:              # paths left out when end states are compared
//!   - status.conditions.*.lastTransitionTime
//! ```
//!
//! `--chaos` also reads, when present, Chainsaw-style assertions on the end state: `assert.yaml`
//! (each document a partial object that must match an object there) and `error.yaml` (each an
//! object that must not be there, or must not match). Plain `reconciled test` runs one
//! reconcile and compares `expected.yaml` only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::guest::settings::GuestSettings;
pub use crate::guest::tape::RequestKey;
pub use crate::offline::records::ObjectName;
use crate::offline::records::{Change, Event, Fault, Write};

/// A fixture that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file that cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file that is not the YAML it should be.
    #[error("{path}: {reason}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A value that makes no sense.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and what would be right.
        reason: String,
    },
}

/// `fixture.yaml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    /// What to reconcile.
    pub request: RequestKey,
    /// The guest's clock at the start, RFC 3339 [2026-01-01T00:00:00Z].
    #[serde(default)]
    pub now: Option<String>,
    /// Seed of the guest's random bytes \[0\].
    #[serde(default)]
    pub seed: u64,
    /// Answers imposed on matching requests.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Objects the cache holds one version behind the server.
    #[serde(default)]
    pub stale: Vec<ObjectName>,
    /// What the guest's `settings` import returns: a map \[`{}`\].
    #[serde(default)]
    pub settings: Option<GuestSettings>,
    /// A user's changes, each made once the guest has settled (`--chaos` only).
    #[serde(default)]
    pub changes: Vec<Change>,
    /// Reconciles a `--chaos` run may take to stop writing, after each change \[10\].
    #[serde(default = "default_settle")]
    pub settle: u32,
    /// Paths (dotted, `*` for any key or item) left out when `--chaos` compares end states.
    #[serde(default)]
    pub nondeterministic: Vec<String>,
}

fn default_settle() -> u32 {
    10
}

/// What a reconcile came to: `expected.yaml`, and what a run is compared with it as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// `done`, `requeue-after <ms>ms`, `error <case>` (`error conflict`), `trap`, `deadline` or
    /// `memory`.
    pub outcome: String,
    /// The writes, in order.
    #[serde(default)]
    pub writes: Vec<Write>,
    /// The Events, in order.
    #[serde(default)]
    pub events: Vec<Event>,
}

impl Outcome {
    /// The YAML this outcome is written and compared as.
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// One case, read.
#[derive(Debug, Clone)]
pub struct Case {
    /// The folder's name.
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
    /// `fixture.yaml`.
    pub setup: Setup,
    /// The guest's clock at the start, since the Unix epoch.
    pub now: Duration,
    /// `objects.yaml`.
    pub objects: Vec<Value>,
    /// `expected.yaml`, if there is one.
    pub expected: Option<Outcome>,
    /// `assert.yaml`: partial objects the end state must hold (`--chaos` only).
    pub asserts: Vec<Value>,
    /// `error.yaml`: objects the end state must not hold (`--chaos` only).
    pub errors: Vec<Value>,
}

/// The default start of the guest's clock: 2026-01-01T00:00:00Z.
pub const DEFAULT_NOW: Duration = Duration::from_secs(1_767_225_600);

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn yaml_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Yaml {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Every document of a multi-document YAML file, empty ones skipped.
pub fn documents(path: &Path) -> Result<Vec<Value>, Error> {
    let text = read(path)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| yaml_error(path, e))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

impl Case {
    /// Reads the case in `dir`.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let setup_path = dir.join("fixture.yaml");
        let setup: Setup =
            serde_saphyr::from_str(&read(&setup_path)?).map_err(|e| yaml_error(&setup_path, e))?;
        for f in &setup.faults {
            f.refusal("").map_err(|e| Error::Invalid {
                path: setup_path.clone(),
                reason: e.to_string(),
            })?;
        }
        let now = match &setup.now {
            None => DEFAULT_NOW,
            Some(t) => {
                let ts: k8s_openapi::jiff::Timestamp = t.parse().map_err(|e| Error::Invalid {
                    path: setup_path.clone(),
                    reason: format!(
                        "now: {t:?} is not an RFC 3339 time ({e}); write e.g. 2026-01-01T00:00:00Z"
                    ),
                })?;
                Duration::from_secs(u64::try_from(ts.as_second()).unwrap_or(0))
            }
        };
        let objects_path = dir.join("objects.yaml");
        let objects = if objects_path.exists() {
            documents(&objects_path)?
        } else {
            Vec::new()
        };
        let expected_path = dir.join("expected.yaml");
        let expected = if expected_path.exists() {
            let text = read(&expected_path)?;
            Some(serde_saphyr::from_str(&text).map_err(|e| yaml_error(&expected_path, e))?)
        } else {
            None
        };
        let optional = |file: &str| {
            let path = dir.join(file);
            if path.exists() {
                documents(&path)
            } else {
                Ok(Vec::new())
            }
        };
        Ok(Self {
            name,
            dir: dir.to_path_buf(),
            setup,
            now,
            objects,
            expected,
            asserts: optional("assert.yaml")?,
            errors: optional("error.yaml")?,
        })
    }

    /// Writes `outcome` as this case's `expected.yaml`.
    pub fn save(&self, outcome: &Outcome) -> Result<(), Error> {
        let path = self.dir.join("expected.yaml");
        std::fs::write(&path, outcome.to_yaml()).map_err(|source| Error::Read { path, source })
    }
}

/// The case folders under `dir` (those holding a `fixture.yaml`), sorted by name, and the
/// top-level `.yaml` files (definitions).
pub fn scan(dir: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut cases = Vec::new();
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.join("fixture.yaml").is_file() {
            cases.push(path);
        } else if path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
    cases.sort();
    files.sort();
    Ok((cases, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_renders_as_yaml_and_reads_back_equal() {
        let outcome = Outcome {
            outcome: "done".into(),
            writes: vec![Write {
                verb: "apply".into(),
                kind: "v1/ConfigMap".into(),
                namespace: "default".into(),
                name: "a-0".into(),
                subresource: None,
                field_manager: Some("m".into()),
                force: Some(true),
                body: Some(serde_json::json!({"data": {"on": "yes", "n": "1"}, "list": [1, "2"]})),
                error: None,
                step: 0,
            }],
            events: vec![],
        };
        let yaml = outcome.to_yaml();
        let back: Outcome = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, outcome, "{yaml}");
    }
}
