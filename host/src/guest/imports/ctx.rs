//! What every call of one guest shares, built once per loaded version: its identity, client,
//! grant, declared kinds, limits and counters (wasmtime-wasi's `…Ctx`; each call's
//! [`HostState`](super::view::HostState) borrows it).

use std::collections::HashMap;
use std::sync::Arc;

use super::access::{Access, check_access};
use super::limits::Limits;
use super::metrics::Metrics;
use crate::guest::bindings::{GuestError, Gvk};
use crate::guest::grant::Grant;
use crate::guest::read_your_writes::Floors;
use crate::informer::Informer;
use crate::informer::discovery::Resource;

/// A kind the guest declared, with its informer and resolved resource.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The shared informer serving cache reads of this kind.
    pub informer: Arc<Informer>,
    /// This guest's read-your-writes floors for this kind.
    pub floors: Arc<Floors>,
    /// Field indexes this guest declared for this kind. The informer's store is shared and may
    /// hold other guests' indexes too; a guest may match only on its own.
    pub indexes: Vec<String>,
}

/// What every call of one guest shares: its identity, client, grant and declared kinds.
#[derive(Clone)]
pub struct GuestContext {
    /// The guest's name (from the host config).
    pub name: String,
    /// The client writes and uncached reads go through: the host's, or one impersonating
    /// `identity`.
    pub client: kube::Client,
    /// The ServiceAccount the guest acts as, if not the host: a 403 then names it and the rule
    /// to add.
    pub identity: Option<crate::guest::identity::ServiceAccount>,
    /// What the operator granted.
    pub grant: Grant,
    /// Kinds from `describe`.
    pub declared: HashMap<Gvk, Declared>,
    /// Whether cache reads honour read-your-writes (the guest's choice, unless the host
    /// config turns it off).
    pub read_your_writes: bool,
    /// Per-call limits.
    pub limits: Limits,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The guest's clocks and randomness: the host's, or fixed for a repeatable call.
    pub world: crate::guest::world::World,
    /// The settings this version was given, which the `settings` import returns.
    pub settings: crate::guest::settings::GuestSettings,
    /// Where this guest's reconciles are recorded, if they are (`reconciled run --record`).
    pub recorder: Option<Arc<crate::guest::tape::Recorder>>,
    /// Whether each reconcile returns its recording even without a recorder (a guest with a
    /// shadow version, whose writes are compared with the shadow's).
    pub taped: bool,
}

impl std::fmt::Debug for GuestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestContext")
            .field("name", &self.name)
            .field("grant", &self.grant)
            .field(
                "declared",
                &self
                    .declared
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl GuestContext {
    /// A context for unit tests: guest `g`, nothing declared, a full grant, and a client of a
    /// server that is not there (loopback port 1, which refuses every connection). Must be
    /// called inside a tokio runtime.
    #[cfg(test)]
    pub(crate) fn unconnected(taped: bool) -> Self {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Self {
            name: "g".into(),
            client: kube::Client::try_from(config).unwrap(),
            identity: None,
            grant: Grant::default(),
            declared: HashMap::new(),
            read_your_writes: false,
            limits: Limits::default(),
            metrics: Arc::default(),
            world: Default::default(),
            settings: Default::default(),
            recorder: None,
            taped,
        }
    }

    /// The declared kind, or the `not-declared` error the guest should see.
    ///
    /// Every import calls this: it hashes the guest's `Gvk` as it is, building nothing.
    pub fn declared(&self, kind: &Gvk) -> Result<&Declared, GuestError> {
        self.declared.get(kind).ok_or_else(|| {
            GuestError::NotDeclared(format!(
                "kind {kind} is not declared by guest {:?}: add it to `for`, `owns` or `watches` in describe()",
                self.name
            ))
        })
    }

    /// The resolved resource of a declared kind, borrowed from its informer (it never changes
    /// once resolved).
    pub fn resource(&self, kind: &Gvk) -> Result<(&Resource, &Declared), GuestError> {
        let d = self.declared(kind)?;
        match d.informer.resource() {
            Some(r) => Ok((r, d)),
            None => Err(GuestError::Other(format!(
                "kind {kind} is not resolved yet: {}",
                d.informer.status()
            ))),
        }
    }

    /// Authorizes one call on `kind` in `namespace` (and on object `name`, if any): the kind
    /// is declared, the namespace and name are well-formed, and the grant allows them for this
    /// resource's scope. Every import goes through here.
    pub fn authorize(
        &self,
        kind: &Gvk,
        namespace: &str,
        name: Option<&str>,
        access: Access,
    ) -> Result<(&Resource, &Declared), GuestError> {
        let (resource, declared) = self.resource(kind)?;
        check_access(&self.name, &self.grant, resource, namespace, name, access)?;
        Ok((resource, declared))
    }
}
