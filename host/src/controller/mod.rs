//! Controller: one per loaded guest. It wires the guest's declaration to shared informers, maps
//! their events to primary keys (handlers), queues them (work queue) and runs workers that call
//! the guest's `reconcile`.
//!
//! No reconcile runs before every informer the guest depends on has synced; until then the
//! controller's status says why (syncing, forbidden with the rule to add, kind not found).

mod candidate;
mod error;
mod failures;
pub mod fair_share;
pub mod gate;
pub mod handlers;
pub mod key_gates;
pub(crate) mod plan;
pub mod reconciles;
mod reload;
mod rescope;
mod settings;
pub mod shadow;
mod shared;
mod snapshot;
mod staging;
mod traffic;
mod version;
pub mod work_queue;
mod worker;

pub use candidate::{CandidateSnapshot, RolledBack, Route};
pub use error::Error;
pub use failures::Failing;
pub use reconciles::Counters;
pub use reload::Reload;
pub use settings::Settings;
pub use snapshot::Snapshot;

#[cfg(feature = "fault-injection")]
pub use worker::fault;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::guest::Module;
use crate::guest::imports::{GuestContext, Metrics};
use crate::guest::settings::GuestSettings;
use crate::informer::factory::InformerFactory;
use crate::informer::{Informer, InformerKey, Subscription};
use failures::Failures;
use fair_share::Share;
use handlers::handle;
use key_gates::{Gating, Tombstones};
use plan::{PlannedKind, describe, subscribe};
use shared::Shared;
use version::{Link, attach_shadow, build_version};
use work_queue::WorkQueue;
use worker::supervise;

/// A running guest: the state its tasks share (see `shared`), the tasks themselves, and the
/// links to the informers the serving version reads.
pub struct Controller {
    shared: Arc<Shared>,
    /// One subscription per informer the current version reads, each drained by a handler
    /// task. Kept across reloads when the informer is unchanged, so a reload neither replays
    /// the cache nor relists.
    links: Mutex<HashMap<InformerKey, Link>>,
    /// Serialises reloads: each is describe, subscribe, wait, swap, and two interleaved would
    /// release each other's informers.
    reloading: tokio::sync::Mutex<()>,
    workers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shared.queue.shutdown();
        for t in self.workers.lock().unwrap().drain(..) {
            t.abort();
        }
        for (_, link) in self.links.lock().unwrap().drain() {
            link.task.abort();
        }
    }
}

/// What a version declared in `describe`, as a revision records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The kind it reconciles, `group/version/Kind`.
    pub for_kind: String,
    /// Every kind it reads.
    pub kinds: Vec<String>,
    /// The namespaces its informers watch; `*` for every namespace (or a cluster-scoped kind).
    pub namespaces: Vec<String>,
}

