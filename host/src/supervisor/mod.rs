//! Supervisor: the guests this host runs, by name, and the reload protocol every module source
//! (a config file, the dev folder, tenant ConfigMaps) goes through.
//!
//! Loading a version: compile off the async runtime (or load the precompiled artifact), then
//! validate (instantiate, `describe`, check the grant, start and sync any informer only the new
//! version reads), then swap between reconciles. A module that fails any step is rejected: the
//! previous version keeps serving, and the reason goes to the log, to
//! `reconciled_module_rejections_total`, to the guest's status and, for a ConfigMap, to a
//! Kubernetes Event on it.
//!
//! Where it may surprise:
//! - The same bytes twice are one load: a version already serving, or already rejected, is
//!   not loaded again (no second Event for a module that did not change).
//! - Loads of one guest are serialised; loads of different guests run concurrently.
//! - An operator's guest (config file, dev folder) that passes validation serves even if its
//!   informers are not synced yet (for example forbidden by RBAC): reconciles wait, and
//!   `/readyz` names the rule to add. A tenant's guest (ConfigMap) must sync first or is
//!   rejected, and never counts for `/readyz`. A *reload* always waits for new informers and
//!   is rejected if they do not sync, since an older version is serving and should keep doing
//!   so.
//! - A rejection that could pass next time (a `describe` deadline on a loaded host, an
//!   informer RBAC forbade, a ServiceAccount not yet granted its reads) is not remembered: the
//!   same bytes are tried again when the source next offers them.
//! - A guest acting as a ServiceAccount (every tenant's; an operator's that names one) is
//!   loaded only if that ServiceAccount may list and watch what the guest reads from the
//!   shared cache, and held while it may not (see `access`). A *reload* that reads a kind the
//!   ServiceAccount may not is not rejected but held: the swap has happened by then.
//! - A change of ServiceAccount is a change of settings: the guest restarts, as for a new
//!   grant.
//! - A tenant's load may also be refused for its namespace's quota of guests (see
//!   `supervisor/quota.rs`), or, once its informers have synced, for the namespace's cap on
//!   cache bytes (see `supervisor/memory.rs`); both may pass later, and a quota refusal is
//!   retried on its own.

mod access;
mod cache_cap;
mod events;
mod intake;
mod load;
mod memory;
mod metering;
mod offers;
mod outcome;
mod placement;
mod quota;
mod report;
mod rollout;
mod seating;
mod shadow;
mod source;
mod standby;

pub use offers::{Offer, Read, Unreadable};
pub use outcome::{Applied, Reason};
pub use quota::TenantLimits;
pub use source::{RECONCILER_API_VERSION, Source};

use events::Poster;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::controller::fair_share::{self, FairShare};
use crate::controller::{self, Controller, Settings};
use crate::events::Type;
use crate::guest::Runtime;
use crate::guest::artifact_cache::Origin;
use crate::guest::identity::Identities;
use crate::informer::factory::InformerFactory;
use crate::ops::metrics;
use crate::ops::status::{
    GuestInformer, GuestState, GuestStatus, InformerStatus, Reconciles, SourceProblem, Status,
};
use crate::replicas::Replicas;

/// Tunables.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long a reload waits for informers only the new version reads [30 s].
    pub sync_timeout: Duration,
    /// Post Kubernetes Events on tenants' sources (ConfigMaps, Reconcilers) [true]; among
    /// replicas, only the one holding a guest's shard posts about it.
    pub events: bool,
    /// How often a guest acting as a ServiceAccount has its cache reads reviewed again [60 s];
    /// Role and RoleBinding changes trigger a review sooner.
    pub review_period: Duration,
    /// How guests share the host's CPU: slots, tenant weights, CPU budgets.
    pub fair_share: fair_share::Config,
    /// The replicas this host shares its guests with, if any: a guest then reconciles only
    /// while this replica holds its shard (see [`crate::replicas`]). Under warm standby every
    /// guest is still loaded, compiled and synced here, so a takeover needs neither a compile
    /// nor a relist; under cold standby only the guests of shards held here are, once
    /// [`Supervisor::follow_shards`] runs (see `supervisor/standby.rs`).
    pub replicas: Option<Arc<Replicas>>,
    /// The guest (by name) whose reconciles are recorded, and where.
    pub record: Option<(String, crate::guest::tape::RecorderRef)>,
    /// Environment variables every guest sees, such as `RECONCILED_REPLICA`; none by default.
    pub environment: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            sync_timeout: Duration::from_secs(30),
            events: true,
            review_period: Duration::from_secs(60),
            fair_share: fair_share::Config::default(),
            replicas: None,
            record: None,
            environment: Vec::new(),
        }
    }
}

