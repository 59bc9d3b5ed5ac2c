//! Controller: one per loaded guest. It wires the guest's declaration to shared informers, maps
//! their events to primary keys (handlers), queues them (work queue) and runs workers that call
//! the guest's `reconcile`.
//!
//! No reconcile runs before every informer the guest depends on has synced; until then the
//! controller's status says why (syncing, forbidden with the rule to add, kind not found).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;

use crate::bindings::{Consistency, Gvk, Mapping, Outcome, Request};
use crate::factory::InformerFactory;
use crate::grant::{self, Grant};
use crate::guest::{CallError, Module};
use crate::handlers::{self, Role};
use crate::imports::{Declared, GuestContext, Limits, Metrics, gvk_key};
use crate::informer::{Event, Informer, InformerKey, Namespaces, Scope, Status};
use crate::read_your_writes::Floors;
use crate::selector::LabelSelector;
use crate::work_queue::{Priority, WorkQueue};

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
#[derive(Debug, Clone)]
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
}

/// A running guest.
pub struct Controller {
    name: String,
    module: RwLock<Module>,
    ctx: Arc<GuestContext>,
    queue: Arc<WorkQueue<String>>,
    informers: Vec<Arc<Informer>>,
    in_flight: Mutex<HashSet<String>>,
    last_errors: Mutex<HashMap<String, String>>,
    held_back: Mutex<String>,
    counters: Counters,
    tasks: Mutex<Vec<AbortHandle>>,
    for_kind: Gvk,
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
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
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
    /// Each informer's kind and health.
    pub informers: Vec<(String, Status)>,
    /// Reconciles that returned Ok.
    pub reconciles_ok: u64,
    /// Reconciles that returned an error.
    pub reconciles_failed: u64,
    /// Reconciles that trapped.
    pub traps: u64,
    /// Keys waiting.
    pub queued: usize,
}