impl Controller {
    /// Describes the module, checks the grant, starts (or joins) informers, handlers and workers.
    /// Its reconciles run in slots of `share`'s scheduler ([`Share::alone`] for a guest that
    /// shares the host with nobody).
    ///
    /// Returns before the informers have synced: reconciles wait for them, and
    /// [`Controller::snapshot`] shows why they are held back. Reconciles also run only while
    /// their gate is open (`gate`: [`Gate::open`](gate::Gate::open) for a host without
    /// replicas, or a gate per key, [`Gating::Keys`]); informers sync either way.
    ///
    /// With a gate per key, the informer of the reconciled kind watches only the shards held
    /// here, and follows them as they move (see [`key_gates`]).
    pub async fn start(
        factory: &Arc<InformerFactory>,
        client: kube::Client,
        module: Module,
        settings: Settings,
        share: Share,
        gate: impl Into<Gating>,
    ) -> Result<Arc<Self>, Error> {
        let (gate, keys) = match gate.into() {
            Gating::Whole(gate) => (gate, None),
            Gating::Keys { lead, keys } => (lead, Some(keys)),
        };
        let mut plan = describe(&module, &settings).await?;
        if let Some(keys) = &keys {
            plan.shard_for_kind(Some(keys.held_set()));
        }
        let mut subscriptions = Vec::new();
        for k in &plan.kinds {
            subscriptions.push(subscribe(factory, &settings.name, k)?);
        }
        let metrics = Arc::new(Metrics::default());
        let version = build_version(
            &settings,
            &client,
            module,
            &plan,
            &subscriptions,
            &HashMap::new(),
            metrics.clone(),
        );
        let shadow_counts = shadow::Counts::default();
        let mut version = version;
        version.shadow = attach_shadow(&settings, &version, &client, &shadow_counts).await;
        let shared = Arc::new(Shared {
            shadow_counts,
            name: settings.name.clone(),
            client,
            current: RwLock::new(Arc::new(version)),
            candidate: RwLock::new(None),
            queue: Arc::new(
                WorkQueue::new()
                    .with_low_priority_max_wait(share.scheduler().low_priority_max_wait()),
            ),
            share,
            metrics,
            in_flight: Mutex::new(HashSet::new()),
            last_errors: Mutex::new(HashMap::new()),
            held_back: Mutex::new(String::new()),
            hold: watch::Sender::new(settings.identity.as_ref().map(|account| {
                format!("what ServiceAccount {account} may read is not reviewed yet")
            })),
            gate,
            keys: keys.clone(),
            tombstones: Tombstones::default(),
            counters: Counters::default(),
            failures: Mutex::new(Failures::default()),
            failing: watch::Sender::new(None),
            traffic: traffic::Traffic::default(),
            settings,
        });
        let workers = (0..shared.settings.workers.max(1))
            .map(|_| tokio::spawn(supervise(Arc::downgrade(&shared))))
            .collect();
        let controller = Arc::new(Self {
            shared,
            links: Mutex::new(HashMap::new()),
            reloading: tokio::sync::Mutex::new(()),
            workers: Mutex::new(workers),
        });
        controller.link(plan.kinds.iter().zip(subscriptions));
        if let Some(keys) = keys {
            controller.follow_shards(factory.clone(), keys);
        }
        tracing::info!(guest = %controller.name(), digest = %controller.digest(), kind = %plan.for_kind, read_your_writes = plan.read_your_writes, "guest started");
        Ok(controller)
    }

    /// [`Controller::start`], then waits up to `timeout` for every informer to sync; if one
    /// does not (forbidden, kind not found, cluster-scoped kind in a confined scope, slow), the
    /// controller is stopped and the error names the informer and why.
    ///
    /// For guests whose author is not the operator (a tenant's): a declaration the host cannot
    /// serve is rejected at once, instead of a guest that serves nothing and holds `/readyz`
    /// down for everyone.
    pub async fn start_synced(
        factory: &Arc<InformerFactory>,
        client: kube::Client,
        module: Module,
        settings: Settings,
        share: Share,
        gate: impl Into<Gating>,
        timeout: Duration,
    ) -> Result<Arc<Self>, Error> {
        let controller = Self::start(factory, client, module, settings, share, gate).await?;
        for informer in controller.informers() {
            if let Err(e) = informer.wait_synced(timeout).await {
                controller.stop().await;
                let k = informer.key();
                return Err(Error::Informer {
                    guest: controller.name().to_string(),
                    kind: k.name().to_string(),
                    reason: e.to_string(),
                });
            }
        }
        Ok(controller)
    }

    /// Stops the guest: no reconcile starts any more, one in flight is cancelled at its next
    /// await (a running guest yields every 5 ms), handlers stop and the informers only this
    /// guest read are released. Returns once every worker has ended, so that a new controller
    /// for the same guest never reconciles alongside this one.
    ///
    /// Dropping the last `Arc` stops the tasks too, but does not wait for them: a worker busy
    /// with a reconcile runs on until its next await, which is why unloading calls this instead.
    pub async fn stop(&self) {
        self.shared.queue.shutdown();
        for (_, link) in self.links.lock().unwrap().drain() {
            link.task.abort();
        }
        let workers: Vec<tokio::task::JoinHandle<()>> =
            self.workers.lock().unwrap().drain(..).collect();
        for w in &workers {
            w.abort();
        }
        for w in workers {
            let _ = w.await;
        }
        tracing::info!(guest = %self.shared.name, "guest stopped");
    }

