//! Controller: one per loaded guest. It wires the guest's declaration to shared informers, maps
//! their events to primary keys (handlers), queues them (work queue) and runs workers that call
//! the guest's `reconcile`.
//!
//! No reconcile runs before every informer the guest depends on has synced; until then the
//! controller's status says why (syncing, forbidden with the rule to add, kind not found).

pub mod handlers;
pub mod reconciles;
pub mod work_queue;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::controller::handlers::Role;
use crate::controller::reconciles::{ReconcileResult, ReconcileStats, Reconciles};
use crate::controller::work_queue::{Priority, WorkQueue};
use crate::guest::bindings::{Consistency, Gvk, Mapping, Outcome, Request};
use crate::guest::grant::{self, Grant};
use crate::guest::imports::{Declared, GuestContext, Limits, Metrics};
use crate::guest::read_your_writes::Floors;
use crate::guest::{Blame, CallError, Module};
use crate::informer::factory::InformerFactory;
use crate::informer::{Event, Informer, InformerKey, Namespaces, Scope, Staleness, Status};
use crate::selector::LabelSelector;

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
        }
    }
}

/// Reconcile counters and the concurrency check.
#[derive(Debug, Default)]
pub struct Counters {
    /// Reconciles started.
    pub started: AtomicU64,
    /// Times a key was found already running when a worker started it. Must stay 0.
    pub concurrent_same_key: AtomicU64,
    /// Failed reconciles (errors, traps and worker panics) by [`Blame`], in `Blame as usize`
    /// order.
    errors: [AtomicU64; 3],
    /// Worker panics caught: the worker carried on and the key was retried.
    pub worker_panics: AtomicU64,
    /// What controller-runtime counts per controller: results, reconcile time, panics during a
    /// reconcile, busy workers.
    pub reconciles: Reconciles,
}

impl Counters {
    /// Failed reconciles blamed on `blame`, over every version of the guest.
    pub fn errors(&self, blame: Blame) -> u64 {
        self.errors[blame as usize].load(Ordering::Relaxed)
    }

