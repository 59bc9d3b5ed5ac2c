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
mod memory;
mod metering;
mod offers;
mod outcome;
mod placement;
mod quota;
mod report;
mod shadow;
mod source;

pub use offers::{Offer, Read, Unreadable};
pub use outcome::{Applied, Reason};
pub use quota::TenantLimits;
pub use source::Source;

use metering::report_throttling;
use report::{post_event, report_failures};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::controller::fair_share::{self, FairShare};
use crate::controller::{self, Controller, Settings};
use crate::events::Type;
use crate::guest::artifact_cache::Origin;
use crate::guest::identity::Identities;
use crate::guest::{LoadError, Runtime, digest_of};
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
    /// Post Kubernetes Events on ConfigMap sources [true].
    pub events: bool,
    /// How often a guest acting as a ServiceAccount has its cache reads reviewed again [60 s];
    /// Role and RoleBinding changes trigger a review sooner.
    pub review_period: Duration,
    /// How guests share the host's CPU: slots, tenant weights, CPU budgets.
    pub fair_share: fair_share::Config,
    /// The replicas this host shares its guests with, if any: a guest then reconciles only
    /// while this replica holds its shard (see [`crate::replicas`]). Every guest is still
    /// loaded, compiled and synced here, so a takeover needs neither a compile nor a relist.
    pub replicas: Option<Arc<Replicas>>,
    /// The guest (by name) whose reconciles are recorded, and where.
    pub record: Option<(String, crate::guest::tape::RecorderRef)>,
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
        }
    }
}

struct Entry {
    source: Source,
    settings: Settings,
    controller: Option<Arc<Controller>>,
    /// Configured and not yet loaded or rejected: `/readyz` waits for it.
    loading: bool,
    loads: u64,
    rejections: BTreeMap<Reason, u64>,
    last_error: Option<String>,
    rejected_digest: Option<String>,
    last_load: Option<LoadTiming>,
}