impl Controller {
    /// Describes the module, checks the grant, starts (or joins) informers, handlers and workers.
    pub async fn start(
        factory: &InformerFactory,
        client: kube::Client,
        module: Module,
        settings: Settings,
    ) -> Result<Arc<Self>, Error> {
        let name = settings.name.clone();
        let desc = module
            .describe(settings.limits)
            .await
            .map_err(|source| Error::Describe {
                guest: name.clone(),
                source,
            })?;
        settings.grant.check(&name, &desc)?;
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
        let mut declared: HashMap<String, Declared> = HashMap::new();
        let mut subscriptions = Vec::new();
        let mut informers = Vec::new();
        for (kind, _) in &roles {
            let key = gvk_key(kind);
            if declared.contains_key(&key) {
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
            let indexes: Vec<&str> = desc
                .field_indexes
                .iter()
                .filter(|i| i.kind == *kind)
                .map(|i| i.path.as_str())
                .collect();
            let ikey = InformerKey::new(&kind.group, &kind.version, &kind.kind, scope);
            let sub = factory
                .subscribe(ikey, &indexes)
                .map_err(|e| invalid(e.to_string()))?;
            informers.push(sub.informer().clone());
            declared.insert(
                key,
                Declared {
                    informer: sub.informer().clone(),
                    floors: Arc::new(Floors::default()),
                    indexes: indexes.iter().map(|s| s.to_string()).collect(),
                },
            );
            let kind_roles: Vec<Role> = roles
                .iter()
                .filter(|(k, _)| k == kind)
                .map(|(_, r)| r.clone())
                .collect();
            subscriptions.push((kind.clone(), kind_roles, sub));
        }

        let read_your_writes = settings.read_your_writes.unwrap_or(true)
            && desc.consistency == Consistency::ReadYourWrites;
        let ctx = Arc::new(GuestContext {
            name: name.clone(),
            client,
            grant: settings.grant.clone(),
            declared,
            read_your_writes,
            limits: settings.limits,
            metrics: Metrics::default(),
        });
        let controller = Arc::new(Self {
            name: name.clone(),
            module: RwLock::new(module),
            ctx,
            queue: Arc::new(WorkQueue::new()),
            informers,
            in_flight: Mutex::new(HashSet::new()),
            last_errors: Mutex::new(HashMap::new()),
            held_back: Mutex::new(String::new()),
            counters: Counters::default(),
            tasks: Mutex::new(Vec::new()),
            for_kind: desc.for_.clone(),
        });
        let mut tasks = Vec::new();
        for (kind, kind_roles, sub) in subscriptions {
            tasks.push(
                tokio::spawn(handle(Arc::downgrade(&controller), kind, kind_roles, sub))
                    .abort_handle(),
            );
        }
        for _ in 0..settings.workers.max(1) {
            tasks.push(tokio::spawn(work(Arc::downgrade(&controller))).abort_handle());
        }
        controller.tasks.lock().unwrap().extend(tasks);
        tracing::info!(guest = %name, digest = %controller.digest(), kind = %gvk_key(&controller.for_kind), read_your_writes, "guest started");
        Ok(controller)
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// sha256 of the module serving now.
    pub fn digest(&self) -> String {
        self.module.read().unwrap().digest().to_string()
    }

    /// Reconcile counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The last failure of `key` (`namespace/name`), until it next reconciles successfully.
    pub fn last_error(&self, key: &str) -> Option<String> {
        self.last_errors.lock().unwrap().get(key).cloned()
    }

    /// The guest's shared context (metrics, grant, declared kinds).
    pub fn context(&self) -> &Arc<GuestContext> {
        &self.ctx
    }

    /// A status snapshot.
    pub fn snapshot(&self) -> Snapshot {
        let m = &self.ctx.metrics;
        Snapshot {
            name: self.name.clone(),
            digest: self.digest(),
            informers: self
                .informers
                .iter()
                .map(|i| (i.key().kind.clone(), i.status()))
                .collect(),
            reconciles_ok: m.reconciles_ok.load(Ordering::Relaxed),
            reconciles_failed: m.reconciles_failed.load(Ordering::Relaxed),
            traps: m.traps.load(Ordering::Relaxed),
            queued: self.queue.len(),
        }
    }

    /// Queues every primary key (low priority), e.g. after a subscriber resync.
    fn enqueue_all(&self, priority: Priority) {
        if let Some(d) = self.ctx.declared.get(&gvk_key(&self.for_kind)) {
            for o in d.informer.store().all() {
                self.queue.add(o.key().to_string(), priority);
            }
        }
    }

    /// Whether every informer this guest reads has synced, waiting up to `wait` for each. Logs
    /// why reconciles are held back whenever the reason changes.
    async fn synced(&self, wait: Duration) -> bool {
        for informer in &self.informers {
            if let Err(e) = informer.wait_synced(wait).await {
                let reason = e.to_string();
                let mut last = self.held_back.lock().unwrap();
                if *last != reason {
                    tracing::warn!(guest = %self.name, kind = %informer.key().kind, "reconciles held back: {reason}");
                    *last = reason;
                }
                return false;
            }
        }
        true
    }

    async fn reconcile_one(&self, key: &str) {
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
        let module = self.module.read().unwrap().clone();
        let started = Instant::now();
        let result = module.reconcile(self.ctx.clone(), request).await;
        self.in_flight.lock().unwrap().remove(key);
        let m = &self.ctx.metrics;
        let error = match &result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("{e:?}")),
            Err(e) => Some(e.to_string()),
        };
        match error {
            Some(e) => self.last_errors.lock().unwrap().insert(key.to_string(), e),
            None => self.last_errors.lock().unwrap().remove(key),
        };
        match result {
            Ok(Ok(Outcome::Done)) => {
                Metrics::bump(&m.reconciles_ok);
                self.queue.forget(&key.to_string());
                tracing::info!(guest = %self.name, %key, took = ?started.elapsed(), "reconciled");
            }
            Ok(Ok(Outcome::RequeueAfter(ms))) => {
                Metrics::bump(&m.reconciles_ok);
                self.queue.forget(&key.to_string());
                self.queue
                    .add_after(key.to_string(), Duration::from_millis(ms), Priority::High);
                tracing::info!(guest = %self.name, %key, took = ?started.elapsed(), requeue_after_ms = ms, "reconciled");
            }
            Ok(Err(e)) => {
                Metrics::bump(&m.reconciles_failed);
                let retry = self.queue.add_rate_limited(key.to_string());
                tracing::warn!(guest = %self.name, %key, error = ?e, ?retry, "reconcile failed (blame: guest)");
            }
            Err(e) => {
                Metrics::bump(&m.traps);
                let retry = self.queue.add_rate_limited(key.to_string());
                tracing::warn!(guest = %self.name, %key, error = %e, ?retry, "reconcile trapped (blame: guest)");
            }
        }
    }
}

/// Maps one subscription's notifications to primary keys.
async fn handle(
    controller: std::sync::Weak<Controller>,
    kind: Gvk,
    roles: Vec<Role>,
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
        let priority = handlers::priority(&n);
        for role in &roles {
            for obj in handlers::objects(&n) {
                if *role == Role::GuestMap {
                    let module = c.module.read().unwrap().clone();
                    let json = String::from_utf8_lossy(obj.json()).into_owned();
                    match module.map(c.ctx.clone(), kind.clone(), json).await {
                        Ok(requests) => {
                            for r in requests {
                                c.queue.add(
                                    crate::object::object_key(Some(&r.namespace), &r.name),
                                    priority,
                                );
                            }
                        }
                        Err(e) => {
                            tracing::warn!(guest = %c.name, key = obj.key(), error = %e, "map() failed; object not mapped")
                        }
                    }
                    continue;
                }
                for key in handlers::primaries(role, &c.for_kind, obj) {
                    c.queue.add(key, priority);
                }
            }
        }
    }
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
        c.reconcile_one(&key).await;
        queue.done(&key);
    }
}
