//! One load of a module as a guest, phase by phase: digest, dedupe, compile, client and share,
//! start or reload, access review, commit, reporters. Each phase that can refuse the module
//! returns a [`Rejection`]; [`Load::reject`] records it in one place (log, metric, status,
//! Event), whichever phase it came from.
//!
//! Where it may surprise: a load that is refused is not an error of the supervisor; it is an
//! outcome ([`Applied::Rejected`]), and the guest's serving version, if any, stays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cache_cap::Claim;
use super::{Applied, Entry, LoadTiming, Reason, Source, Supervisor, report, rollout};
use super::{metering::report_throttling, report::report_failures};
use crate::controller::fair_share::Share;
use crate::controller::{self, Controller, Reload, Settings};
use crate::events::Type;
use crate::guest::artifact_cache::Origin;
use crate::guest::{CallError, LoadError, Module, digest_of};
use crate::rollout::progress::{Phase, settings_hash};
use crate::rollout::spec::Step;

/// Why a load did not serve its module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// The category: the rejection metric's label.
    pub(crate) reason: Reason,
    /// What to tell the tenant or operator, what to do included.
    pub(crate) message: String,
    /// The same bytes would fail the same way again, so they are not tried until they change.
    /// A refusal that may pass next time (a deadline on a loaded host, an informer RBAC forbade,
    /// a full cache cap, a ServiceAccount not yet granted its reads) is not lasting.
    pub(crate) lasting: bool,
}

impl Rejection {
    /// A rejection that may pass when the same bytes are offered again.
    pub(crate) fn passing(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            lasting: false,
        }
    }
}

impl From<LoadError> for Rejection {
    fn from(e: LoadError) -> Self {
        let reason = match e {
            LoadError::Invalid { .. } | LoadError::TooBig { .. } => Reason::Invalid,
            LoadError::WrongWorld { .. } | LoadError::WitVersion { .. } => Reason::WrongWorld,
            LoadError::Engine(_) => Reason::Host,
        };
        Self {
            reason,
            message: e.to_string(),
            // Engine trouble is the host's, and may be gone next time.
            lasting: reason != Reason::Host,
        }
    }
}

impl From<&controller::Error> for Rejection {
    fn from(e: &controller::Error) -> Self {
        let reason = match e {
            controller::Error::Describe { .. } | controller::Error::Invalid { .. } => {
                Reason::Describe
            }
            controller::Error::Grant(_) => Reason::Grant,
            controller::Error::Informer { .. } => Reason::Informer,
            // The cache cap is the one admission check this supervisor makes.
            controller::Error::Refused { .. } => Reason::CacheBytes,
        };
        // A deadline, an informer that did not sync or a full cache cap may pass next time (a
        // loaded host, RBAC fixed, bytes freed).
        let lasting = !matches!(
            e,
            controller::Error::Informer { .. }
                | controller::Error::Refused { .. }
                | controller::Error::Describe {
                    source: CallError::Deadline { .. },
                    ..
                }
        );
        Self {
            reason,
            message: e.to_string(),
            lasting,
        }
    }
}

/// What serves the guest when a load begins.
#[derive(Debug, Default)]
pub(super) struct Prior {
    /// The controller a new version of the same settings reloads into.
    running: Option<Arc<Controller>>,
    /// The controller of other settings (a grant, limits, an identity) that the new one
    /// replaces: stopped first, since the two may not overlap.
    replaced: Option<Arc<Controller>>,
    /// The revision asked for serves, and another is being rolled out: it is taken back.
    withdraw: bool,
}

/// A started or reloaded controller, not yet committed.
struct Started {
    controller: Arc<Controller>,
    /// What a reload changed; `None` for a start.
    reload: Option<Reload>,
}

/// What [`Load::commit`] did.
enum Committed {
    /// The new controller is recorded as serving; `replaced` is the one it took the place of
    /// in the record, if any (a restart for new settings), still to be dropped.
    Serving { replaced: Option<Arc<Controller>> },
    /// The host is stopping: nothing was recorded.
    Stopping,
}

/// One load of guest `name`. Built with the guest's per-name lock held, and kept until the
/// outcome is recorded.
pub(super) struct Load<'a> {
    sup: &'a Supervisor,
    name: &'a str,
    source: Source,
    settings: Settings,
    /// The module's sha256; empty for a refusal before the bytes were read (quota).
    digest: String,
    started: Instant,
}

