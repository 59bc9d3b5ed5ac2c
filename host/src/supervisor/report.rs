//! What the supervisor reports: the `/status` document, readiness, the `/metrics` scrape, and
//! the Events a tenant's ConfigMap gets when its guest starts or stops failing.

use super::events::Poster;
use super::*;
use crate::guest::Blame;
use crate::informer::{self, Informer, Staleness};
use crate::ops::status::{
    ByBlame, GuestMemory, GuestShadow, InformerState, ReplicasStatus, ShardStatus,
};
use crate::replicas::Placement;

impl Supervisor {
    /// The status document (`/status`, `reconciled status`); see [`crate::ops::status`] for what
    /// each field means.
    ///
    /// The guests are read under one lock, the informers after it: the two lists may disagree
    /// for an instant about an informer a guest has just started or released.
    pub fn status(&self) -> Status {
        let shares = self.cache_shares();
        let guests = self
            .guests
            .lock()
            .unwrap()
            .iter()
            .map(|(name, e)| {
                let placement = self.options.replicas.as_ref().map(|r| r.placement(name));
                guest_status(name, e, shares.get(name).copied(), placement)
            })
            .collect();
        let sources_without_guests = self
            .source_problems
            .lock()
            .unwrap()
            .iter()
            .map(|(source, problem)| SourceProblem {
                source: source.clone(),
                problem: problem.clone(),
            })
            .collect();
        let informers = self
            .factory
            .active()
            .iter()
            .map(|i| informer_status(i))
            .collect();
        Status {
            guests,
            informers,
            sources_without_guests,
            uptime_seconds: self.started.elapsed().as_secs(),
            tenants: self.tenant_status(),
            replicas: self.options.replicas.as_ref().map(|r| {
                let s = r.snapshot();
                ReplicasStatus {
                    identity: s.identity,
                    namespace: s.namespace,
                    members: s.members,
                    held: s.held,
                    shards: s
                        .shards
                        .into_iter()
                        .map(|v| ShardStatus {
                            shard: v.shard,
                            holder: v.holder,
                            planned: v.planned,
                            guests: v.guests,
                        })
                        .collect(),
                }
            }),
        }
    }

    /// The status of guest `name` alone, as [`Supervisor::status`] shows it but without its
    /// share of the cache (`memory.cache_bytes` is 0).
    pub fn guest_status(&self, name: &str) -> Option<GuestStatus> {
        let placement = self.options.replicas.as_ref().map(|r| r.placement(name));
        let guests = self.guests.lock().unwrap();
        guests
            .get(name)
            .map(|e| guest_status(name, e, None, placement))
    }

    /// Why the host is not ready: one line per serving operator guest (from the config or the
    /// dev folder; tenants' guests do not count) whose informers have not synced, and one per
    /// other informer of the host (the ConfigMap source's) that has not.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let controllers: Vec<(Arc<Controller>, bool)> = self
            .guests
            .lock()
            .unwrap()
            .values()
            .filter_map(|e| {
                let tenant = e.source.tenant_namespace().is_some();
                e.controller.clone().map(|c| (c, tenant))
            })
            .collect();
        // A tenant's guest that stops syncing (its RBAC revoked, its CRD deleted) shows in
        // /status and its own Events; it must not take the host out of service for everyone.
        let mut reasons: Vec<String> = self
            .guests
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| e.loading)
            .map(|(name, _)| format!("guest {name}: loading"))
            .collect();
        reasons.extend(
            controllers
                .iter()
                .filter(|(_, tenant)| !tenant)
                .filter_map(|(c, _)| {
                    // Held (its ServiceAccount lost a right) or not synced: either way, not
                    // serving what the operator configured.
                    c.held()
                        .or_else(|| c.not_ready())
                        .map(|r| format!("guest {}: {r}", c.name()))
                }),
        );
        let guests_read: Vec<Arc<crate::informer::Informer>> = controllers
            .iter()
            .flat_map(|(c, _)| c.informers())
            .collect();
        for informer in self.factory.active() {
            if guests_read.iter().any(|i| Arc::ptr_eq(i, &informer)) {
                continue;
            }
            let st = informer.status();
            if !st.state.is_synced() {
                let k = informer.key();
                reasons.push(format!("informer {} ({}): {st}", k.name(), k.scope));
            }
        }
        // A replica that cannot read or write its Leases never takes a shard: every guest
        // would sit in standby here, so the operator must hear why.
        if let Some(problem) = self.options.replicas.as_ref().and_then(|r| r.problem()) {
            reasons.push(problem);
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }

    /// The `/metrics` text: OpenMetrics, to serve as [`metrics::CONTENT_TYPE`]. See
    /// [`metrics`] for the families.
    pub fn metrics(&self) -> String {
        let shares = self.cache_shares();
        let guests: Vec<metrics::Guest> = self
            .guests
            .lock()
            .unwrap()
            .iter()
            .map(|(name, e)| metrics::Guest {
                name: name.clone(),
                source: e.serving_source().to_string(),
                loads: e.loads,
                rejections: e.rejections.iter().map(|(r, n)| (r.label(), *n)).collect(),
                last_load: e.last_load.map(|t| t.total),
                memory: None,
                controller: e.controller.as_ref().map(|c| c.snapshot()),
                rollout: e.rollout.as_ref().map(|t| t.progress()),
            })
            .map(|mut g| {
                g.memory = (g.controller.as_ref()).map(|s| memory(s, shares.get(&g.name)));
                g
            })
            .collect();
        let informers = self
            .factory
            .active()
            .iter()
            .map(|i| {
                let k = i.key();
                metrics::Informer {
                    kind: k.name().to_string(),
                    scope: k.scope.to_string(),
                    stats: i.stats(),
                    synced: i.status().state.is_synced(),
                    staleness: i.staleness(),
                    objects: i.store().len(),
                    cached_bytes: i.store().object_bytes() as u64,
                }
            })
            .collect();
        let process = crate::ops::metrics::process::Process::read()
            .inspect_err(|e| tracing::debug!("{e}"))
            .ok();
        metrics::encode(metrics::Scrape {
            guests,
            unloads: self.unloads.load(Ordering::Relaxed),
            informers,
            process,
            tenants: self.scheduler.usage(),
            replicas: self.options.replicas.as_ref().map(|r| r.snapshot()),
        })
    }
}