    /// Starts a handler task per subscription and records it, replacing any previous link
    /// for the same informer.
    fn link<'a>(
        self: &Arc<Self>,
        subscriptions: impl Iterator<Item = (&'a PlannedKind, Subscription)>,
    ) {
        let mut links = self.links.lock().unwrap();
        for (k, sub) in subscriptions {
            let informer = sub.informer().clone();
            let task = tokio::spawn(handle(Arc::downgrade(&self.shared), k.kind.clone(), sub))
                .abort_handle();
            if let Some(old) = links.insert(k.key.clone(), Link { informer, task }) {
                old.task.abort();
            }
        }
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How the operator runs this guest.
    pub fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// The settings the serving version reads (see [`Settings::guest_settings`]).
    pub fn guest_settings(&self) -> GuestSettings {
        self.shared.current().ctx.settings.clone()
    }

    /// sha256 of the module serving now.
    pub fn digest(&self) -> String {
        self.shared.current().module.digest().to_string()
    }

    /// The module serving now.
    pub fn module(&self) -> Module {
        self.shared.current().module.clone()
    }

    /// Its place in the host's fair share.
    pub fn share(&self) -> &Share {
        &self.shared.share
    }

    /// Reconcile counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// The last failure of `key` (`namespace/name`), until it next reconciles successfully.
    pub fn last_error(&self, key: &str) -> Option<String> {
        self.shared.last_errors.lock().unwrap().get(key).cloned()
    }

    /// The serving version's context (metrics, grant, declared kinds). A reload replaces it;
    /// the metrics inside are shared by all versions.
    pub fn context(&self) -> Arc<GuestContext> {
        self.shared.current().ctx.clone()
    }

    /// What the serving version declared: the kind it reconciles, each kind it reads (sorted),
    /// and the namespaces its informers watch (sorted; `*` for every namespace).
    pub fn declaration(&self) -> Declaration {
        let current = self.shared.current();
        let mut kinds: Vec<String> = current.ctx.declared.keys().map(|k| k.to_string()).collect();
        kinds.sort();
        let mut namespaces = std::collections::BTreeSet::new();
        for d in current.ctx.declared.values() {
            match &d.informer.key().scope.namespaces {
                crate::informer::Namespaces::All => {
                    namespaces.insert("*".to_string());
                }
                crate::informer::Namespaces::Only(set) => namespaces.extend(set.iter().cloned()),
            }
        }
        Declaration {
            for_kind: current.for_kind.to_string(),
            kinds,
            namespaces: namespaces.into_iter().collect(),
        }
    }

    /// Informers the serving version reads.
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        self.shared.informers()
    }

    /// Holds every reconcile (`Some(why)`) or lets them run again (`None`); returns whether
    /// that changed anything. Held, no reconcile starts and keys stay queued, events still
    /// queue them, and informers keep running: releasing needs no relist. A reconcile already
    /// running finishes.
    pub fn hold(&self, reason: Option<String>) -> bool {
        self.shared.hold(reason)
    }

    /// The gate this guest's reconciles pass through (see [`Gate`](gate::Gate)); with a gate per
    /// key, the lead gate, which no reconcile passes through (see [`Gating::Keys`]).
    pub fn gate(&self) -> &Arc<gate::Gate> {
        &self.shared.gate
    }

    /// Why this replica reconciles none of the guest's keys, if it does not: its shard is
    /// another replica's, or, with a gate per key, it holds no shard of the keys.
    pub fn standby(&self) -> Option<String> {
        match self.key_shards() {
            None => self.shared.gate.reason(),
            Some(set) if set.is_empty() => Some(
                "this replica holds no shard of the guest's keys (the other replicas reconcile them)"
                    .into(),
            ),
            Some(_) => None,
        }
    }

    /// With a gate per key, the uid ranges the reconciled kind's informer watches here now
    /// (which lag the shards held by the time a re-scope takes); `None` otherwise.
    pub fn key_shards(&self) -> Option<crate::informer::shard::ShardSet> {
        self.shared.keys.as_ref()?;
        self.for_shard()
    }

    /// Why reconciles are held by [`Controller::hold`], if they are.
    pub fn held(&self) -> Option<String> {
        self.shared.hold.borrow().clone()
    }

    /// Why the guest cannot run, if it cannot (see [`Failing`]).
    pub fn failing(&self) -> Option<Failing> {
        self.shared.failing.borrow().clone()
    }

    /// A receiver that sees every change of [`Controller::failing`].
    pub fn watch_failing(&self) -> watch::Receiver<Option<Failing>> {
        self.shared.failing.subscribe()
    }

    /// Why reconciles are held back, if they are: the first informer not synced, with its
    /// reason (forbidden with the rule to add, kind not found, still syncing).
    pub fn not_ready(&self) -> Option<String> {
        self.shared.not_ready()
    }
}