struct Entry {
    source: Source,
    settings: Settings,
    controller: Option<Arc<Controller>>,
    /// Configured and not yet loaded or rejected: `/readyz` waits for it.
    loading: bool,
    /// Under cold standby, the module to load when this replica holds the guest's shard: the
    /// serving version's, or the latest offered while none serves (see `standby`).
    stash: Option<offers::Stash>,
    /// Under cold standby, not loaded here because another replica holds its shard: its
    /// controller is stopped and its informers released; `stash` is what loads on a takeover.
    parked: bool,
    loads: u64,
    rejections: BTreeMap<Reason, u64>,
    last_error: Option<String>,
    /// When `last_error` was rejected.
    last_error_at: Option<std::time::SystemTime>,
    rejected_digest: Option<String>,
    last_load: Option<LoadTiming>,
    /// The rollout of the latest revision staged step by step, while it runs and once it ended.
    rollout: Option<Arc<rollout::Tracker>>,
    /// A rollout's progress as its source read it recorded (a Reconciler's status, written by
    /// the replica that drives it): where a replica taking the rollout over resumes, or how it
    /// ended there.
    recorded_rollout: Option<crate::rollout::progress::Progress>,
    /// The source of the version serving when a revision was staged beside it (`source` is
    /// then the staged revision's): what serves until that revision is promoted.
    staged_over: Option<Source>,
}

impl Entry {
    /// Where the version serving came from: the latest offer's source, unless that offer
    /// staged a revision beside it that is not promoted (rolling out, or rolled back).
    fn serving_source(&self) -> &Source {
        let promoted = (self.rollout.as_ref())
            .is_some_and(|t| t.progress().phase == crate::rollout::progress::Phase::Promoted);
        match &self.staged_over {
            Some(before) if !promoted => before,
            _ => &self.source,
        }
    }