impl crate::ops::http::Endpoints for Supervisor {
    fn metrics(&self) -> String {
        Supervisor::metrics(self)
    }

    fn status(&self) -> Status {
        Supervisor::status(self)
    }

    fn readiness(&self) -> Result<(), Vec<String>> {
        Supervisor::readiness(self)
    }
}

/// Least time between two failure Events of one guest: a guest flapping between failing and
/// serving must not flood its namespace with Events.
const FAILURE_EVENT_INTERVAL: Duration = Duration::from_secs(10);

/// Posts `GuestFailing` (Warning) and `GuestRecovered` (Normal) Events on a tenant's ConfigMap
/// as its guest starts and stops failing, at most one every [`FAILURE_EVENT_INTERVAL`]; after
/// a quiet spell the latest state is reported, so the last Event always tells the truth. Ends
/// with the controller.
pub(super) async fn report_failures(
    guest: String,
    mut failing: tokio::sync::watch::Receiver<Option<controller::Failing>>,
    events: Poster,
    source: Source,
) {
    // A guest may start failing between its first reconcile and this reporter's subscription
    // (the load commits after the guest runs), and a failure that stays the same is not sent
    // again: look at what is there first, not only at what changes.
    failing.mark_changed();
    let mut reported_failing = false;
    // Ends when the controller is gone: the sender is dropped with it.
    while failing.changed().await.is_ok() {
        let now = failing.borrow_and_update().clone();
        match (now, reported_failing) {
            (Some(f), false) => {
                reported_failing = true;
                events.post(
                    &guest,
                    &source,
                    Type::Warning,
                    "GuestFailing",
                    format!(
                        "guest {guest}: failing for {} key(s) (blame: {}): {}",
                        f.keys,
                        f.blame,
                        // Guest-made text (a panic message, stderr) on one line.
                        crate::text::one_line(&f.reason)
                    ),
                );
            }
            (None, true) => {
                reported_failing = false;
                events.post(
                    &guest,
                    &source,
                    Type::Normal,
                    "GuestRecovered",
                    format!("guest {guest}: reconciling again"),
                );
            }
            _ => continue,
        }
        tokio::time::sleep(FAILURE_EVENT_INTERVAL).await;
    }
}