impl Entry {
    fn new(source: Source, settings: Settings) -> Self {
        Self {
            source,
            settings,
            controller: None,
            loading: false,
            loads: 0,
            rejections: BTreeMap::new(),
            last_error: None,
            rejected_digest: None,
            last_load: None,
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
pub struct Supervisor {
    runtime: Runtime,
    factory: Arc<InformerFactory>,
    identities: Identities,
    /// Guests acting as a ServiceAccount, whose cache reads are reviewed again and again.
    access: access::Access,
    options: Options,
    /// The one scheduler every guest's reconciles take turns in.
    scheduler: Arc<FairShare>,
    guests: Mutex<BTreeMap<String, Entry>>,
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
        Self {
            runtime,
            factory,
            access: access::Access::new(
                identities.host().clone(),
                options.review_period,
                options.events,
            ),
            identities,
            scheduler: Arc::new(FairShare::new(options.fair_share.clone())),
            options,
            guests: Mutex::new(BTreeMap::new()),
            locks: Mutex::new(HashMap::new()),
            compiles: tokio::sync::Semaphore::new(2),
            unloads: AtomicU64::new(0),
            started: Instant::now(),
            source_problems: Mutex::new(BTreeMap::new()),
            offers: Mutex::new(offers::Slots::default()),
            seats: Mutex::new(quota::Seats::default()),
            tenant_limits: Mutex::new(TenantLimits::default()),
            cache_claims: Mutex::new(memory::Claims::new()),
        }
    }

    /// Announces a guest that is about to be loaded from its configuration. Until
    /// [`Supervisor::apply`] has loaded or rejected it, `/readyz` says `guest <name>: loading`,
    /// so a probe never sees a host ready that has not yet tried every guest it was given.
    pub fn expect(&self, name: &str, source: Source, settings: Settings) {
        let mut guests = self.guests.lock().unwrap();
        let entry = guests
            .entry(name.to_string())
            .or_insert_with(|| Entry::new(source, settings));
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

    /// Loads `bytes` as guest `name`: starts it, or reloads it if it runs. See the module docs
    /// for the protocol. Never fails: a rejection is an outcome, recorded everywhere.
    pub async fn apply(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        bytes: Vec<u8>,
    ) -> Applied {
        self.apply_digested(name, source, settings, bytes, None)
            .await
    }

    /// [`Supervisor::apply`] for bytes whose sha256 the source already computed (the dev
    /// folder does, to skip unchanged files). The digest is trusted: it names the precompiled
    /// artifact loaded for these bytes.
    pub async fn apply_digested(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        bytes: Vec<u8>,
        digest: Option<String>,
    ) -> Applied {
        let lock = self.lock_for(name);
        let _serial = lock.lock().await;
        let started = Instant::now();
        let mut settings = settings;
        if let Some((recorded, recorder)) = &self.options.record
            && recorded == name
        {
            settings.recorder = Some(recorder.clone());
        }
        let (digest, bytes) = match digest {
            Some(d) => (d, bytes),
            // Off the async runtime for large modules: 12 MB take about 8 ms.
            None if bytes.len() > (1 << 20) => tokio::task::spawn_blocking(move || {
                let d = digest_of(&bytes);
                (d, bytes)
            })
            .await
            .expect("hashing does not panic"),
            None => (digest_of(&bytes), bytes),
        };
        let (running, replaced) = {
            let guests = self.guests.lock().unwrap();
            match guests.get(name) {
                Some(e) if e.settings == settings => {
                    let serving = e.controller.as_ref().map(|c| c.digest());
                    if serving.as_deref() == Some(digest.as_str())
                        || e.rejected_digest.as_deref() == Some(digest.as_str())
                    {
                        return Applied::Unchanged;
                    }
                    (e.controller.clone(), None)
                }
                // New settings (another grant, limits): start afresh.
                Some(e) => (None, e.controller.clone()),
                None => (None, None),
            }
        };

        let compiled = {
            // Compiling takes every core for a while; a burst of deliveries queues here rather
            // than thrashing memory with many compiles at once.
            let _permit = self.compiles.acquire().await;
            self.runtime
                .compile_digested(bytes, Some(digest.clone()))
                .await
        };
        let module = match compiled {
            Ok(m) => m,
            Err(e) => {
                let reason = match e {
                    LoadError::Invalid { .. } => Reason::Invalid,
                    LoadError::WrongWorld { .. } => Reason::WrongWorld,
                    LoadError::Engine(_) => Reason::Host,
                };
                let lasting = reason != Reason::Host;
                return self.reject_with(
                    name,
                    source,
                    settings,
                    &digest,
                    reason,
                    e.to_string(),
                    lasting,
                );
            }
        };
        let compile = module.compile_time();
        let origin = module.origin();
        let client = match self.identities.client(settings.identity.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                let message = e.to_string();
                return self.reject_with(
                    name,
                    source,
                    settings,
                    &digest,
                    Reason::Host,
                    message,
                    false,
                );
            }
        };
        // Compiling is work done for the tenant, and a tenant delivering a new module in a loop
        // must pay for it like for any other CPU.
        self.scheduler
            .charge_compile(source.tenant(), name, compile);
        let share = self.scheduler.share(source.tenant(), name);
        if let Some(old) = &replaced {
            self.access.forget(name);
            // Its grant or limits changed: no overlap of the two, so a gap instead. Until the
            // new one starts (or is rejected) the guest is not serving, and says so.
            old.stop().await;
            if let Some(e) = self.guests.lock().unwrap().get_mut(name) {
                e.controller = None;
            }
        }
        let tenant = matches!(source, Source::ConfigMap { .. });
        // Whatever this load claims under the cache cap, it gives back when it ends.
        let _claim = memory::Claim::of(self, name);
        let result = match &running {
            Some(c) => {
                let admit = |informers: &[Arc<crate::informer::Informer>]| {
                    (self.check_cache_cap(name, &source, informers)).map_err(|e| e.to_string())
                };
                let timeout = self.options.sync_timeout;
                let reload = c
                    .reload(&self.factory, module.clone(), timeout, admit)
                    .await;
                reload.map(|reload| (c.clone(), Some(reload)))
            }
            None if tenant => {
                let module = module.clone();
                let started = self.start_tenant(name, &source, module, &settings, client, share);
                started.await.map(|c| (c, None))
            }
            None => Controller::start(
                &self.factory,
                client,
                module.clone(),
                settings.clone(),
                share,
                self.gate_for(name),
            )
            .await
            .map(|c| (c, None)),
        };
        let (controller, reload) = match result {
            Ok(ok) => ok,
            Err(e) => {
                let reason = match e {
                    controller::Error::Describe { .. } | controller::Error::Invalid { .. } => {
                        Reason::Describe
                    }
                    controller::Error::Grant(_) => Reason::Grant,
                    controller::Error::Informer { .. } => Reason::Informer,
                    // The cache cap is the one admission check this supervisor makes.
                    controller::Error::Refused { .. } => Reason::CacheBytes,
                };
                // A deadline, an informer that did not sync or a full cache cap may pass next
                // time (a loaded host, RBAC fixed, bytes freed): the same bytes may be tried
                // again.
                let lasting = !matches!(
                    e,
                    controller::Error::Informer { .. }
                        | controller::Error::Refused { .. }
                        | controller::Error::Describe {
                            source: crate::guest::CallError::Deadline { .. },
                            ..
                        }
                );
                let mut message = e.to_string();
                // Advice only where following it could work: an invalid declaration, or one no
                // grant can allow, is not helped by a wider grant.
                if let (Source::ConfigMap { namespace, .. }, controller::Error::Grant(g)) =
                    (&source, &e)
                    && g.operator_can_grant()
                {
                    message.push_str(&report::tenant_grant_advice(g, namespace));
                }
                return self.reject_with(name, source, settings, &digest, reason, message, lasting);
            }
        };
        if let Err(e) = self
            .review_access(name, &source, &controller, reload.is_some())
            .await
        {
            controller.stop().await;
            let (reason, message) = e.rejection(tenant);
            return self.reject_with(name, source, settings, &digest, reason, message, false);
        }
        // Validated: keep the native code for the next load of these bytes.
        module.persist_artifact();
        let timing = LoadTiming {
            compile,
            total: started.elapsed(),
            origin,
        };
        tracing::info!(guest = %name, %digest, %source, compile = ?timing.compile, total = ?timing.total, from_cache = matches!(origin, Origin::Cache), "{}", if reload.is_some() { "new version serving" } else { "guest loaded" });
        let message = format!(
            "guest {name}: serving sha256 {digest} ({} in {} ms, {} ms end to end)",
            if origin == Origin::Cache {
                "loaded precompiled"
            } else {
                "compiled"
            },
            compile.as_millis(),
            timing.total.as_millis()
        );
        let mut guests = self.guests.lock().unwrap();
        if self.offers.lock().unwrap().is_closed() {
            // The host is stopping and has already stopped its guests: this one must not
            // start reconciling behind its back.
            drop(guests);
            controller.stop().await;
            return Applied::Rejected {
                reason: Reason::Host,
                message: "the host is stopping".into(),
            };
        }
        self.event(&source, Type::Normal, "ModuleLoaded", message);
        let entry = guests
            .entry(name.to_string())
            .or_insert_with(|| Entry::new(source.clone(), settings.clone()));
        let old = entry.controller.replace(controller.clone());
        entry.loading = false;
        entry.source = source.clone();
        entry.settings = settings;
        entry.loads += 1;
        entry.last_error = None;
        entry.rejected_digest = None;
        entry.last_load = Some(timing);
        drop(guests);
        self.publish_guests();
        // A replaced controller (new settings) stops when its last reconcile returns.
        drop(old);
        if reload.is_none() && self.options.events && matches!(source, Source::ConfigMap { .. }) {
            tokio::spawn(report_failures(
                Arc::downgrade(&controller),
                controller.watch_failing(),
                self.identities.host().clone(),
                source.clone(),
            ));
            tokio::spawn(report_throttling(
                Arc::downgrade(&controller),
                self.scheduler.watch_spells(),
                self.identities.host().clone(),
                source,
            ));
        }
        match reload {
            Some(reload) => Applied::Reloaded { digest, reload },
            None => Applied::Loaded { digest },
        }
    }

    /// Records a module that could not even be handed to the runtime (for example a
    /// `.wasm.gz` that does not unpack). The guest's serving version, if any, stays.
    pub async fn reject_unreadable(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        digest: &str,
        message: String,
    ) -> Applied {
        let lock = self.lock_for(name);
        let _serial = lock.lock().await;
        {
            let guests = self.guests.lock().unwrap();
            if guests
                .get(name)
                .is_some_and(|e| e.rejected_digest.as_deref() == Some(digest))
            {
                return Applied::Unchanged;
            }
        }
        self.reject_with(
            name,
            source,
            settings,
            digest,
            Reason::Unreadable,
            message,
            true,
        )
    }

    /// Records a rejection. `lasting`: the same bytes would fail the same way again, so they
    /// are not retried until they change.
    #[allow(clippy::too_many_arguments)]
    fn reject_with(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        digest: &str,
        reason: Reason,
        message: String,
        lasting: bool,
    ) -> Applied {
        // Guest-made text (a panic message, stderr) must not forge log lines or Event layout.
        let message = crate::text::one_line(&message);
        let mut guests = self.guests.lock().unwrap();
        let entry = guests
            .entry(name.to_string())
            .or_insert_with(|| Entry::new(source.clone(), settings));
        *entry.rejections.entry(reason).or_default() += 1;
        entry.loading = false;
        entry.last_error = Some(message.clone());
        entry.rejected_digest = lasting.then(|| digest.to_string());
        let serving = entry.controller.as_ref().map(|c| c.digest());
        drop(guests);
        self.publish_guests();
        let keeps = match &serving {
            Some(d) => format!("sha256 {d} keeps serving"),
            None => "the guest is not running".to_string(),
        };
        tracing::error!(guest = %name, %digest, %source, reason = reason.label(), "module rejected ({keeps}): {message}");
        // A refusal before the bytes were read (quota) has no digest to name.
        let module = match digest {
            "" => String::new(),
            d => format!(" [module sha256 {d}]"),
        };
        // Reason and outcome first: Event messages are cut at 1 KiB (see `events`).
        self.event(
            &source,
            Type::Warning,
            "ModuleRejected",
            format!(
                "guest {name}: module rejected ({}; {keeps}): {message}{module}",
                reason.label()
            ),
        );
        Applied::Rejected { reason, message }
    }

    /// Unloads `name`: its workers stop (a reconcile in flight is cancelled at its next await)
    /// and informers no other guest reads are released. Returns whether it existed, once the
    /// guest has stopped.
    pub async fn remove(&self, name: &str) -> bool {
        let lock = self.lock_for(name);
        let _serial = lock.lock().await;
        let Some(entry) = self.guests.lock().unwrap().remove(name) else {
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
            &entry.source,
            Type::Normal,
            "ModuleUnloaded",
            format!("guest {name}: unloaded; its informers are released"),
        );
        true
    }

    /// Posts an Event about a ConfigMap source, in the background: a slow or failing Event
    /// never holds up a load. Other sources have no object to attach one to, and are ignored.
    pub fn event(&self, source: &Source, type_: Type, reason: &str, message: String) {
        if self.options.events {
            post_event(self.identities.host(), source, type_, reason, message);
        }
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
