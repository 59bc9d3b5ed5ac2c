//! Controller: one per loaded guest. It wires the guest's declaration to shared informers, maps
//! their events to primary keys (handlers), queues them (work queue) and runs workers that call
//! the guest's `reconcile`.
//!
//! No reconcile runs before every informer the guest depends on has synced; until then the
//! controller's status says why (syncing, forbidden with the rule to add, kind not found).

pub mod fair_share;
pub mod gate;
pub mod handlers;
pub(crate) mod plan;
pub mod reconciles;
pub mod shadow;
mod snapshot;
mod version;
pub mod work_queue;
mod worker;

pub use reconciles::Counters;
pub use snapshot::Snapshot;
pub use version::Reload;
use version::{Link, Version, attach_shadow, build_version};

#[cfg(feature = "fault-injection")]
pub use worker::fault;

use std::collections::{HashMap, HashSet};

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::controller::fair_share::Share;
use crate::controller::gate::Gate;
use crate::controller::handlers::handle;
use crate::controller::plan::{PlannedKind, describe, subscribe};
use crate::controller::work_queue::{Priority, WorkQueue};
use crate::controller::worker::{Failures, supervise};
use crate::guest::grant::{self, Grant};
use crate::guest::identity::ServiceAccount;
use crate::guest::imports::{GuestContext, Limits, Metrics};
use crate::guest::{Blame, CallError, Module};
use crate::informer::factory::InformerFactory;
use crate::informer::{Informer, InformerKey};

/// Why a guest could not be started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `describe()` failed.
    #[error("guest {guest:?}: describe() failed: {source}")]
    Describe {
        /// The guest.
        guest: String,
        /// The call failure.
        #[source]
        source: CallError,
    },
    /// The declaration exceeds the grant.
    #[error(transparent)]
    Grant(#[from] grant::Error),
    /// An informer the version reads (and the serving version does not) did not sync:
    /// forbidden, kind not found, a cluster-scoped kind in a confined scope, or slow.
    #[error("guest {guest:?}: its informer for {kind} did not sync: {reason}")]
    Informer {
        /// The guest.
        guest: String,
        /// The kind.
        kind: String,
        /// Why.
        reason: String,
    },
    /// The caller's admission check refused the new version (see [`Controller::reload`]).
    #[error("guest {guest:?}: {source}")]
    Refused {
        /// The guest.
        guest: String,
        /// Why, as the check said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The declaration is malformed.
    #[error("guest {guest:?}: {reason}")]
    Invalid {
        /// The guest.
        guest: String,
        /// What is wrong.
        reason: String,
    },
}

/// How the operator runs one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The guest's name: in logs, metrics, events and errors.
    pub name: String,
    /// What it may do.
    pub grant: Grant,
    /// Per-call limits.
    pub limits: Limits,
    /// Concurrent reconciles (never two of one key) \[1\].
    pub workers: usize,
    /// `Some(false)` turns read-your-writes off whatever the guest declares.
    pub read_your_writes: Option<bool>,
    /// The ServiceAccount its writes and uncached reads act as; `None`: the host's identity.
    /// The client handed to [`Controller::start`] must be the one acting as it.
    ///
    /// Where it may surprise: with one, the guest starts held, and is held again at each swap
    /// to a new version, until [`Controller::hold`] releases it: whoever runs it must first
    /// have checked that the ServiceAccount may read what the version reads from the cache.
    pub identity: Option<ServiceAccount>,
    /// Where its reconciles are recorded (`reconciled run --record`), if they are.
    pub recorder: Option<crate::guest::tape::RecorderRef>,
    /// A version to run beside this one with dry-run writes, compared (see [`shadow`]).
    pub shadow: Option<shadow::ShadowModule>,
    /// Environment variables its calls see (the host's, such as `RECONCILED_REPLICA`); none
    /// by default.
    pub environment: Vec<(String, String)>,
}

impl Settings {
    /// Defaults for a guest named `name`: full grant, default limits, one worker.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            grant: Grant::default(),
            limits: Limits::default(),
            workers: 1,
            read_your_writes: None,
            identity: None,
            recorder: None,
            shadow: None,
            environment: Vec::new(),
        }
    }
}

