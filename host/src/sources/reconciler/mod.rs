//! Guests delivered as `Reconciler` objects (reconciled.dev/v1alpha1, `deploy/reconcilers.yaml`):
//! a tenant applies
//!
//! ```yaml
//! apiVersion: reconciled.dev/v1alpha1
//! kind: Reconciler
//! metadata: { name: stamp, namespace: team-a }
//! spec:
//!   module: { image: registry.example/team-a/stamp:1 }
//!   settings: { version: blue }
//! ```
//!
//! and guest `team-a/stamp` runs, as ServiceAccount `spec.serviceAccountName`, under the same
//! tenant policy as a labelled ConfigMap's guests (kinds, registries, quotas, CPU budget).
//! Each (module digest, settings) it serves is recorded as a numbered, immutable
//! `ReconcilerRevision` (see `revisions`), and its status says what runs and what is wrong
//! (see `status`).
//!
//! The pipeline: the Reconciler informer (`intake`) → `spec::read` → `spec::decide` (pure, under
//! the policy) → `dispatch`, which offers the module to the supervisor through the registry watch
//! a ConfigMap's `.wasm.ref` key uses, a read of the ConfigMap key as the ServiceAccount
//! (`module`), or a pinned revision → the supervisor's load → `report`, which writes revisions
//! and status from the replica that owns the guest.
//!
//! Where it may surprise:
//! - A spec the host refuses (a registry not allowed, a ServiceAccount the host may not act as,
//!   a revision that does not exist, a name a labelled ConfigMap already uses) changes nothing that serves: the revision serving keeps
//!   serving, and the status and one Warning Event say why the new spec is not taken.
//! - `spec.suspend` unloads the guest (its informers are released); revisions and status stay.
//! - `spec.workers` and `spec.limits` are capped by the tenant policy's; `Accepted` says what
//!   was cut.
//! - A settings-only edit is a new revision and a reload of the module serving, without a
//!   compile (an image's manifest is asked for again, and a tag that moved meanwhile is
//!   followed).
//! - Every replica loads every Reconciler's guest (as for ConfigMaps); only the holder of the
//!   guest's shard writes its status and revisions, and posts its Events.

pub mod crds;
mod dispatch;
mod impersonation;
mod intake;
mod module;
mod report;
mod revisions;
mod spec;
mod status;
mod table;

pub use report::Options;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::informer::factory::InformerFactory;
use crate::informer::{InformerKey, Namespaces, Scope};
use crate::selector::LabelSelector;
use crate::sources::configmap::references::TenantRefs;
use crate::sources::configmap::{LABEL, TenantPolicy};
use crate::sources::oci::Registry;
use crate::supervisor::Supervisor;

use dispatch::Dispatch;
use intake::Loop;
use table::{GROUP, VERSION};

/// Why the source could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An informer could not be set up.
    #[error("cannot watch Reconcilers: {0}")]
    Subscribe(String),
}

/// Watches Reconcilers (and their revisions, and the ConfigMaps they name) and feeds their
/// modules to the supervisor; writes their status and revisions where this replica owns them.
/// Dropping it stops all of that (the watches of named ConfigMaps with it); guests already
/// loaded keep running.
#[derive(Debug)]
pub struct ReconcilerSource {
    tasks: Vec<AbortHandle>,
}

impl Drop for ReconcilerSource {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl ReconcilerSource {
    /// Starts watching every namespace the policy serves. Must be called inside a tokio
    /// runtime.
    ///
    /// Where it may surprise: the host's readiness waits for the Reconciler informers like any
    /// other; without the CRDs of `deploy/reconcilers.yaml` installed it says so, and stays
    /// unready until they are.
    pub fn start(
        factory: &InformerFactory,
        supervisor: Arc<Supervisor>,
        policy: TenantPolicy,
        registry: Arc<Registry>,
        options: Options,
    ) -> Result<Self, Error> {
        let namespaces = match &policy.namespaces {
            Some(set) => Namespaces::Only(set.clone()),
            None => Namespaces::All,
        };
        let scope = Scope {
            namespaces: namespaces.clone(),
            ..Scope::default()
        };
        let subscribe = |key| {
            factory
                .subscribe(key, &[])
                .map_err(|e| Error::Subscribe(e.to_string()))
        };
        let reconcilers = subscribe(InformerKey::new(
            GROUP,
            VERSION,
            "Reconciler",
            scope.clone(),
        ))?;
        let revisions = subscribe(InformerKey::new(
            GROUP,
            VERSION,
            "ReconcilerRevision",
            scope,
        ))?;
        // The ConfigMap source's own informer (same key, so shared): a Reconciler may not take
        // the name of a labelled ConfigMap.
        let labelled = subscribe(InformerKey::new(
            "",
            "v1",
            "ConfigMap",
            Scope {
                namespaces,
                labels: LabelSelector::parse(&format!("{LABEL}=true"))
                    .map_err(|e| Error::Subscribe(e.to_string()))?,
                ..Scope::default()
            },
        ))?;
        // The same quotas as for ConfigMaps, whichever source starts first.
        supervisor.set_tenant_limits(crate::supervisor::TenantLimits {
            max_guests_per_namespace: Some(policy.max_guests_per_namespace),
            max_cached_bytes_per_namespace: policy.max_cached_bytes_per_namespace,
        });
        let table = Arc::new(Mutex::new(BTreeMap::new()));
        let supervisor_factory = supervisor.factory().clone();
        let report = tokio::spawn(report::run(report::Inputs {
            table: table.clone(),
            supervisor: supervisor.clone(),
            reconcilers: reconcilers.informer().store().clone(),
            revisions: revisions.informer().store().clone(),
            options,
        }))
        .abort_handle();
        let (pokes, poked) = mpsc::unbounded_channel();
        let source = Loop {
            dispatch: Dispatch {
                supervisor,
                policy,
                refs: TenantRefs::new(registry.clone()),
                registry,
                reads: Arc::new(Mutex::new(HashMap::new())),
                generations: std::sync::atomic::AtomicU64::new(0),
                table,
                labelled: labelled.informer().store().clone(),
                revisions: revisions.informer().store().clone(),
            },
            factory: supervisor_factory,
            watched: HashMap::new(),
            pokes,
            impersonation: Default::default(),
            awaiting: Default::default(),
            deferred: Default::default(),
            revisions_listed: false,
        };
        let run = tokio::spawn(source.run(reconcilers, revisions, labelled, poked)).abort_handle();
        Ok(Self {
            tasks: vec![run, report],
        })
    }
}