    fn new(source: Source, settings: Settings) -> Self {
        Self {
            source,
            settings,
            controller: None,
            loading: false,
            stash: None,
            parked: false,
            loads: 0,
            rejections: BTreeMap::new(),
            last_error: None,
            last_error_at: None,
            rejected_digest: None,
            last_load: None,
            rollout: None,
            recorded_rollout: None,
            staged_over: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct LoadTiming {
    compile: Duration,
    total: Duration,
    origin: Origin,
}

/// The guests of one host.
///
/// Lock order, for the mutexes held together: a guest's load lock (`locks`, one per name,
/// held across the whole load, an `.await` included), then `cache_claims`, then `guests`, then
/// `offers`, then `seats`; `early_records` only under `guests`. The others (`locks` itself,
/// `source_problems`, `tenant_limits`) are taken alone and never held across another.
pub struct Supervisor {
    runtime: Runtime,
    factory: Arc<InformerFactory>,
    identities: Identities,
    /// Guests acting as a ServiceAccount, whose cache reads are reviewed again and again.
    access: access::Access,
    /// Events on tenants' sources, posted by the shard's holder only.
    events: Poster,
    options: Options,
    /// The one scheduler every guest's reconciles take turns in.
    scheduler: Arc<FairShare>,
    guests: Mutex<BTreeMap<String, Entry>>,
    /// Rollouts recorded for guests that have no entry here yet (a host starting while one is
    /// under way): the entry takes its record when it is made ([`Supervisor::new_entry`]).
    early_records: Mutex<BTreeMap<String, crate::rollout::progress::Progress>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    compiles: tokio::sync::Semaphore,
    unloads: AtomicU64,
    started: Instant,
    /// Sources that deliver nothing loadable (a labelled ConfigMap without a module), by
    /// source, with why: shown in `/status`, since such a source has no guest to show it on.
    source_problems: Mutex<BTreeMap<String, String>>,
    /// Every source's offers, drained per guest (see [`Offer`]).
    offers: Mutex<offers::Slots<Offer>>,
    /// Tenant namespaces' seats, and the offers waiting for one (see [`quota`]).
    seats: Mutex<quota::Seats<Offer>>,
    /// What tenant namespaces may use.
    tenant_limits: Mutex<TenantLimits>,
    /// Loads admitted under the cache cap that do not serve yet (see `memory::Claims`).
    cache_claims: Mutex<memory::Claims>,
    /// This supervisor, once [`Supervisor::follow_shards`] runs: cold standby offers parked
    /// guests again from where only `&self` is at hand.
    me: std::sync::OnceLock<std::sync::Weak<Supervisor>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("guests", &self.names())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor loading modules with `runtime` and reading through `factory`'s informers.
    /// Guests act as the host through `identities`, or as the ServiceAccount their settings
    /// name. Must be created inside a tokio runtime.
    pub fn new(
        runtime: Runtime,
        factory: Arc<InformerFactory>,
        identities: Identities,
        options: Options,
    ) -> Self {
        let events = Poster::new(
            identities.host().clone(),
            options.events,
            options.replicas.clone(),
        );
        Self {
            runtime,
            factory,
            access: access::Access::new(
                identities.host().clone(),
                options.review_period,
                events.clone(),
            ),
            events,
            identities,
            scheduler: Arc::new(FairShare::new(options.fair_share.clone())),
            options,
            guests: Mutex::new(BTreeMap::new()),
            locks: Mutex::new(HashMap::new()),
            compiles: tokio::sync::Semaphore::new(2),
            unloads: AtomicU64::new(0),
            started: Instant::now(),
            source_problems: Mutex::new(BTreeMap::new()),
            early_records: Mutex::new(BTreeMap::new()),
            offers: Mutex::new(offers::Slots::default()),
            seats: Mutex::new(quota::Seats::default()),
            tenant_limits: Mutex::new(TenantLimits::default()),
            cache_claims: Mutex::new(memory::Claims::new()),
            me: std::sync::OnceLock::new(),
        }
    }

    /// Announces a guest that is about to be loaded from its configuration. Until
    /// [`Supervisor::apply`] has loaded or rejected it, `/readyz` says `guest <name>: loading`,
    /// so a probe never sees a host ready that has not yet tried every guest it was given.
    pub fn expect(&self, name: &str, source: Source, settings: Settings) {
        let mut guests = self.guests.lock().unwrap();
        let entry = guests
            .entry(name.to_string())
            .or_insert_with(|| self.new_entry(name, source, settings));
        if entry.controller.is_none() {
            entry.loading = true;
        }
        drop(guests);
        self.publish_guests();
    }

    /// Records that `source` (for example `configmap team-a/x`) delivers nothing loadable, and
    /// why; `None` clears it. Shown in `/status` and `reconciled status`.
    pub fn set_source_problem(&self, source: &str, problem: Option<String>) {
        let mut problems = self.source_problems.lock().unwrap();
        match problem {
            Some(p) => problems.insert(source.to_string(), crate::text::one_line(&p)),
            None => problems.remove(source),
        };
    }

    /// Stops every guest (workers first, then their informers are released) and forgets them.
    /// Returns once every worker has ended. For shutdown: sources should be stopped before, so
    /// that nothing loads a guest again meanwhile.
    pub async fn shutdown(&self) {
        self.offers.lock().unwrap().close();
        self.seats.lock().unwrap().clear_waiting();
        self.access.stop();
        let entries: Vec<Entry> = std::mem::take(&mut *self.guests.lock().unwrap())
            .into_values()
            .collect();
        let controllers: Vec<Arc<Controller>> =
            entries.into_iter().filter_map(|e| e.controller).collect();
        futures::future::join_all(controllers.iter().map(|c| c.stop())).await;
    }

    /// Namespaces whose Roles or RoleBindings change from now on (`""` for any: missed
    /// changes), once the host has reviewed any guest's access: a source may offer again there
    /// what was refused for access, since the same bytes may now load.
    ///
    /// Where it may surprise: a receiver that falls behind gets `Lagged`, which it should take
    /// as "any namespace".
    pub fn access_changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.access.changes()
    }

    /// The scheduler guests share the host's CPU through.
    pub fn scheduler(&self) -> &Arc<FairShare> {
        &self.scheduler
    }

    /// The identities guests act as: the host's, and the ServiceAccounts they impersonate.
    pub fn identities(&self) -> &Identities {
        &self.identities
    }

    /// The informer factory guests share.
    pub fn factory(&self) -> &Arc<InformerFactory> {
        &self.factory
    }

    /// Guest names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.guests.lock().unwrap().keys().cloned().collect()
    }

    /// The serving controller of `name`.
    pub fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        self.guests
            .lock()
            .unwrap()
            .get(name)
            .and_then(|e| e.controller.clone())
    }