/// Why a guest is failing: for at least one key, the last reconcile trapped or its worker died.
///
/// Where it may surprise: a guest that returns an error from `reconcile` is not failing (it ran,
/// and said what went wrong); a key whose call trapped or whose worker panicked keeps the guest
/// failing until that key's reconcile next completes, even while other keys succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// The latest failure, naming its key.
    pub reason: String,
    /// Whose doing the latest failure was.
    pub blame: Blame,
    /// How many keys are failing.
    pub keys: usize,
    /// When the guest started failing (its oldest failing key).
    pub since: SystemTime,
}

/// A running guest: the queue, workers and counters that outlive any one version of its module,
/// and the version serving now.
pub struct Controller {
    name: String,
    settings: Settings,
    /// Its place in the host's fair share: every reconcile waits for a slot from it.
    share: Share,
    client: kube::Client,
    current: RwLock<Arc<Version>>,
    /// One subscription per informer the current version reads, each drained by a handler
    /// task. Kept across reloads when the informer is unchanged, so a reload neither replays
    /// the cache nor relists.
    links: Mutex<HashMap<InformerKey, Link>>,
    /// Serialises reloads: each is describe, subscribe, wait, swap, and two interleaved would
    /// release each other's informers.
    reloading: tokio::sync::Mutex<()>,
    queue: Arc<WorkQueue<String>>,
    metrics: Arc<Metrics>,
    in_flight: Mutex<HashSet<String>>,
    last_errors: Mutex<HashMap<String, String>>,
    held_back: Mutex<String>,
    /// Why reconciles are held whatever the informers say (the guest's identity lost a right
    /// it reads with); see [`Controller::hold`].
    hold: watch::Sender<Option<String>>,
    /// Whether this process may reconcile the guest at all (its shard's Lease, among
    /// replicas); closing it cancels reconciles in flight. See [`Gate`].
    gate: Arc<Gate>,
    counters: Counters,
    failures: Mutex<Failures>,
    /// The summary of `failures`: `Some` while the guest cannot run (see [`Failing`]); watched
    /// by the supervisor, which posts Events on a tenant's ConfigMap when it changes.
    failing: watch::Sender<Option<Failing>>,
    workers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    shadow_counts: shadow::Counts,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.queue.shutdown();
        for t in self.workers.lock().unwrap().drain(..) {
            t.abort();
        }
        for (_, link) in self.links.lock().unwrap().drain() {
            link.task.abort();
        }
    }
}

