//! The state a running guest's tasks share: the version serving, the queue, the counters, the
//! hold and the gate. The handler tasks and the workers hold it weakly, so dropping the
//! [`Controller`](super::Controller) that owns it ends them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::candidate::{Candidate, Pick};
use super::failures::{Failing, Failures};
use super::fair_share::Share;
use super::gate::Gate;
use super::key_gates::{self, KeyGates, Route, Tombstones};
use super::reconciles::Counters;
use super::settings::Settings;
use super::shadow;
use super::traffic::Traffic;
use super::version::Version;
use super::work_queue::{Priority, WorkQueue};
use crate::guest::imports::Metrics;
use crate::informer::Informer;
use crate::rollout::share::in_share;

/// What outlives any one version of the guest's module, and the version serving now.
pub(super) struct Shared {
    pub(super) name: String,
    pub(super) settings: Settings,
    /// Its place in the host's fair share: every reconcile waits for a slot from it.
    pub(super) share: Share,
    pub(super) client: kube::Client,
    pub(super) current: RwLock<Arc<Version>>,
    /// A new revision staged for a progressive rollout, beside `current` (see `candidate`).
    pub(super) candidate: RwLock<Option<Arc<Candidate>>>,
    pub(super) queue: Arc<WorkQueue<String>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) in_flight: Mutex<HashSet<String>>,
    pub(super) last_errors: Mutex<HashMap<String, String>>,
    pub(super) held_back: Mutex<String>,
    /// Why reconciles are held whatever the informers say (the guest's identity lost a right
    /// it reads with); see [`Controller::hold`](super::Controller::hold).
    pub(super) hold: watch::Sender<Option<String>>,
    /// Whether this process may reconcile the guest at all (its shard's Lease, among
    /// replicas); closing it cancels reconciles in flight. See [`Gate`].
    pub(super) gate: Arc<Gate>,
    /// A gate per key, for a guest whose keys are split across replicas: then `gate` is only
    /// its lead gate, and each key passes through its shard's (see [`KeyGates`]).
    pub(super) keys: Option<KeyGates>,
    /// Deleted primaries' uids, until their keys reconcile: their shard (with `keys` only).
    pub(super) tombstones: Tombstones,
    pub(super) counters: Counters,
    pub(super) failures: Mutex<Failures>,
    /// The summary of `failures`: `Some` while the guest cannot run (see [`Failing`]); watched
    /// by the supervisor, which posts Events on a tenant's ConfigMap when it changes.
    pub(super) failing: watch::Sender<Option<Failing>>,
    pub(super) shadow_counts: shadow::Counts,
    /// Which queued keys are traffic, and the serving revision's live reconcile times: what a
    /// progressive rollout judges its steps on (see `traffic`).
    pub(super) traffic: Traffic,
}

impl Shared {
    /// The version serving now.
    pub(super) fn current(&self) -> Arc<Version> {
        self.current.read().unwrap().clone()
    }

    /// Informers the serving version reads.
    pub(super) fn informers(&self) -> Vec<Arc<Informer>> {
        self.current().informers.clone()
    }

    /// See [`Controller::hold`](super::Controller::hold).
    pub(super) fn hold(&self, reason: Option<String>) -> bool {
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

    /// Queues every primary key; returns how many.
    pub(super) fn enqueue_all(&self, priority: Priority) -> usize {
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

    /// The gate `key` passes through: the guest's own, or its shard's when keys are split
    /// across replicas; `None` when its shard is unknown here (see [`key_gates`]).
    pub(super) fn gate_of_key(&self, key: &str) -> Option<Arc<Gate>> {
        let Some(keys) = &self.keys else {
            return Some(self.gate.clone());
        };
        let v = self.current();
        let cached = v
            .ctx
            .declared
            .get(&v.for_kind)
            .and_then(|d| d.informer.store().get(key));
        let uid = match cached {
            Some(o) => Some(o.uid().to_string()),
            None => self.tombstones.uid(key),
        };
        match key_gates::route(keys, uid.as_deref()) {
            Route::Gate(gate) => Some(gate),
            Route::Unknown => None,
        }
    }

    /// Whether every informer this guest reads has synced, waiting up to `wait` for each. Logs
    /// why reconciles are held back whenever the reason changes.
    pub(super) async fn synced(&self, wait: Duration) -> bool {
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

    /// See [`Controller::not_ready`](super::Controller::not_ready).
    pub(super) fn not_ready(&self) -> Option<String> {
        self.informers().iter().find_map(|i| {
            let st = i.status();
            (!st.state.is_synced()).then(|| format!("{}: {st}", i.key().name()))
        })
    }
}

impl Shared {
    /// The candidate, if one is staged.
    pub(super) fn candidate(&self) -> Option<Arc<Candidate>> {
        self.candidate.read().unwrap().clone()
    }

    /// Which revision reconciles `key` now.
    pub(super) fn pick(&self, key: &str) -> Pick {
        let serving = self.current();
        let Some(candidate) = self.candidate() else {
            return Pick {
                ctx: serving.ctx.clone(),
                shadow: serving.shadow.clone(),
                version: serving,
                candidate_shadow: false,
                candidate: None,
                canary: None,
            };
        };
        let route = candidate.route();
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        if in_share(namespace, name, route.percent)
            && let Some(pass) = candidate.gate.enter()
        {
            return Pick {
                ctx: candidate.version.ctx.clone(),
                version: candidate.version.clone(),
                shadow: None,
                candidate_shadow: false,
                candidate: Some(candidate),
                canary: Some(pass),
            };
        }
        let shadow = candidate.shadow.clone().filter(|_| route.shadow);
        Pick {
            ctx: if shadow.is_some() {
                candidate.taped_serving.clone()
            } else {
                serving.ctx.clone()
            },
            candidate_shadow: shadow.is_some(),
            shadow: shadow.or_else(|| serving.shadow.clone()),
            version: serving,
            candidate: Some(candidate),
            canary: None,
        }
    }

    /// Queues every primary key again, at low priority, as traffic: a rollout's resync (its
    /// `resyncInterval`); returns how many.
    pub(super) fn resync_as_traffic(&self) -> usize {
        self.enqueue_where(Priority::Low, |ns, name| {
            let key = crate::object::object_key(Some(ns), name);
            self.traffic.mark(&key, super::traffic::Change::Resync);
            true
        })
    }

    /// Whether a reconcile queued for `changes` is one of a live change (see `traffic`), by the
    /// guest's own writes as the serving version's floors remember them (the candidate shares
    /// them).
    pub(super) fn live(&self, changes: &[super::traffic::Change]) -> bool {
        let v = self.current();
        super::traffic::live(changes, |kind| v.ctx.declared.get(kind).map(|d| &*d.floors))
    }

    /// Queues, at `priority`, every primary key for which `moved` holds; returns how many.
    pub(super) fn enqueue_where(
        &self,
        priority: Priority,
        moved: impl Fn(&str, &str) -> bool,
    ) -> usize {
        let v = self.current();
        let Some(d) = v.ctx.declared.get(&v.for_kind) else {
            return 0;
        };
        let mut n = 0;
        for o in d.informer.store().all() {
            let key = o.key().to_string();
            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
            if moved(namespace, name) {
                self.queue.add(key.clone(), priority);
                n += 1;
            }
        }
        n
    }
}