    /// Where the version of `name` that serves (or was last offered, while none serves) came
    /// from; while a rollout's new revision is staged beside it, the serving version's source,
    /// not the new revision's.
    pub fn source_of(&self, name: &str) -> Option<Source> {
        self.guests
            .lock()
            .unwrap()
            .get(name)
            .map(|e| e.serving_source().clone())
    }

    /// The last error of `name` (a rejection), if any.
    pub fn last_error(&self, name: &str) -> Option<String> {
        self.guests
            .lock()
            .unwrap()
            .get(name)
            .and_then(|e| e.last_error.clone())
    }

    fn lock_for(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// Unloads `name`: its workers stop (a reconcile in flight is cancelled at its next await)
    /// and informers no other guest reads are released. Returns whether it existed, once the
    /// guest has stopped.
    pub async fn remove(&self, name: &str) -> bool {
        let lock = self.lock_for(name);
        let _serial = lock.lock().await;
        let removed = {
            let mut guests = self.guests.lock().unwrap();
            self.early_records.lock().unwrap().remove(name);
            guests.remove(name)
        };
        let Some(entry) = removed else {
            return false;
        };
        // The name's lock stays in `locks`: a load waiting on it must not race one that would
        // otherwise create a fresh lock for the same name.
        self.unloads.fetch_add(1, Ordering::Relaxed);
        self.publish_guests();
        self.access.forget(name);
        let digest = entry.controller.as_ref().map(|c| c.digest());
        if let Some(c) = &entry.controller {
            c.stop().await;
        }
        tracing::info!(guest = %name, source = %entry.source, ?digest, "guest unloaded");
        self.event(
            name,
            &entry.source,
            Type::Normal,
            "ModuleUnloaded",
            format!("guest {name}: unloaded; its informers are released"),
        );
        true
    }

    /// Posts an Event about guest `guest`'s source, in the background: a slow or failing Event
    /// never holds up a load. Only a tenant's source (a ConfigMap, a Reconciler) has an object
    /// to attach one to; others are ignored. Among replicas, only the holder of `guest`'s shard
    /// posts it (a source delivering no guest passes its own name), waiting for one to hold it.
    pub fn event(&self, guest: &str, source: &Source, type_: Type, reason: &str, message: String) {
        self.events.post(guest, source, type_, reason, message);
    }

    /// Where the latest step-by-step rollout of `name` stands, if it has had one.
    pub fn rollout(&self, name: &str) -> Option<crate::rollout::progress::Progress> {
        let guests = self.guests.lock().unwrap();
        Some(guests.get(name)?.rollout.as_ref()?.progress())
    }

    /// Records a rollout of guest `name` as its source read it (from a Reconciler's status,
    /// written by the replica that drives it): this replica resumes from its step if it takes
    /// the rollout over, and follows it if it ended (promoted or rolled back) there.
    ///
    /// Where it may surprise: a record for a guest with no entry here yet is kept until one is
    /// made, so that a host starting mid-rollout (it loads the serving revision first) still
    /// resumes it.
    pub fn record_rollout(&self, name: &str, progress: crate::rollout::progress::Progress) {
        let mut guests = self.guests.lock().unwrap();
        let Some(entry) = guests.get_mut(name) else {
            self.early_records
                .lock()
                .unwrap()
                .insert(name.to_string(), progress);
            return;
        };
        if let Some(t) = &entry.rollout {
            t.recorded(&progress);
        }
        entry.recorded_rollout = Some(progress);
    }

    /// A new entry for guest `name`, with the rollout recorded for it before it had one. The
    /// caller holds `guests`.
    fn new_entry(&self, name: &str, source: Source, settings: Settings) -> Entry {
        let mut entry = Entry::new(source, settings);
        entry.recorded_rollout = self.early_records.lock().unwrap().remove(name);
        entry
    }

    /// Timing of the last successful load of `name`: compile (or cache load) time, end to end
    /// time, and whether the artifact came from the cache.
    pub fn last_load(&self, name: &str) -> Option<(Duration, Duration, Origin)> {
        self.guests
            .lock()
            .unwrap()
            .get(name)
            .and_then(|e| e.last_load)
            .map(|t| (t.compile, t.total, t.origin))
    }
}