impl<'a> Load<'a> {
    /// A load of `name` from `source` with `settings`; the host's environment, and a recording
    /// asked for this guest, are added to the settings here.
    pub(super) fn new(
        sup: &'a Supervisor,
        name: &'a str,
        source: Source,
        mut settings: Settings,
    ) -> Self {
        if let Some((recorded, recorder)) = &sup.options.record
            && recorded == name
        {
            settings.recorder = Some(recorder.clone());
        }
        settings.environment.clone_from(&sup.options.environment);
        Self {
            sup,
            name,
            source,
            settings,
            digest: String::new(),
            started: Instant::now(),
        }
    }

    /// The same, for bytes whose digest is known (or empty: none read).
    pub(super) fn of_digest(
        sup: &'a Supervisor,
        name: &'a str,
        source: Source,
        settings: Settings,
        digest: &str,
    ) -> Self {
        let mut load = Self::new(sup, name, source, settings);
        load.digest = digest.to_string();
        load
    }

    /// Phase 1: the module's sha256, unless the source computed it (it is then trusted: it
    /// names the precompiled artifact loaded for these bytes).
    pub(super) async fn digest(&mut self, bytes: Vec<u8>, known: Option<String>) -> Vec<u8> {
        let (digest, bytes) = match known {
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
        self.digest = digest;
        bytes
    }

    /// Phase 2: what serves now, or `None` when these bytes with these settings already serve
    /// or were already rejected for good (one load, and one Event, per change).
    ///
    /// Where it may surprise: asking again for exactly what serves (or for the revision a
    /// rollout stages beside it) clears the last rejection, since the source no longer asks for
    /// the version that was rejected.
    pub(super) fn prior(&self) -> Option<Prior> {
        let mut guests = self.sup.guests.lock().unwrap();
        let prior = match guests.get_mut(self.name) {
            // The same deployment, the guest's settings aside: those reload like a new module.
            Some(e) if e.settings.same_deployment(&self.settings) => {
                let guest_settings = &self.settings.guest_settings;
                let serving = e.controller.as_ref().is_some_and(|c| {
                    c.digest() == self.digest && c.guest_settings() == *guest_settings
                });
                let rejected = e.settings == self.settings
                    && e.rejected_digest.as_deref() == Some(self.digest.as_str());
                let (held, withdraw) = self.rollout_of(e, serving);
                // Asked again for what serves, or for the revision rolling out beside it: a
                // rejection since is no longer what the source asks for.
                let staged = (e.controller.as_ref().and_then(|c| c.candidate()))
                    .is_some_and(|k| k.digest == self.digest && k.settings == *guest_settings);
                if serving || staged {
                    e.last_error = None;
                    e.last_error_at = None;
                    e.rejected_digest = None;
                }
                if (serving && !withdraw) || rejected || held {
                    return None;
                }
                Prior {
                    running: e.controller.clone(),
                    replaced: None,
                    withdraw,
                }
            }
            // New settings (another grant, limits): start afresh.
            Some(e) => Prior {
                running: None,
                replaced: e.controller.clone(),
                withdraw: false,
            },
            None => Prior::default(),
        };
        Some(prior)
    }

    /// What a rollout makes of this offer to `e`, whose version serving is the offered one when
    /// `serving`: whether it is held as is (staged already, or rolled back here or by the
    /// replica that drove it), and whether a candidate must be withdrawn (the revision serving
    /// is asked for again). A rollout of this revision sees the offer (its `resume` token); an
    /// ended rollout of another is forgotten once the revision serving is asked for again.
    fn rollout_of(&self, e: &mut Entry, serving: bool) -> (bool, bool) {
        let guest_settings = &self.settings.guest_settings;
        let candidate = e.controller.as_ref().and_then(|c| c.candidate());
        let staged = (candidate.as_ref())
            .is_some_and(|k| k.digest == self.digest && k.settings == *guest_settings);
        let rollout = (e.rollout.as_ref()).filter(|t| t.follows(&self.digest, guest_settings));
        if let Some(t) = rollout {
            t.offered(&self.settings.rollout);
        }
        let hash = settings_hash(guest_settings.as_str());
        let recorded_back = (e.recorded_rollout.as_ref())
            .is_some_and(|p| p.of(&self.digest, &hash) && p.phase == Phase::RolledBack);
        let rolled_back =
            rollout.is_some_and(|t| t.rolled_back()) || (recorded_back && e.controller.is_some());
        if serving && rollout.is_none() && e.rollout.as_ref().is_some_and(|t| t.progress().ended())
        {
            e.rollout = None;
        }
        (staged || rolled_back, serving && candidate.is_some())
    }

    /// Phases 3 to 8 and the reporters: from the bytes to a serving version.
    pub(super) async fn run(&self, bytes: Vec<u8>, prior: Prior) -> Result<Applied, Rejection> {
        if let (true, Some(c)) = (prior.withdraw, &prior.running) {
            c.withdraw("the revision serving is asked for again").await;
            return Ok(Applied::Unchanged);
        }
        // New settings for the module serving: nothing to compile, nor to load from the cache.
        let serving = (prior.running.as_ref()).filter(|c| c.digest() == self.digest);
        let (module, reused) = match serving {
            Some(c) => (c.module(), true),
            None => (self.compile(bytes).await?, false),
        };
        let (client, share) = self.client_and_share(&module)?;
        if let Some(old) = &prior.replaced {
            self.stop_replaced(old).await;
        }
        if let Some(c) = prior
            .running
            .as_ref()
            .filter(|_| self.settings.rollout.progressive())
        {
            return self.stage(c, &module, reused).await;
        }
        // Whatever this load claims under the cache cap, it gives back when it ends.
        let _claim = Claim::of(self.sup, self.name);
        let started = self.start(prior.running, &module, client, share).await?;
        self.review(&started).await?;
        // Validated: keep the native code for the next load of these bytes (a module reused
        // for new settings was kept when it first loaded).
        if !reused {
            module.persist_artifact();
        }
        let Committed::Serving { replaced } = self.commit(&started, &module, reused) else {
            // The host is stopping and has already stopped its guests: this one must not start
            // reconciling behind its back.
            started.controller.stop().await;
            return Ok(Applied::Rejected {
                reason: Reason::Host,
                message: "the host is stopping".into(),
            });
        };
        // A replaced controller (new settings) stops when its last reconcile returns.
        drop(replaced);
        if started.reload.is_none() {
            self.start_reporters(&started.controller);
        }
        let digest = self.digest.clone();
        Ok(match started.reload {
            Some(reload) => Applied::Reloaded { digest, reload },
            None => Applied::Loaded { digest },
        })
    }

    /// Phases 6 to 8 for a progressive rollout: the new version staged beside the serving one,
    /// which keeps every key, and the rollout's driver started. Its informers are the serving
    /// version's (the controller refuses a revision that reads others), so nothing new is
    /// synced, capped or reviewed.
    async fn stage(
        &self,
        c: &Arc<Controller>,
        module: &Module,
        reused: bool,
    ) -> Result<Applied, Rejection> {
        let guest_settings = &self.settings.guest_settings;
        let spec = &self.settings.rollout;
        let shadowed = (spec.steps.iter()).any(|s| matches!(s, Step::Shadow(_)));
        (c.stage(module.clone(), guest_settings, shadowed).await)
            .map_err(|e| Rejection::from(&e))?;
        if !reused {
            module.persist_artifact();
        }
        let reporting = rollout::Reporting {
            guest: self.name.to_string(),
            source: self.source.clone(),
            events: self.sup.events.clone(),
        };
        let revision = (self.digest.as_str(), guest_settings);
        let tracker = rollout::start(c, spec, revision, reporting);
        let serving = c.digest();
        let mut resuming = false;
        let mut guests = self.sup.guests.lock().unwrap();
        if let Some(entry) = guests.get_mut(self.name) {
            // Under the lock `record_rollout` takes: no recorded step falls between the two.
            if let Some(p) = &entry.recorded_rollout {
                resuming = tracker.recorded(p);
            }
            // What serves until this revision is promoted: the version that served before the
            // latest revision staged, unless that one was promoted since.
            let promoted =
                (entry.rollout.as_ref()).is_some_and(|t| t.progress().phase == Phase::Promoted);
            if entry.staged_over.is_none() || promoted {
                entry.staged_over = Some(entry.source.clone());
            }
            entry.loading = false;
            entry.source = self.source.clone();
            entry.settings = self.settings.clone();
            entry.last_error = None;
            entry.last_error_at = None;
            entry.rejected_digest = None;
            entry.rollout = Some(tracker);
        }
        drop(guests);
        self.sup.publish_guests();
        let (name, digest) = (self.name, &self.digest);
        tracing::info!(guest = %name, %digest, serving = %serving, steps = spec.steps.len(), resuming, "new revision staged for a progressive rollout");
        // A rollout this revision had under way (a host restarted, a replica that stages it
        // beside the one driving it) is not started again: its driver says when it resumes.
        if !resuming {
            let message = format!(
                "guest {name}: rolling out sha256 {digest} in {} steps; sha256 {serving} keeps serving until they move keys",
                spec.steps.len()
            );
            (self.sup).event(name, &self.source, Type::Normal, "RolloutStarted", message);
        }
        Ok(Applied::Staged {
            digest: digest.clone(),
        })
    }

    /// Phase 3: compiled (or loaded precompiled), a few at a time.
    async fn compile(&self, bytes: Vec<u8>) -> Result<Module, Rejection> {
        // Compiling takes every core for a while; a burst of deliveries queues here rather than
        // thrashing memory with many compiles at once.
        let _permit = self.sup.compiles.acquire().await;
        let digest = Some(self.digest.clone());
        Ok(self.sup.runtime.compile_digested(bytes, digest).await?)
    }

    /// Phase 4: the client the guest acts through, and its share of the host's CPU, charged
    /// for the compile: a tenant delivering a new module in a loop pays for it like for any
    /// other CPU.
    fn client_and_share(&self, module: &Module) -> Result<(kube::Client, Share), Rejection> {
        let client = (self.sup.identities)
            .client(self.settings.identity.as_ref())
            .map_err(|e| Rejection::passing(Reason::Host, e.to_string()))?;
        let tenant = self.source.tenant();
        (self.sup.scheduler).charge_compile(tenant, self.name, module.compile_time());
        Ok((client, self.sup.scheduler.share(tenant, self.name)))
    }

    /// Phase 5, for new settings: the old controller stops before the new one starts, so there
    /// is a gap instead of an overlap. Until the new one starts (or is rejected) the guest is
    /// not serving, and says so.
    async fn stop_replaced(&self, old: &Controller) {
        self.sup.access.forget(self.name);
        old.stop().await;
        if let Some(e) = self.sup.guests.lock().unwrap().get_mut(self.name) {
            e.controller = None;
        }
    }

    /// Phase 6: the new version reloaded into the running controller, or a controller started
    /// for it (a tenant's must sync and fit the cache cap first).
    async fn start(
        &self,
        running: Option<Arc<Controller>>,
        module: &Module,
        client: kube::Client,
        share: Share,
    ) -> Result<Started, Rejection> {
        let sup = self.sup;
        let (name, source) = (self.name, &self.source);
        let result = match running {
            Some(c) => {
                let admit = |informers: &[Arc<crate::informer::Informer>]| {
                    sup.check_cache_cap(name, source, informers)
                };
                let timeout = sup.options.sync_timeout;
                let settings = &self.settings.guest_settings;
                let reload =
                    (c.reload(&sup.factory, module.clone(), settings, timeout, admit)).await;
                reload.map(|reload| Started {
                    controller: c,
                    reload: Some(reload),
                })
            }
            None => {
                let controller = if self.is_tenant() {
                    let module = module.clone();
                    (sup.start_tenant(name, source, module, &self.settings, client, share)).await
                } else {
                    let gate = sup.gate_for(name, self.settings.shard_keys);
                    let settings = self.settings.clone();
                    Controller::start(&sup.factory, client, module.clone(), settings, share, gate)
                        .await
                };
                controller.map(|controller| Started {
                    controller,
                    reload: None,
                })
            }
        };
        result.map_err(|e| {
            let mut rejection = Rejection::from(&e);
            // Advice only where following it could work: an invalid declaration, or one no
            // grant can allow, is not helped by a wider grant.
            if let (Some(namespace), controller::Error::Grant(g)) = (source.tenant_namespace(), &e)
                && g.operator_can_grant()
            {
                (rejection.message).push_str(&report::tenant_grant_advice(g, namespace));
            }
            rejection
        })
    }

    /// Phase 7: a guest acting as a ServiceAccount may read what it declared (see `access`);
    /// if not, its controller stops and the load is refused.
    async fn review(&self, started: &Started) -> Result<(), Rejection> {
        let reloaded = started.reload.is_some();
        let sup = self.sup;
        let reviewed = (sup.access)
            .review_loaded(
                &sup.factory,
                sup.options.sync_timeout,
                self.name,
                &self.source,
                &started.controller,
                reloaded,
            )
            .await;
        if let Err(e) = reviewed {
            started.controller.stop().await;
            let (reason, message) = e.rejection(self.is_tenant());
            return Err(Rejection::passing(reason, message));
        }
        Ok(())
    }

    /// Phase 8: the controller recorded as serving, with the load's timing, and a
    /// `ModuleLoaded` Event, unless the host is stopping.
    fn commit(&self, started: &Started, module: &Module, reused: bool) -> Committed {
        let (name, digest, source) = (self.name, &self.digest, &self.source);
        let timing = LoadTiming {
            // The module serving, with new settings: this load compiled nothing.
            compile: if reused {
                Duration::ZERO
            } else {
                module.compile_time()
            },
            total: self.started.elapsed(),
            origin: if reused {
                Origin::Cache
            } else {
                module.origin()
            },
        };
        let reloaded = started.reload.is_some();
        tracing::info!(guest = %name, %digest, %source, compile = ?timing.compile, total = ?timing.total, origin = ?timing.origin, reused, "{}", if reloaded { "new version serving" } else { "guest loaded" });
        let how = match (reused, timing.origin) {
            (true, _) => "the module already serving, with new settings".to_string(),
            (false, Origin::Memory) => "sharing the code another guest already runs".to_string(),
            (false, Origin::Cache) => {
                format!("loaded precompiled in {} ms", timing.compile.as_millis())
            }
            (false, Origin::Compiled) => format!("compiled in {} ms", timing.compile.as_millis()),
        };
        let message = format!(
            "guest {name}: serving sha256 {digest} ({how}, {} ms end to end)",
            timing.total.as_millis()
        );
        // Lock order: the guests, then the offers (see `Supervisor`).
        let mut guests = self.sup.guests.lock().unwrap();
        if self.sup.offers.lock().unwrap().is_closed() {
            return Committed::Stopping;
        }
        self.sup
            .event(name, source, Type::Normal, "ModuleLoaded", message);
        let entry = guests.entry(name.to_string()).or_insert_with(|| {
            self.sup
                .new_entry(name, source.clone(), self.settings.clone())
        });
        let old = entry.controller.replace(started.controller.clone());
        entry.loading = false;
        entry.parked = false;
        entry.source = source.clone();
        entry.settings = self.settings.clone();
        entry.staged_over = None;
        entry.loads += 1;
        entry.last_error = None;
        entry.last_error_at = None;
        entry.rejected_digest = None;
        entry.last_load = Some(timing);
        drop(guests);
        self.sup.publish_guests();
        Committed::Serving { replaced: old }
    }

    /// After a start (not a reload) of a tenant's guest: Events on its ConfigMap when it keeps
    /// failing or is throttled, for as long as it serves.
    fn start_reporters(&self, controller: &Arc<Controller>) {
        if !self.sup.events.enabled() || !self.is_tenant() {
            return;
        }
        tokio::spawn(report_failures(
            self.name.to_string(),
            controller.watch_failing(),
            self.sup.events.clone(),
            self.source.clone(),
        ));
        tokio::spawn(report_throttling(
            Arc::downgrade(controller),
            self.sup.scheduler.watch_spells(),
            self.sup.events.clone(),
            self.source.clone(),
        ));
    }

    /// Records `rejection`: counted by reason, the guest's last error, remembered for the
    /// digest when lasting, logged, and an Event on a ConfigMap source. The serving version,
    /// if any, stays.
    pub(super) fn reject(self, rejection: Rejection) -> Applied {
        let Rejection {
            reason,
            message,
            lasting,
        } = rejection;
        let (name, digest, source) = (self.name, self.digest.as_str(), &self.source);
        // Guest-made text (a panic message, stderr) must not forge log lines or Event layout.
        let message = crate::text::one_line(&message);
        let mut guests = self.sup.guests.lock().unwrap();
        let entry = guests
            .entry(name.to_string())
            .or_insert_with(|| self.sup.new_entry(name, source.clone(), self.settings));
        *entry.rejections.entry(reason).or_default() += 1;
        entry.loading = false;
        // Tried here (its shard is held) and refused: the status must say so, not "standby".
        entry.parked = false;
        entry.last_error = Some(message.clone());
        entry.last_error_at = Some(std::time::SystemTime::now());
        entry.rejected_digest = lasting.then(|| digest.to_string());
        let serving = entry.controller.as_ref().map(|c| c.digest());
        drop(guests);
        self.sup.publish_guests();
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
        self.sup.event(
            name,
            source,
            Type::Warning,
            "ModuleRejected",
            format!(
                "guest {name}: module rejected ({}; {keeps}): {message}{module}",
                reason.label()
            ),
        );
        Applied::Rejected { reason, message }
    }

    /// A tenant's guest (from a ConfigMap) must sync before it serves, and reports on its
    /// ConfigMap.
    fn is_tenant(&self) -> bool {
        self.source.tenant_namespace().is_some()
    }
}

impl Supervisor {
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
    ///
    /// Where it may surprise: under cold standby, a guest whose shard another replica holds is
    /// not loaded but parked ([`Applied::Parked`]), and loads when this replica takes the shard.
    pub async fn apply_digested(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        bytes: Vec<u8>,
        digest: Option<String>,
    ) -> Applied {
        if self.cold() {
            return self.apply_cold(name, source, settings, bytes, digest).await;
        }
        self.load_now(name, source, settings, bytes, digest).await
    }

