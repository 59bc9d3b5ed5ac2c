//! What tenants' guests may do: the host config's `[tenants]`, and the settings it gives each
//! guest a tenant delivers.

use std::collections::{BTreeMap, BTreeSet};

use crate::controller::Settings;
use crate::guest::grant::Grant;
use crate::guest::identity::{ANNOTATION, DEFAULT_SERVICE_ACCOUNT, ServiceAccount};
use crate::guest::imports::Limits;

/// What tenants' guests may do, and which namespaces may deliver them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantPolicy {
    /// Namespaces whose labelled ConfigMaps are loaded; `None` = every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    /// Kinds a tenant guest may declare and write, as in a [`Grant`]: `apiVersion/Kind`,
    /// `apiVersion/*` or `*`.
    ///
    /// Where it may surprise: empty by default, and empty means a tenant's guest loads
    /// nothing (each is rejected, naming the kind to add here). A wildcard never allows RBAC
    /// kinds, Secrets or Pods ([`crate::guest::grant::named_only`]): list them by name.
    pub kinds: BTreeSet<String>,
    /// Concurrent reconciles per tenant guest \[1\].
    pub workers: usize,
    /// Per-call limits.
    pub limits: Limits,
    /// Largest module accepted once unpacked [32 MiB].
    pub max_module_bytes: usize,
    /// More than confinement, by the delivering namespace: `[tenants.grants.team-a]` with
    /// `namespaces = ["team-a", "shared"]`, say. The guest's own namespace is always included;
    /// `namespaces` omitted means the guest's own only (never "all", which would let a tenant
    /// reach cluster-scoped kinds), and `kinds` omitted means the policy's `kinds` (a
    /// namespace's `kinds` replaces them; it does not add to them).
    pub grants: BTreeMap<String, Grant>,
    /// Tenant guests one namespace may have serving or loading, over all its ConfigMaps \[20\].
    /// Rejected guests do not count, and a new version of a serving guest never waits. A guest
    /// past it is rejected, with an Event saying so, and loads by itself once another guest of
    /// the namespace is removed or rejected.
    pub max_guests_per_namespace: usize,
    /// Cache bytes one namespace's guests may be attributed, over all its ConfigMaps \[none\]:
    /// each informer's objects split evenly between the guests that read it. A load whose
    /// informers would add bytes past it is rejected once they have synced, and released.
    pub max_cached_bytes_per_namespace: Option<u64>,
    /// Least time between two loads of one guest, in milliseconds \[1000\]. Edits arriving
    /// sooner wait, and collapse into one load of the latest: a tenant editing in a loop gets
    /// one compile a second, not one per edit. Unloads never wait.
    pub min_reload_interval_ms: u64,
    /// The ServiceAccount of its own namespace a tenant's guests act as [reconciled-guest]:
    /// their writes and uncached reads impersonate it, and their cache reads are reviewed as
    /// it. A ConfigMap may name another one of its namespace in the annotation
    /// `reconciled.dev/service-account`.
    pub service_account: String,
    /// CPU each tenant namespace's guests may use per minute, compile time included, in
    /// milliseconds \[unlimited\]. A tenant over it has its reconciles delayed (never failed)
    /// until the budget refills, with a Warning Event when that starts; see
    /// [`crate::controller::fair_share`].
    pub cpu_budget_ms_per_minute: Option<u64>,
    /// Registries (`host` or `host:port`, exactly as references name them) tenants' `.wasm.ref`
    /// keys may pull from \[none\]. The host makes those requests from inside the cluster, so
    /// this list is what keeps a tenant from pointing it at any address it can reach.
    pub registries: BTreeSet<String>,
    /// Load tenants' `Reconciler` objects (reconciled.dev/v1alpha1) as well as their labelled
    /// ConfigMaps \[false\]. Needs the CRDs of `deploy/reconcilers.yaml`: without them the
    /// host stays unready, naming the kind it cannot watch, which is why a host config must
    /// turn it on (a host upgraded before the CRDs are applied keeps serving).
    pub reconcilers: bool,
    /// Each tenant namespace's share of the host's CPU when tenants compete [1 each];
    /// `[tenants.weights]` with `team-a = 2` gives team-a twice the share of a tenant of weight 1.
    pub weights: BTreeMap<String, u32>,
}

impl Default for TenantPolicy {
    fn default() -> Self {
        Self {
            namespaces: None,
            kinds: BTreeSet::new(),
            workers: 1,
            limits: Limits::default(),
            max_module_bytes: 32 << 20,
            grants: BTreeMap::new(),
            max_guests_per_namespace: 20,
            max_cached_bytes_per_namespace: None,
            min_reload_interval_ms: 1000,
            service_account: DEFAULT_SERVICE_ACCOUNT.into(),
            cpu_budget_ms_per_minute: None,
            weights: BTreeMap::new(),
            registries: BTreeSet::new(),
            reconcilers: false,
        }
    }
}

impl TenantPolicy {
    /// The settings of guest `name` delivered in `namespace`: confined to it and no uncached
    /// reads, unless [`TenantPolicy::grants`] says more for that namespace; acting as the
    /// policy's ServiceAccount of that namespace.
    pub fn settings(&self, name: &str, namespace: &str) -> Settings {
        let account = ServiceAccount {
            namespace: namespace.to_string(),
            // Checked when the host config was read (see `Config::load`).
            name: self.service_account.clone(),
        };
        self.settings_as(name, namespace, account)
    }

    /// [`TenantPolicy::settings`], acting as `account`.
    pub fn settings_as(&self, name: &str, namespace: &str, account: ServiceAccount) -> Settings {
        let mut grant = Grant {
            namespaces: Some([namespace.to_string()].into()),
            kinds: Some(self.kinds.clone()),
            uncached_reads: false,
        };
        if let Some(more) = self.grants.get(namespace) {
            if let (Some(ns), Some(extra)) = (&mut grant.namespaces, &more.namespaces) {
                ns.extend(extra.iter().cloned());
            }
            if more.kinds.is_some() {
                grant.kinds = more.kinds.clone();
            }
            grant.uncached_reads = more.uncached_reads;
        }
        Settings {
            name: name.to_string(),
            grant,
            limits: self.limits,
            workers: self.workers,
            read_your_writes: None,
            // A Reconciler may ask for it (`spec.shardKeys`); a labelled ConfigMap cannot.
            shard_keys: false,
            identity: Some(account),
            recorder: None,
            shadow: None,
            environment: Vec::new(),
            // The module's `<stem>.settings.json` key, if it has one, sets them.
            guest_settings: Default::default(),
            // A labelled ConfigMap swaps each new module in at once; a Reconciler may roll out.
            rollout: Default::default(),
        }
    }
}

/// A ConfigMap's ServiceAccount annotation that names no ServiceAccount its guests could act
/// as: every module of that ConfigMap is refused with it.
#[derive(Debug, thiserror::Error)]
#[error(
    "annotation {ANNOTATION} names no usable ServiceAccount of namespace {namespace}: {source}; name one (the guest acts as it), or remove the annotation to use {default:?}"
)]
pub(crate) struct BadAccount {
    /// The ConfigMap's namespace.
    pub(super) namespace: String,
    /// The policy's ServiceAccount, used without the annotation.
    pub(super) default: String,
    /// Why the name is not usable.
    #[source]
    pub(super) source: crate::guest::identity::Error,
}