    fn count_error(&self, blame: Blame) {
        self.errors[blame as usize].fetch_add(1, Ordering::Relaxed);
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

/// Failing keys, each with its failure; the summary is what [`Controller::failing`] shows.
#[derive(Debug, Default)]
struct Failures {
    keys: HashMap<String, (String, Blame, SystemTime)>,
    latest: Option<String>,
}

impl Failures {
    fn summary(&self) -> Option<Failing> {
        let latest = self.latest.as_ref().and_then(|k| self.keys.get(k))?;
        Some(Failing {
            reason: latest.0.clone(),
            blame: latest.1,
            keys: self.keys.len(),
            since: self.keys.values().map(|f| f.2).min().unwrap_or(latest.2),
        })
    }
}

/// A running guest: the queue, workers and counters that outlive any one version of its module,
/// and the version serving now.
pub struct Controller {
    name: String,
    settings: Settings,
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
    counters: Counters,
    failures: Mutex<Failures>,
    /// The summary of `failures`: `Some` while the guest cannot run (see [`Failing`]); watched
    /// by the supervisor, which posts Events on a tenant's ConfigMap when it changes.
    failing: watch::Sender<Option<Failing>>,
    workers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
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
}

struct Link {
    informer: Arc<Informer>,
    task: AbortHandle,
}

/// What a declaration needs: each kind once, with its informer key, indexes and roles.
struct Plan {
    kinds: Vec<PlannedKind>,
    for_kind: Gvk,
    read_your_writes: bool,
}

struct PlannedKind {
    kind: Gvk,
    key: InformerKey,
    indexes: Vec<String>,
    roles: Vec<Role>,
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

/// A snapshot for status pages and tests.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The guest's name.
    pub name: String,
    /// sha256 of the module serving.
    pub digest: String,
    /// When the serving version was swapped in.
    pub loaded_at: std::time::SystemTime,
    /// Each informer's kind, health and staleness.
    pub informers: Vec<(String, Status, Staleness)>,
    /// Reconciles that returned Ok (all versions).
    pub reconciles_ok: u64,
    /// Reconciles that returned an error (all versions).
    pub reconciles_failed: u64,
    /// Reconciles that trapped (all versions).
    pub traps: u64,
    /// Failed reconciles by blame: guest, host, cluster (all versions).
    pub errors_by_blame: [u64; 3],
    /// Worker panics caught (all versions).
    pub worker_panics: u64,
    /// Why the guest cannot run, if it cannot.
    pub failing: Option<Failing>,
    /// Why reconciles are held back (an informer not synced), if they are.
    pub held_back: Option<String>,
    /// Keys waiting.
    pub queued: usize,
    /// Reconcile results, time, panics and busy workers (all versions).
    pub reconciles: ReconcileStats,
    /// The work queue's client-go metrics.
    pub queue: crate::controller::work_queue::Stats,
    /// Workers: the most reconciles run at once.
    pub workers: usize,
}

impl Controller {
    /// Describes the module, checks the grant, starts (or joins) informers, handlers and workers.
    ///
    /// Returns before the informers have synced: reconciles wait for them, and
    /// [`Controller::snapshot`] shows why they are held back.
    pub async fn start(
        factory: &InformerFactory,
        client: kube::Client,
        module: Module,
        settings: Settings,
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
        let controller = Arc::new(Self {
            name: settings.name.clone(),
            client,
            current: RwLock::new(Arc::new(version)),
            links: Mutex::new(HashMap::new()),
            reloading: tokio::sync::Mutex::new(()),
            queue: Arc::new(WorkQueue::new()),
            metrics,
            in_flight: Mutex::new(HashSet::new()),
            last_errors: Mutex::new(HashMap::new()),
            held_back: Mutex::new(String::new()),
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
        timeout: Duration,
    ) -> Result<Arc<Self>, Error> {
        let controller = Self::start(factory, client, module, settings).await?;
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
    pub async fn reload(
        self: &Arc<Self>,
        factory: &InformerFactory,
        module: Module,
        sync_timeout: Duration,
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
        let digest = version.module.digest().to_string();
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

    /// A status snapshot.
    pub fn snapshot(&self) -> Snapshot {
        let m = &self.metrics;
        let v = self.current();
        Snapshot {
            name: self.name.clone(),
            digest: v.module.digest().to_string(),
            loaded_at: v.loaded_at,
            informers: v
                .informers
                .iter()
                .map(|i| (i.key().name().to_string(), i.status(), i.staleness()))
                .collect(),
            reconciles_ok: m.reconciles_ok.load(Ordering::Relaxed),
            reconciles_failed: m.reconciles_failed.load(Ordering::Relaxed),
            traps: m.traps.load(Ordering::Relaxed),
            errors_by_blame: Blame::ALL.map(|b| self.counters.errors(b)),
            worker_panics: self.counters.worker_panics.load(Ordering::Relaxed),
            failing: self.failing(),
            held_back: self.not_ready(),
            queued: self.queue.len(),
            reconciles: self.counters.reconciles.stats(),
            queue: self.queue.stats(),
            workers: self.settings.workers.max(1),
        }
    }

    /// Why the guest cannot run, if it cannot (see [`Failing`]).
    pub fn failing(&self) -> Option<Failing> {
        self.failing.borrow().clone()
    }

    /// A receiver that sees every change of [`Controller::failing`].
    pub fn watch_failing(&self) -> watch::Receiver<Option<Failing>> {
        self.failing.subscribe()
    }

    /// Marks `key` failing (an empty key: a worker, outside any reconcile).
    fn set_failing(&self, key: &str, reason: String, blame: Blame) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let since = failures.keys.get(key).map_or_else(SystemTime::now, |f| f.2);
        failures
            .keys
            .insert(key.to_string(), (reason, blame, since));
        failures.latest = Some(key.to_string());
        self.publish_failing(&failures);
    }

    /// `key` completed: it no longer fails, and neither does a worker (it ran this).
    fn clear_failing(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let before = failures.keys.len();
        failures.keys.remove(key);
        failures.keys.remove("");
        if failures.keys.len() == before {
            return;
        }
        if failures
            .latest
            .as_ref()
            .is_some_and(|k| !failures.keys.contains_key(k))
        {
            failures.latest = failures
                .keys
                .iter()
                .max_by_key(|(_, f)| f.2)
                .map(|(k, _)| k.clone());
        }
        self.publish_failing(&failures);
    }

    fn publish_failing(&self, failures: &Failures) {
        let next = failures.summary();
        self.failing.send_if_modified(|f| {
            let changed = *f != next;
            *f = next;
            changed
        });
    }

    /// Records a worker that panicked while reconciling `key`: logged and counted, the key
    /// retried with backoff, and the guest shown failing until a reconcile next completes.
    fn worker_panicked(&self, key: &str, message: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.counters.worker_panics.fetch_add(1, Ordering::Relaxed);
        self.counters.count_error(Blame::Host);
        let reason = format!(
            "a worker panicked reconciling {key}: {message}; the worker was restarted and the key will be retried"
        );
        let retry = self.queue.add_rate_limited(key.to_string());
        tracing::error!(guest = %self.name, %key, panic = %message, ?retry, blame = %Blame::Host, "worker panicked; restarted, key requeued");
        self.last_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), reason.clone());
        self.set_failing(key, reason, Blame::Host);
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

    async fn reconcile_one(&self, key: &str) -> ReconcileResult {
        let (namespace, name) = key.split_once('/').map_or(("", key), |(n, m)| (n, m));
        let request = Request {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        if !self.in_flight.lock().unwrap().insert(key.to_string()) {
            self.counters
                .concurrent_same_key
                .fetch_add(1, Ordering::Relaxed);
        }
        self.counters.started.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "fault-injection")]
        if fault::take_worker_panic(&self.name, key) {
            panic!("injected worker panic (fault-injection feature)");
        }
        // The whole call runs on the version current at its start, even if a reload swaps
        // another in meanwhile.
        let version = self.current();
        let started = Instant::now();
        let reconciled = version.module.reconcile(version.ctx.clone(), request).await;
        drop(version);
        self.in_flight.lock().unwrap().remove(key);
        let m = &self.metrics;
        let blame = reconciled.blame();
        if let Some(blame) = blame {
            self.counters.count_error(blame);
        }
        let error = match &reconciled.result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("{e:?} (blame: {})", blame.unwrap_or(Blame::Guest))),
            Err(e) => Some(e.to_string()),
        };
        match error {
            Some(e) => self.last_errors.lock().unwrap().insert(key.to_string(), e),
            None => self.last_errors.lock().unwrap().remove(key),
        };
        let took = started.elapsed();
        let usage = reconciled.usage;
        match reconciled.result {
            Ok(Ok(outcome)) => {
                Metrics::bump(&m.reconciles_ok);
                self.queue.forget(&key.to_string());
                self.clear_failing(key);
                if let Outcome::RequeueAfter(ms) = outcome {
                    self.queue.add_after(
                        key.to_string(),
                        Duration::from_millis(ms),
                        Priority::High,
                    );
                }
                tracing::debug!(guest = %self.name, %key, ?took, ?outcome, "reconciled");
                match outcome {
                    Outcome::RequeueAfter(0) => ReconcileResult::Requeue,
                    Outcome::RequeueAfter(_) => ReconcileResult::RequeueAfter,
                    Outcome::Done => ReconcileResult::Success,
                }
            }
            Ok(Err(e)) => {
                Metrics::bump(&m.reconciles_failed);
                // The guest ran and answered: it is not failing, whatever the error says.
                self.clear_failing(key);
                let retry = self.queue.add_rate_limited(key.to_string());
                let blame = blame.unwrap_or(Blame::Guest);
                tracing::warn!(guest = %self.name, %key, error = ?e, ?retry, %blame, api_wait = ?usage.api_wait, "reconcile failed");
                ReconcileResult::Error
            }
            Err(e) => {
                Metrics::bump(&m.traps);
                let retry = self.queue.add_rate_limited(key.to_string());
                let blame = e.blame();
                tracing::warn!(guest = %self.name, %key, error = %e, ?retry, %blame, guest_time = ?usage.guest_time(), api_wait = ?usage.api_wait, host_wait = ?usage.host_wait, "reconcile trapped");
                self.set_failing(key, format!("reconciling {key}: {e}"), blame);
                ReconcileResult::Error
            }
        }
    }
}

/// Describes `module`, checks the declaration against the grant and plans its informers.
async fn describe(module: &Module, settings: &Settings) -> Result<Plan, Error> {
    let name = &settings.name;
    let desc = module
        .describe(settings.limits)
        .await
        .map_err(|source| Error::Describe {
            guest: name.clone(),
            source,
        })?;
    // The declaration is guest-controlled: a value Kubernetes would refuse is rejected here,
    // named, before the grant check advises granting it or an informer is built from it.
    grant::validate(&desc).map_err(|e| Error::Invalid {
        guest: name.clone(),
        reason: format!("describe() declares an invalid value: {e}"),
    })?;
    settings.grant.check(name, &desc)?;
    let invalid = |reason: String| Error::Invalid {
        guest: name.clone(),
        reason,
    };

    // Declared namespaces, else the granted ones, else all.
    let namespaces = if !desc.namespaces.is_empty() {
        Namespaces::Only(desc.namespaces.iter().cloned().collect())
    } else if let Some(set) = &settings.grant.namespaces {
        Namespaces::Only(set.iter().cloned().collect::<BTreeSet<_>>())
    } else {
        Namespaces::All
    };
    let for_labels = LabelSelector::parse(&desc.label_selector)
        .map_err(|e| invalid(format!("label selector {:?}: {e}", desc.label_selector)))?;

    // Each kind once, with every role it plays.
    let mut roles: Vec<(Gvk, Role)> = vec![(desc.for_.clone(), Role::For)];
    roles.extend(desc.owns.iter().map(|k| (k.clone(), Role::Owner)));
    for w in &desc.watches {
        let role = match &w.mapping {
            Mapping::Owner => Role::Owner,
            Mapping::Label(l) => Role::Label(l.clone()),
            Mapping::GuestMap => Role::GuestMap,
        };
        roles.push((w.kind.clone(), role));
    }
    let mut kinds: Vec<PlannedKind> = Vec::new();
    for (kind, _) in &roles {
        if kinds.iter().any(|k| k.kind == *kind) {
            continue;
        }
        let scope = Scope {
            namespaces: namespaces.clone(),
            labels: if *kind == desc.for_ {
                for_labels.clone()
            } else {
                LabelSelector::default()
            },
            ..Scope::default()
        };
        kinds.push(PlannedKind {
            kind: kind.clone(),
            key: InformerKey::new(&kind.group, &kind.version, &kind.kind, scope),
            indexes: desc
                .field_indexes
                .iter()
                .filter(|i| i.kind == *kind)
                .map(|i| i.path.clone())
                .collect(),
            roles: roles
                .iter()
                .filter(|(k, _)| k == kind)
                .map(|(_, r)| r.clone())
                .collect(),
        });
    }
    Ok(Plan {
        kinds,
        for_kind: desc.for_.clone(),
        read_your_writes: settings.read_your_writes.unwrap_or(true)
            && desc.consistency == Consistency::ReadYourWrites,
    })
}

fn subscribe(
    factory: &InformerFactory,
    guest: &str,
    k: &PlannedKind,
) -> Result<crate::informer::Subscription, Error> {
    let indexes: Vec<&str> = k.indexes.iter().map(String::as_str).collect();
    factory
        .subscribe(k.key.clone(), &indexes)
        .map_err(|e| Error::Invalid {
            guest: guest.to_string(),
            reason: e.to_string(),
        })
}

async fn wait_synced(
    guest: &str,
    k: &PlannedKind,
    informer: &Informer,
    timeout: Duration,
) -> Result<(), Error> {
    informer
        .wait_synced(timeout)
        .await
        .map_err(|e| Error::Informer {
            guest: guest.to_string(),
            kind: k.kind.to_string(),
            reason: e.to_string(),
        })
}

/// Adds the indexes a new version declares to an informer it keeps.
fn add_indexes(informer: &Informer, guest: &str, k: &PlannedKind) -> Result<(), Error> {
    for idx in &k.indexes {
        match informer.add_field_index(idx) {
            Ok(()) | Err(crate::informer::store::Error::DuplicateIndex(_)) => {}
            Err(e) => {
                return Err(Error::Invalid {
                    guest: guest.to_string(),
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(())
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
        grant: settings.grant.clone(),
        declared,
        read_your_writes: plan.read_your_writes,
        limits: settings.limits,
        metrics,
    });
    Version {
        module,
        ctx,
        informers: informers.to_vec(),
        roles,
        for_kind: plan.for_kind.clone(),
        loaded_at: std::time::SystemTime::now(),
    }
}

/// Maps one subscription's notifications to primary keys, with the roles the serving version
/// gives this kind.
async fn handle(
    controller: std::sync::Weak<Controller>,
    kind: Gvk,
    mut sub: crate::informer::Subscription,
) {
    while let Some(n) = sub.recv().await {
        let Some(c) = controller.upgrade() else {
            return;
        };
        if matches!(n.event, Event::Resync) {
            c.enqueue_all(Priority::Low);
            continue;
        }
        let version = c.current();
        let Some(roles) = version.roles.get(&kind) else {
            // A reload dropped this kind; the task is being aborted.
            continue;
        };
        let priority = handlers::priority(&n);
        for role in roles {
            for obj in handlers::objects(&n) {
                if *role == Role::GuestMap {
                    let json = String::from_utf8_lossy(obj.json()).into_owned();
                    match version
                        .module
                        .map(version.ctx.clone(), kind.clone(), json)
                        .await
                    {
                        Ok(requests) => {
                            // Guest-controlled: only keys that could name a primary are
                            // queued; the rest are dropped with one bounded warning per call.
                            let mapped = version.ctx.map_keys(&version.for_kind, &requests);
                            if let Some(dropped) = &mapped.dropped {
                                tracing::warn!(guest = %c.name, key = obj.key(), "{dropped}");
                            }
                            for key in mapped.keys {
                                c.queue.add(key, priority);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(guest = %c.name, key = obj.key(), error = %e, "map() failed; object not mapped")
                        }
                    }
                    continue;
                }
                for key in handlers::primaries(role, &version.for_kind, obj) {
                    c.queue.add(key, priority);
                }
            }
        }
    }
}

/// One worker, restarted whenever it panics, until the controller stops.
///
/// A panic while reconciling a key is caught around that key (in [`work`]), so the key is
/// known, retried and reported; this loop catches whatever else might panic in a worker, so
/// that a guest never silently loses a worker.
async fn supervise(controller: std::sync::Weak<Controller>) {
    loop {
        match AssertUnwindSafe(work(controller.clone()))
            .catch_unwind()
            .await
        {
            Ok(()) => return,
            Err(panic) => {
                let Some(c) = controller.upgrade() else {
                    return;
                };
                let message = panic_message(&*panic);
                c.counters.worker_panics.fetch_add(1, Ordering::Relaxed);
                c.counters.count_error(Blame::Host);
                tracing::error!(guest = %c.name, panic = %message, "worker panicked outside a reconcile; restarted");
                c.set_failing(
                    "",
                    format!("a worker panicked: {message}; it was restarted"),
                    Blame::Host,
                );
            }
        }
    }
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// One worker: waits for sync, then reconciles keys until the controller stops.
///
/// Holds the controller only for one step at a time, so that dropping it (unloading the guest)
/// is never blocked by a worker waiting for an informer that will not sync.
async fn work(controller: std::sync::Weak<Controller>) {
    let queue = loop {
        let Some(c) = controller.upgrade() else {
            return;
        };
        if c.synced(Duration::from_secs(1)).await {
            tracing::info!(guest = %c.name, "informers synced; reconciling");
            break c.queue.clone();
        }
        drop(c);
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    while let Some(key) = queue.get().await {
        let Some(c) = controller.upgrade() else {
            return;
        };
        let _active = c.counters.reconciles.active();
        let started = Instant::now();
        let result = match AssertUnwindSafe(c.reconcile_one(&key)).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => {
                c.worker_panicked(&key, &panic_message(&*panic));
                c.counters.reconciles.panicked();
                ReconcileResult::Error
            }
        };
        c.counters.reconciles.finished(result, started.elapsed());
        queue.done(&key);
    }
}

/// Fault injection for tests of the worker supervision: nothing a guest can reach.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use std::sync::Mutex;

    static WORKER_PANICS: Mutex<Vec<(String, String, u32)>> = Mutex::new(Vec::new());

    /// Makes the next `times` reconciles of `key` by guest `guest` panic in the host's worker,
    /// before the guest is called.
    pub fn panic_worker(guest: &str, key: &str, times: u32) {
        WORKER_PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((guest.to_string(), key.to_string(), times));
    }

    /// Forgets every injected panic.
    pub fn clear() {
        WORKER_PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub(super) fn take_worker_panic(guest: &str, key: &str) -> bool {
        let mut all = WORKER_PANICS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = all.iter().position(|(g, k, _)| g == guest && k == key) else {
            return false;
        };
        all[i].2 -= 1;
        if all[i].2 == 0 {
            all.remove(i);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(f: &mut Failures, key: &str, secs: u64) {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        f.keys
            .insert(key.into(), (format!("{key} trapped"), Blame::Guest, at));
        f.latest = Some(key.into());
    }

    #[test]
    fn a_guest_fails_while_any_key_fails_and_shows_the_latest_failure() {
        let mut f = Failures::default();
        assert_eq!(f.summary(), None);
        fail(&mut f, "ns/a", 10);
        fail(&mut f, "ns/b", 20);
        let s = f.summary().unwrap();
        assert_eq!((s.reason.as_str(), s.keys), ("ns/b trapped", 2));
        assert_eq!(
            s.since,
            SystemTime::UNIX_EPOCH + Duration::from_secs(10),
            "failing since the oldest failing key"
        );
    }

    #[test]
    fn panic_messages_are_read_from_str_and_string_payloads() {
        let p = std::panic::catch_unwind(|| panic!("static")).unwrap_err();
        assert_eq!(panic_message(&*p), "static");
        let p = std::panic::catch_unwind(|| panic!("formatted {}", 1)).unwrap_err();
        assert_eq!(panic_message(&*p), "formatted 1");
    }
}