    /// [`Supervisor::apply_digested`] here and now, whoever holds the guest's shard.
    pub(super) async fn load_now(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        bytes: Vec<u8>,
        digest: Option<String>,
    ) -> Applied {
        let lock = self.lock_for(name);
        let _serial = lock.lock().await;
        let mut load = Load::new(self, name, source, settings);
        let bytes = load.digest(bytes, digest).await;
        let Some(prior) = load.prior() else {
            return Applied::Unchanged;
        };
        match load.run(bytes, prior).await {
            Ok(applied) => applied,
            Err(rejection) => load.reject(rejection),
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
        let rejection = Rejection {
            reason: Reason::Unreadable,
            message,
            lasting: true,
        };
        Load::of_digest(self, name, source, settings, digest).reject(rejection)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::guest::{Blame, CallError};

    /// A supervisor with no API server behind it and no Events: enough for loads refused
    /// before they reach an informer.
    pub(in crate::supervisor) fn offline() -> Supervisor {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let identities = crate::guest::identity::Identities::new(config).unwrap();
        let factory = crate::informer::factory::InformerFactory::new(
            identities.host().clone(),
            crate::informer::Options::default(),
        );
        Supervisor::new(
            crate::guest::Runtime::new().unwrap(),
            Arc::new(factory),
            identities,
            super::super::Options {
                events: false,
                ..super::super::Options::default()
            },
        )
    }

    fn file() -> Source {
        Source::File("/guests/g.wasm".into())
    }

    #[test]
    fn a_module_the_engine_could_not_take_may_be_tried_again_and_a_bad_one_may_not() {
        let invalid = Rejection::from(LoadError::Invalid {
            size: 3,
            digest: "d".into(),
            reason: "magic".into(),
        });
        assert_eq!((invalid.reason, invalid.lasting), (Reason::Invalid, true));
        let world = Rejection::from(LoadError::WrongWorld {
            digest: "d".into(),
            reason: "no export".into(),
        });
        assert_eq!((world.reason, world.lasting), (Reason::WrongWorld, true));
        let engine = Rejection::from(LoadError::Engine("task died".into()));
        assert_eq!((engine.reason, engine.lasting), (Reason::Host, false));
        assert!(engine.message.contains("task died"), "{}", engine.message);
    }

    #[test]
    fn a_describe_deadline_an_unsynced_informer_and_a_full_cache_may_pass_next_time() {
        let guest = || "g".to_string();
        let deadline = controller::Error::Describe {
            guest: guest(),
            source: CallError::Deadline {
                limit: Duration::from_secs(1),
                blame: Blame::Host,
            },
        };
        let trap = controller::Error::Describe {
            guest: guest(),
            source: CallError::Trap {
                message: "unreachable".into(),
                stderr: String::new(),
            },
        };
        let informer = controller::Error::Informer {
            guest: guest(),
            kind: "ConfigMap".into(),
            reason: "forbidden".into(),
        };
        let refused = controller::Error::Refused {
            guest: guest(),
            source: "over the cap".into(),
        };
        let invalid = controller::Error::Invalid {
            guest: guest(),
            reason: "no kind".into(),
        };
        let seen = [&deadline, &trap, &informer, &refused, &invalid]
            .map(Rejection::from)
            .map(|r| (r.reason, r.lasting));
        assert_eq!(
            seen,
            [
                (Reason::Describe, false),
                (Reason::Describe, true),
                (Reason::Informer, false),
                (Reason::CacheBytes, false),
                (Reason::Describe, true),
            ]
        );
    }

    #[tokio::test]
    async fn the_same_bad_bytes_twice_are_one_rejection() {
        let sup = offline();
        let settings = Settings::new("g");
        let bytes = b"not a component".to_vec();
        let first = sup
            .apply("g", file(), settings.clone(), bytes.clone())
            .await;
        assert!(
            matches!(
                first,
                Applied::Rejected {
                    reason: Reason::Invalid,
                    ..
                }
            ),
            "{first:?}"
        );
        let again = sup.apply("g", file(), settings, bytes).await;
        assert!(matches!(again, Applied::Unchanged), "{again:?}");
        let status = sup.status();
        let g = status.guest("g").unwrap();
        assert_eq!(g.rejections, 1, "one rejection, not two");
    }

    #[tokio::test]
    async fn bytes_rejected_under_other_settings_are_tried_again() {
        let sup = offline();
        let bytes = b"not a component".to_vec();
        sup.apply("g", file(), Settings::new("g"), bytes.clone())
            .await;
        let mut other = Settings::new("g");
        other.workers += 1;
        let again = sup.apply("g", file(), other, bytes).await;
        assert!(matches!(again, Applied::Rejected { .. }), "{again:?}");
        assert_eq!(sup.status().guest("g").unwrap().rejections, 2);
    }

    #[tokio::test]
    async fn a_passing_rejection_is_not_remembered_for_the_digest() {
        let sup = offline();
        let load = Load::of_digest(&sup, "g", file(), Settings::new("g"), "abc");
        let applied = load.reject(Rejection::passing(Reason::Access, "not yet granted"));
        assert!(matches!(
            applied,
            Applied::Rejected {
                reason: Reason::Access,
                ..
            }
        ));
        let mut load = Load::new(&sup, "g", file(), Settings::new("g"));
        load.digest = "abc".into();
        assert!(load.prior().is_some(), "the same bytes may be tried again");
        let lasting = Rejection {
            reason: Reason::Invalid,
            message: "bad".into(),
            lasting: true,
        };
        Load::of_digest(&sup, "g", file(), Settings::new("g"), "abc").reject(lasting);
        assert!(load.prior().is_none(), "now they are not");
        assert_eq!(sup.last_error("g").as_deref(), Some("bad"));
    }

    #[tokio::test]
    async fn a_rejection_message_is_one_line_whatever_the_guest_wrote() {
        let sup = offline();
        let load = Load::of_digest(&sup, "g", file(), Settings::new("g"), "abc");
        let forged = "trap\nINFO host: all good";
        let Applied::Rejected { message, .. } =
            load.reject(Rejection::passing(Reason::Describe, forged))
        else {
            panic!("a rejection is rejected");
        };
        assert!(!message.contains('\n'), "{message:?}");
    }

    #[tokio::test]
    async fn every_guest_sees_the_hosts_environment() {
        let mut sup = offline();
        let replica = ("RECONCILED_REPLICA".to_string(), "r-1".to_string());
        sup.options.environment = vec![replica.clone()];
        let load = Load::new(&sup, "g", file(), Settings::new("g"));
        assert_eq!(load.settings.environment, [replica]);
    }

    #[tokio::test]
    async fn a_recording_asked_for_this_guest_is_added_to_its_settings() {
        let dir = std::env::temp_dir().join(format!("reconciled-load-{}", std::process::id()));
        let recorder = crate::guest::tape::Recorder::to_dir(dir.clone(), 1 << 20, Duration::MAX);
        let recorder = crate::guest::tape::RecorderRef(Arc::new(recorder.unwrap()));
        let mut sup = offline();
        sup.options.record = Some(("g".to_string(), recorder));
        let load = Load::new(&sup, "g", file(), Settings::new("g"));
        assert!(load.settings.recorder.is_some());
        let other = Load::new(&sup, "h", file(), Settings::new("h"));
        assert!(other.settings.recorder.is_none());
        let _ = std::fs::remove_dir_all(dir);
    }
}