impl Controller {
    /// Describes the module, checks the grant, starts (or joins) informers, handlers and workers.
    /// Its reconciles run in slots of `share`'s scheduler ([`Share::alone`] for a guest that
    /// shares the host with nobody).
    ///
    /// Returns before the informers have synced: reconciles wait for them, and
    /// [`Controller::snapshot`] shows why they are held back. Reconciles also run only while
    /// `gate` is open ([`Gate::open`] for a host without replicas); informers sync either way.
    pub async fn start(
        factory: &InformerFactory,
        client: kube::Client,
        module: Module,
        settings: Settings,
        share: Share,
        gate: Arc<Gate>,
    ) -> Result<Arc<Self>, Error> {
        let plan = describe(&module, &settings).await?;
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
        let controller = Arc::new(Self {
            shadow_counts,
            name: settings.name.clone(),
            client,
            current: RwLock::new(Arc::new(version)),
            links: Mutex::new(HashMap::new()),
            reloading: tokio::sync::Mutex::new(()),
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
            counters: Counters::default(),
            failures: Mutex::new(Failures::default()),
            failing: watch::Sender::new(None),
            workers: Mutex::new(Vec::new()),
            settings,
        });
        controller.link(plan.kinds.iter().zip(subscriptions));
        let mut workers = Vec::new();
        for _ in 0..controller.settings.workers.max(1) {
            workers.push(tokio::spawn(supervise(Arc::downgrade(&controller))));
        }
        controller.workers.lock().unwrap().extend(workers);
        tracing::info!(guest = %controller.name, digest = %controller.digest(), kind = %plan.for_kind, read_your_writes = plan.read_your_writes, "guest started");
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
        factory: &InformerFactory,
        client: kube::Client,
        module: Module,
        settings: Settings,
        share: Share,
        gate: Arc<Gate>,
        timeout: Duration,
    ) -> Result<Arc<Self>, Error> {
        let controller = Self::start(factory, client, module, settings, share, gate).await?;
        for informer in controller.informers() {
            if let Err(e) = informer.wait_synced(timeout).await {
                controller.stop().await;
                let k = informer.key();
                return Err(Error::Informer {
                    guest: controller.name.clone(),
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
    /// Dropping the last `Arc` does the same without the wait; a worker or handler busy with an
    /// event holds the controller for that long, which is why unloading calls this instead.
    pub async fn stop(&self) {
        self.queue.shutdown();
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
        tracing::info!(guest = %self.name, "guest stopped");
    }

    /// Starts a handler task per subscription and records it, replacing any previous link
    /// for the same informer.
    fn link<'a>(
        self: &Arc<Self>,
        subscriptions: impl Iterator<Item = (&'a PlannedKind, crate::informer::Subscription)>,
    ) {
        let mut links = self.links.lock().unwrap();
        for (k, sub) in subscriptions {
            let informer = sub.informer().clone();
            let task =
                tokio::spawn(handle(Arc::downgrade(self), k.kind.clone(), sub)).abort_handle();
            if let Some(old) = links.insert(k.key.clone(), Link { informer, task }) {
                old.task.abort();
            }
        }
    }

    fn current(&self) -> Arc<Version> {
        self.current.read().unwrap().clone()
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the operator runs this guest.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// sha256 of the module serving now.
    pub fn digest(&self) -> String {
        self.current().module.digest().to_string()
    }

    /// The module serving now.
    pub fn module(&self) -> Module {
        self.current().module.clone()
    }

    /// Its place in the host's fair share.
    pub fn share(&self) -> &Share {
        &self.share
    }

    /// Reconcile counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The last failure of `key` (`namespace/name`), until it next reconciles successfully.
    pub fn last_error(&self, key: &str) -> Option<String> {
        self.last_errors.lock().unwrap().get(key).cloned()
    }

    /// The serving version's context (metrics, grant, declared kinds). A reload replaces it;
    /// the metrics inside are shared by all versions.
    pub fn context(&self) -> Arc<GuestContext> {
        self.current().ctx.clone()
    }

    /// Informers the serving version reads.
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        self.current().informers.clone()
    }

    /// Holds every reconcile (`Some(why)`) or lets them run again (`None`); returns whether
    /// that changed anything. Held, no reconcile starts and keys stay queued, events still
    /// queue them, and informers keep running: releasing needs no relist. A reconcile already
    /// running finishes.
    pub fn hold(&self, reason: Option<String>) -> bool {
        self.hold.send_if_modified(|h| {
            let changed = *h != reason;
            if changed {
                match &reason {
                    Some(why) => tracing::warn!(guest = %self.name, "reconciles held: {why}"),
                    None => tracing::info!(guest = %self.name, "reconciles resumed"),
                }
                *h = reason;
            }
            changed
        })
    }

    /// The gate this guest's reconciles pass through (see [`Gate`]).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Why reconciles are held by [`Controller::hold`], if they are.
    pub fn held(&self) -> Option<String> {
        self.hold.borrow().clone()
    }

    /// Why the guest cannot run, if it cannot (see [`Failing`]).
    pub fn failing(&self) -> Option<Failing> {
        self.failing.borrow().clone()
    }

    /// A receiver that sees every change of [`Controller::failing`].
    pub fn watch_failing(&self) -> watch::Receiver<Option<Failing>> {
        self.failing.subscribe()
    }

    /// Queues every primary key; returns how many.
    fn enqueue_all(&self, priority: Priority) -> usize {
        let v = self.current();
        let Some(d) = v.ctx.declared.get(&v.for_kind) else {
            return 0;
        };
        let all = d.informer.store().all();
        for o in &all {
            self.queue.add(o.key().to_string(), priority);
        }
        all.len()
    }

    /// Whether every informer this guest reads has synced, waiting up to `wait` for each. Logs
    /// why reconciles are held back whenever the reason changes.
    async fn synced(&self, wait: Duration) -> bool {
        for informer in self.informers() {
            if let Err(e) = informer.wait_synced(wait).await {
                let reason = e.to_string();
                let mut last = self.held_back.lock().unwrap();
                if *last != reason {
                    tracing::warn!(guest = %self.name, kind = %informer.key().name(), "reconciles held back: {reason}");
                    *last = reason;
                }
                return false;
            }
        }
        true
    }

    /// Why reconciles are held back, if they are: the first informer not synced, with its
    /// reason (forbidden with the rule to add, kind not found, still syncing).
    pub fn not_ready(&self) -> Option<String> {
        self.informers().iter().find_map(|i| {
            let st = i.status();
            (!st.state.is_synced()).then(|| format!("{}: {st}", i.key().name()))
        })
    }
}