/// One guest's line of the status document; `share` is its part of the cache.
fn guest_status(
    name: &str,
    e: &Entry,
    share: Option<u64>,
    placement: Option<Placement>,
) -> GuestStatus {
    let snap = e.controller.as_ref().map(|c| c.snapshot());
    // Another replica's shard (or no shard of its keys): this one does not reconcile it, so it
    // must not say "serving".
    let standby = e.controller.as_ref().and_then(|c| c.standby());
    let key_shards = e.controller.as_ref().and_then(|c| c.key_shards());
    let placement = placement.filter(|_| key_shards.is_none());
    let (state, reason, blame) = match &snap {
        None if e.parked => parked(placement.as_ref()),
        None if e.loading => (GuestState::Loading, Some("loading".to_string()), None),
        None => (GuestState::Rejected, e.last_error.clone(), None),
        Some(s) => match (&s.failing, &s.held_back, standby) {
            (Some(f), _, _) => (GuestState::Failing, Some(f.reason.clone()), Some(f.blame)),
            (None, Some(why), _) => (GuestState::Waiting, Some(why.clone()), None),
            (None, None, Some(why)) => (GuestState::Standby, Some(why), None),
            (None, None, None) => (GuestState::Serving, None, None),
        },
    };
    let failing = snap.as_ref().and_then(|s| s.failing.as_ref());
    GuestStatus {
        name: name.to_string(),
        state,
        reason,
        blame,
        failing_since: failing.map(|f| crate::text::rfc3339(f.since)),
        failing_keys: failing.map(|f| f.keys),
        digest: snap.as_ref().map(|s| s.digest.clone()),
        settings_hash: (e.controller.as_ref())
            .map(|c| crate::rollout::progress::settings_hash(c.guest_settings().as_str())),
        source: e.serving_source().to_string(),
        loaded_at: snap.as_ref().map(|s| crate::text::rfc3339(s.loaded_at)),
        loads: e.loads,
        rejections: e.rejections.values().sum(),
        last_error: e.last_error.clone(),
        last_error_at: e.last_error_at.map(crate::text::micro_time),
        last_load_ms: e.last_load.map(|t| t.total.as_secs_f64() * 1000.0),
        reconciles: snap.as_ref().map(reconciles_of).unwrap_or_default(),
        shadow: (snap.as_ref())
            .and_then(|s| s.shadow.as_ref())
            .map(shadow_of),
        queued: snap.as_ref().map_or(0, |s| s.queued),
        informers: snap.as_ref().map_or(Vec::new(), |s| {
            s.informers
                .iter()
                .map(|(kind, status, stale)| guest_informer(kind, status, stale))
                .collect()
        }),
        memory: snap.as_ref().map(|s| memory(s, share.as_ref())),
        shard: placement.as_ref().map(|p| p.shard),
        owner: placement.and_then(|p| p.owner),
        key_shards: key_shards.map(|s| s.to_string()),
        // A rollout recorded under way that this host has not staged yet (it starts the serving
        // revision first): shown as recorded, so that the status keeps it meanwhile.
        rollout: (e.rollout.as_ref().map(|t| t.progress()))
            .or_else(|| e.recorded_rollout.clone().filter(|p| !p.ended())),
    }
}

/// The state of a guest parked under cold standby: loading once its shard is held here, else
/// standby, naming who holds the shard.
fn parked(placement: Option<&Placement>) -> (GuestState, Option<String>, Option<Blame>) {
    let why = match placement {
        Some(p) if p.here => {
            return (
                GuestState::Loading,
                Some(format!(
                    "this replica took shard {}: loading the guest (cold standby)",
                    p.shard
                )),
                None,
            );
        }
        Some(Placement {
            shard,
            owner: Some(o),
            ..
        }) => format!(
            "cold standby: replica {o} holds shard {shard} and runs the guest; this replica loads it only if it takes the shard over"
        ),
        Some(p) => format!(
            "cold standby: no replica holds shard {} yet; the one that takes it loads the guest",
            p.shard
        ),
        None => "cold standby: not loaded here".to_string(),
    };
    (GuestState::Standby, Some(why), None)
}

/// What a serving guest holds in memory: `share` is its part of the cache (see
/// [`super::memory`]).
fn memory(s: &controller::Snapshot, share: Option<&u64>) -> GuestMemory {
    GuestMemory {
        cached_bytes: share.copied().unwrap_or(0),
        peak_instance_bytes: s.peak_memory_bytes,
        compiled_bytes: s.compiled_bytes as u64,
    }
}

/// What a tenant reads after a grant refusal its operator could lift: which setting of the
/// host config grants it (a tenant's grant is the `[tenants]` section, not a `[guest.grant]`).
pub(super) fn tenant_grant_advice(e: &crate::guest::grant::Error, namespace: &str) -> String {
    use crate::guest::grant::Error;
    let setting = match e {
        Error::Namespace { .. } => {
            format!("`namespaces` under [tenants.grants.{namespace}]")
        }
        _ => format!(
            "`kinds` under [tenants] or [tenants.grants.{namespace}] (`--tenant-kinds` for `reconciled run --configmaps` without a config file)"
        ),
    };
    format!(
        " (this is a tenant's guest, confined to namespace {namespace:?}: remove the declaration from describe(), or ask the host's operator to add it to {setting} in the host config)"
    )
}

/// The counts of a running controller.
fn reconciles_of(snapshot: &controller::Snapshot) -> Reconciles {
    let by = |b: Blame| snapshot.errors_by_blame[b as usize];
    Reconciles {
        ok: snapshot.reconciles_ok,
        failed: snapshot.reconciles_failed,
        traps: snapshot.traps,
        worker_panics: snapshot.worker_panics,
        errors_by_blame: ByBlame {
            guest: by(Blame::Guest),
            host: by(Blame::Host),
            cluster: by(Blame::Cluster),
        },
    }
}

