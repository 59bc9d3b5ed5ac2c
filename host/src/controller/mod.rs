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
pub mod work_queue;
mod worker;

pub use reconciles::Counters;
pub use snapshot::Snapshot;

#[cfg(feature = "fault-injection")]
pub use worker::fault;

use std::collections::{HashMap, HashSet};

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::controller::fair_share::Share;
use crate::controller::gate::Gate;
use crate::controller::handlers::{Role, handle};
use crate::controller::plan::{Plan, PlannedKind, add_indexes, describe, subscribe, wait_synced};
use crate::controller::work_queue::{Priority, WorkQueue};
use crate::controller::worker::{Failures, supervise};
use crate::guest::bindings::Gvk;
use crate::guest::grant::{self, Grant};
use crate::guest::identity::ServiceAccount;
use crate::guest::imports::{Declared, GuestContext, Limits, Metrics};
use crate::guest::read_your_writes::Floors;
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
    #[error("guest {guest:?}: {reason}")]
    Refused {
        /// The guest.
        guest: String,
        /// Why, as the check said.
        reason: String,
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
    /// Concurrent reconciles (never two of one key) [1].
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

/// One version of the guest: its module and everything built from its declaration. Swapped
/// whole, so a reconcile always sees a module with the context it declared.
struct Version {
    module: Module,
    ctx: Arc<GuestContext>,
    informers: Vec<Arc<Informer>>,
    /// Roles per kind, read by the handler tasks on every event.
    roles: HashMap<Gvk, Vec<Role>>,
    for_kind: Gvk,
    loaded_at: std::time::SystemTime,
    shadow: Option<Arc<shadow::Shadow>>,
}

struct Link {
    informer: Arc<Informer>,
    task: AbortHandle,
}

/// What a reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reload {
    /// Informers the new version reads that the old one did not (started or joined), each
    /// shown as [`Gvk`] shows a kind (`v1/ConfigMap`, `apps/v1/Deployment`).
    pub added: Vec<String>,
    /// Informers the old version read that the new one does not (released, and stopped if
    /// nobody else holds them), spelled like `added`. A kind whose scope changed (another
    /// label selector) is in both.
    pub released: Vec<String>,
    /// Primary keys queued (low priority) for the new version to reconcile.
    pub requeued: usize,
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

    /// Swaps in `module` between reconciles, keeping the queue, the workers and every informer
    /// both versions read. Reconciles already running finish on the old version.
    ///
    /// The new version is described and checked against the grant first, and informers only it
    /// reads are started and must sync within `sync_timeout` before the swap; if anything fails
    /// the old version keeps serving untouched and the error says why. After the swap, informers
    /// only the old version read are released and every primary key is queued once, at low
    /// priority, for the new version.
    ///
    /// `admit` sees the informers the new version would read, synced, just before the swap; an
    /// `Err` from it is [`Error::Refused`] with its text, and the old version keeps serving.
    pub async fn reload(
        self: &Arc<Self>,
        factory: &InformerFactory,
        module: Module,
        sync_timeout: Duration,
        admit: impl FnOnce(&[Arc<Informer>]) -> Result<(), String>,
    ) -> Result<Reload, Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let plan = describe(&module, &self.settings).await?;
        // Make before break: subscribe to what is new and wait for it while the old version
        // still serves.
        let existing: HashMap<InformerKey, Arc<Informer>> = self
            .links
            .lock()
            .unwrap()
            .iter()
            .map(|(k, l)| (k.clone(), l.informer.clone()))
            .collect();
        let mut fresh = Vec::new();
        for k in &plan.kinds {
            if !existing.contains_key(&k.key) {
                fresh.push((k, subscribe(factory, &self.name, k)?));
            }
        }
        for (k, sub) in &fresh {
            wait_synced(&self.name, k, sub.informer(), sync_timeout).await?;
        }
        let reads: Vec<Arc<Informer>> = (plan.kinds.iter())
            .filter_map(|k| existing.get(&k.key).cloned())
            .chain(fresh.iter().map(|(_, sub)| sub.informer().clone()))
            .collect();
        admit(&reads).map_err(|reason| Error::Refused {
            guest: self.name.clone(),
            reason,
        })?;
        // Only now, with the new version validated, touch informers other guests share.
        for k in &plan.kinds {
            if let Some(informer) = existing.get(&k.key) {
                add_indexes(informer, &self.name, k)?;
            }
        }

        let floors: HashMap<Gvk, Arc<Floors>> = self
            .context()
            .declared
            .iter()
            .map(|(k, d)| (k.clone(), d.floors.clone()))
            .collect();
        let mut informers: HashMap<InformerKey, Arc<Informer>> = existing
            .into_iter()
            .filter(|(k, _)| plan.kinds.iter().any(|p| p.key == *k))
            .collect();
        for (k, sub) in &fresh {
            informers.insert(k.key.clone(), sub.informer().clone());
        }
        let by_kind: Vec<Arc<Informer>> = plan
            .kinds
            .iter()
            .map(|k| informers[&k.key].clone())
            .collect();
        let version = build_version_from(
            &self.settings,
            &self.client,
            module,
            &plan,
            &by_kind,
            &floors,
            self.metrics.clone(),
        );
        let mut version = version;
        version.shadow =
            attach_shadow(&self.settings, &version, &self.client, &self.shadow_counts).await;
        let digest = version.module.digest().to_string();
        if let Some(account) = &self.settings.identity {
            // Before the swap: no reconcile may run the new version until what it reads is
            // reviewed (the worker reads the version, then the hold).
            self.hold(Some(format!(
                "what ServiceAccount {account} may read with the new version is not reviewed yet"
            )));
        }
        *self.current.write().unwrap() = Arc::new(version);

        let mut report = Reload {
            added: fresh.iter().map(|(k, _)| k.kind.to_string()).collect(),
            ..Reload::default()
        };
        {
            let mut links = self.links.lock().unwrap();
            links.retain(|key, link| {
                let keep = plan.kinds.iter().any(|p| p.key == *key);
                if !keep {
                    link.task.abort();
                    report.released.push(key.name().to_string());
                }
                keep
            });
        }
        self.link(fresh.into_iter());
        report.requeued = self.enqueue_all(Priority::Low);
        tracing::info!(guest = %self.name, %digest, added = ?report.added, released = ?report.released, requeued = report.requeued, "guest reloaded");
        Ok(report)
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

fn build_version(
    settings: &Settings,
    client: &kube::Client,
    module: Module,
    plan: &Plan,
    subscriptions: &[crate::informer::Subscription],
    floors: &HashMap<Gvk, Arc<Floors>>,
    metrics: Arc<Metrics>,
) -> Version {
    let informers: Vec<Arc<Informer>> =
        subscriptions.iter().map(|s| s.informer().clone()).collect();
    build_version_from(settings, client, module, plan, &informers, floors, metrics)
}

/// The version for `plan`, with `informers[i]` serving `plan.kinds[i]`. Read-your-writes
/// floors of kinds both versions read carry over: a write the old version made must still be
/// visible to the new one's reads.
fn build_version_from(
    settings: &Settings,
    client: &kube::Client,
    module: Module,
    plan: &Plan,
    informers: &[Arc<Informer>],
    floors: &HashMap<Gvk, Arc<Floors>>,
    metrics: Arc<Metrics>,
) -> Version {
    let mut declared = HashMap::new();
    let mut roles = HashMap::new();
    for (k, informer) in plan.kinds.iter().zip(informers) {
        declared.insert(
            k.kind.clone(),
            Declared {
                informer: informer.clone(),
                floors: floors.get(&k.kind).cloned().unwrap_or_default(),
                indexes: k.indexes.clone(),
            },
        );
        roles.insert(k.kind.clone(), k.roles.clone());
    }
    let ctx = Arc::new(GuestContext {
        name: settings.name.clone(),
        client: client.clone(),
        identity: settings.identity.clone(),
        grant: settings.grant.clone(),
        declared,
        read_your_writes: plan.read_your_writes,
        limits: settings.limits,
        metrics,
        world: Default::default(),
        recorder: settings.recorder.as_ref().map(|r| r.0.clone()),
        taped: settings.shadow.is_some(),
    });
    Version {
        module,
        ctx,
        informers: informers.to_vec(),
        roles,
        for_kind: plan.for_kind.clone(),
        loaded_at: std::time::SystemTime::now(),
        shadow: None,
    }
}

/// The shadow of `settings` ready beside `live`, if there is one that can run.
async fn attach_shadow(
    settings: &Settings,
    live: &Version,
    client: &kube::Client,
    counts: &shadow::Counts,
) -> Option<Arc<shadow::Shadow>> {
    let prepared = shadow::prepare(settings, live, client).await?;
    counts.set_problem(&settings.name, prepared.as_ref().err().cloned());
    prepared.ok().map(Arc::new)
}
