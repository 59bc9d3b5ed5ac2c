//! What the source knows of each Reconciler, by guest name: written by `intake` as it judges
//! them, read by `report` as it writes their status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::spec::{From, Reconciler, Refusal};
use crate::controller::Settings;

/// The kinds' group and version.
pub(super) const GROUP: &str = "reconciled.dev";
pub(super) const VERSION: &str = "v1alpha1";

/// What the source tracks of each Reconciler, by guest name, for the reporter.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    pub(crate) reconciler: Reconciler,
    /// What the policy cut down, or why the spec is refused.
    pub(crate) verdict: Result<Vec<String>, Refusal>,
    pub(crate) suspended: bool,
    pub(crate) pinned: Option<u64>,
    pub(crate) history: usize,
    /// What was last submitted for it, to offer nothing twice.
    pub(super) submitted: Option<Submitted>,
    /// The ConfigMap of its namespace its module is read from, if it is (`spec.module` or a
    /// pinned revision's): watched, and read again when it changes.
    pub(crate) configmap: Option<String>,
    /// The refusal last posted as an Event, to post each once.
    pub(super) said: Option<String>,
}

/// What the source last asked the supervisor for, for one Reconciler.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Submitted {
    /// Unload: `spec.suspend`.
    Suspended,
    /// Run the module `from` names, as `settings` say (whom it acts as included), pulled with
    /// `pull_secret`.
    Run {
        from: From,
        settings: Box<Settings>,
        pull_secret: Option<String>,
    },
}

/// Every Reconciler the source knows, by guest name.
pub(super) type Table = Arc<Mutex<BTreeMap<String, Tracked>>>;