/// The shadow of a running controller.
fn shadow_of(s: &crate::controller::shadow::ShadowSnapshot) -> GuestShadow {
    GuestShadow {
        digest: s.digest.clone(),
        reconciles: s.reconciles,
        divergent: s.divergent,
        last_divergence: s.last_divergence.clone(),
        problem: s.problem.clone(),
    }
}

/// The informer of `kind`, as a controller's snapshot describes it.
fn guest_informer(kind: &str, status: &informer::Status, staleness: &Staleness) -> GuestInformer {
    GuestInformer {
        kind: kind.to_string(),
        state: informer_state(&status.state),
        message: status.message.clone(),
        silent_for_seconds: staleness.silent_for.map(|d| d.as_secs_f64()),
        resource_version: staleness.resource_version,
    }
}

/// Reads `informer` now: its status, staleness and cache size are three reads, not one.
fn informer_status(informer: &Informer) -> InformerStatus {
    let (key, status, stale) = (informer.key(), informer.status(), informer.staleness());
    let gvk = kube::core::GroupVersionKind::gvk(&key.group, &key.version, &key.kind);
    InformerStatus {
        kind: crate::informer::discovery::gvk_string(&gvk),
        scope: key.scope.to_string(),
        state: informer_state(&status.state),
        message: status.message,
        objects: informer.store().len(),
        cached_bytes: informer.store().object_bytes() as u64,
        silent_for_seconds: stale.silent_for.map(|d| d.as_secs_f64()),
        resource_version: stale.resource_version,
    }
}

/// An informer's state on the wire: an exhaustive match, so that a state added to the
/// informer does not compile until the status document can say it.
fn informer_state(state: &informer::State) -> InformerState {
    match state {
        informer::State::Syncing => InformerState::Syncing,
        informer::State::Synced => InformerState::Synced,
        informer::State::Forbidden => InformerState::Forbidden,
        informer::State::KindNotFound => InformerState::KindNotFound,
        informer::State::Degraded => InformerState::Degraded,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::{Source, report_failures, tenant_grant_advice};
    use crate::controller::Failing;
    use crate::guest::Blame;
    use crate::guest::grant::Error;
    use crate::offline::kinds::Kinds;
    use crate::offline::server::Server;

    // Paused time: the reporter's ten-second pause between Events passes at once.
    #[tokio::test(start_paused = true)]
    async fn a_guest_failing_before_its_reporter_starts_still_gets_its_guest_failing_event() {
        let server = Server::new(Kinds::builtin(), Duration::from_secs(1_767_225_600));
        let failing = Failing {
            reason: "a worker panicked reconciling ns/work".into(),
            blame: Blame::Host,
            keys: 1,
            since: SystemTime::now(),
        };
        // Failing already, and staying so: no change will come after the reporter subscribes.
        let (tx, rx) = tokio::sync::watch::channel(Some(failing));
        let source = Source::ConfigMap {
            namespace: "ns".into(),
            name: "rec".into(),
            key: "rec.wasm".into(),
            uid: "uid-1".into(),
        };
        let reporter = tokio::spawn(report_failures(
            "ns/rec/rec".into(),
            rx,
            super::Poster::new(server.client(), true, None),
            source,
        ));
        let posted = tokio::time::timeout(Duration::from_secs(5), async {
            while !server.events().iter().any(|e| e.reason == "GuestFailing") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(posted.is_ok(), "events: {:?}", server.events());
        let event = server
            .events()
            .into_iter()
            .find(|e| e.reason == "GuestFailing")
            .unwrap();
        assert!(
            event
                .message
                .contains("guest ns/rec/rec: failing for 1 key(s) (blame: host)"),
            "{event:?}"
        );
        drop(tx);
        tokio::time::timeout(Duration::from_secs(15), reporter)
            .await
            .expect("the reporter ends with its controller")
            .unwrap();
    }

    #[test]
    fn tenant_grant_advice_names_the_setting_that_grants_it() {
        let kind = Error::Kind {
            guest: "team-a/cm/rec".into(),
            kind: "v1/ConfigMap".into(),
            role: "for",
        };
        let advice = tenant_grant_advice(&kind, "team-a");
        assert!(
            advice.contains("`kinds` under [tenants] or [tenants.grants.team-a]"),
            "{advice}"
        );
        assert!(advice.contains("--tenant-kinds"), "{advice}");
        let namespace = Error::Namespace {
            guest: "team-a/cm/rec".into(),
            namespace: "shared".into(),
            granted: "[\"team-a\"]".into(),
        };
        let advice = tenant_grant_advice(&namespace, "team-a");
        assert!(
            advice.contains("`namespaces` under [tenants.grants.team-a]"),
            "{advice}"
        );
    }
}
