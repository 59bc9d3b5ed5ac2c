//! The source's loop: Reconcilers, their revisions, labelled ConfigMaps of the same names and the
//! ConfigMaps they read modules from come and go; each change has the Reconcilers it touches
//! judged again (`spec::decide`) and handed to `dispatch`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::dispatch::Dispatch;
use super::impersonation;
use super::revisions;
use super::spec::{self, Reconciler, Wanted};
use crate::informer::factory::InformerFactory;
use crate::informer::store::Store;
use crate::informer::{Event, InformerKey, Scope, Subscription};
use crate::object::{ObjectRef, Transform};
use crate::selector::FieldSelector;
use crate::supervisor::Offer;

/// The loop and what it keeps between events.
pub(super) struct Loop {
    pub(super) dispatch: Dispatch,
    /// The supervisor's informer factory, where the named ConfigMaps are watched.
    pub(super) factory: Arc<InformerFactory>,
    /// Metadata-only watches of the ConfigMaps Reconcilers name, by (namespace, name).
    pub(super) watched: HashMap<(String, String), AbortHandle>,
    /// Where the loop's own tasks tell it what changed.
    pub(super) pokes: mpsc::UnboundedSender<Poke>,
    /// What is known of the ServiceAccounts Reconcilers name.
    pub(super) impersonation: impersonation::Shared,
    /// Guests started from their serving revision for a rollout under way: judged again once
    /// they serve, to offer the spec beside it.
    pub(super) awaiting: std::collections::BTreeSet<String>,
    /// Guests with a rollout recorded under way (or rolled back) and nothing running here,
    /// judged before the revisions were listed: judged again once they are, since which
    /// revision starts first is one of them.
    pub(super) deferred: std::collections::BTreeSet<String>,
    /// Whether the revisions' informer has listed them.
    pub(super) revisions_listed: bool,
}

impl Drop for Loop {
    fn drop(&mut self) {
        // An `AbortHandle` dropped does not stop its task: the watches of named ConfigMaps end
        // with the loop, not at their next event.
        for task in self.watched.values() {
            task.abort();
        }
    }
}

impl Loop {
    pub(super) async fn run(
        mut self,
        mut reconcilers: Subscription,
        mut revisions: Subscription,
        mut labelled: Subscription,
        mut pokes: mpsc::UnboundedReceiver<Poke>,
    ) {
        let store = reconcilers.informer().store().clone();
        let mut revisions_status = revisions.informer().watch_status();
        self.revisions_listed = revisions_status.borrow_and_update().state.is_synced();
        let mut access = self.dispatch.supervisor.access_changes();
        let mut look = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = look.tick(), if !self.awaiting.is_empty() => {
                    let serving: Vec<String> = (self.awaiting.iter())
                        .filter(|g| self.dispatch.supervisor.controller(g).is_some())
                        .cloned()
                        .collect();
                    for guest in &serving {
                        self.awaiting.remove(guest);
                    }
                    self.sync_guests(&store, &serving, false);
                }
                Ok(()) = revisions_status.changed() => {
                    self.revisions_listed = revisions_status.borrow_and_update().state.is_synced();
                    if self.revisions_listed && !self.deferred.is_empty() {
                        let names: Vec<String> = std::mem::take(&mut self.deferred).into_iter().collect();
                        self.sync_guests(&store, &names, false);
                    }
                }
                n = reconcilers.recv() => {
                    let Some(n) = n else { return };
                    match n.event {
                        Event::Added(o) | Event::Updated { new: o, .. } => self.sync(&o, false),
                        Event::Deleted { last_known, .. } => self.remove(&last_known),
                        Event::Resync => {
                            let all = store.all();
                            for o in &all {
                                self.sync(o, false);
                            }
                            let live: std::collections::BTreeSet<String> =
                                all.iter().map(guest_of).collect();
                            let gone: Vec<Reconciler> = (self.dispatch.table.lock().unwrap())
                                .iter()
                                .filter(|(g, _)| !live.contains(*g))
                                .map(|(_, t)| t.reconciler.clone())
                                .collect();
                            for r in gone {
                                self.forget(&r);
                            }
                        }
                    }
                }
                n = labelled.recv() => {
                    let Some(n) = n else { return };
                    // A labelled ConfigMap came or went: the Reconciler of its name, if any, is
                    // judged again.
                    let names = match &n.event {
                        Event::Added(o) | Event::Updated { new: o, .. } | Event::Deleted { last_known: o, .. } => vec![guest_of(o)],
                        Event::Resync => self.dispatch.table.lock().unwrap().keys().cloned().collect(),
                    };
                    self.sync_guests(&store, &names, false);
                }
                n = revisions.recv() => {
                    let Some(n) = n else { return };
                    // A pinned revision may exist now (or be gone).
                    let namespace = match &n.event {
                        Event::Added(o) | Event::Updated { new: o, .. } | Event::Deleted { last_known: o, .. } => o.namespace().map(str::to_string),
                        Event::Resync => None,
                    };
                    let names: Vec<String> = (self.dispatch.table.lock().unwrap())
                        .iter()
                        .filter(|(_, t)| t.pinned.is_some() || t.verdict.as_ref().is_err_and(|r| r.reason == "NoSuchRevision"))
                        .filter(|(_, t)| namespace.as_ref().is_none_or(|ns| *ns == t.reconciler.namespace))
                        .map(|(g, _)| g.clone())
                        .collect();
                    self.sync_guests(&store, &names, false);
                }
                Some(poke) = pokes.recv() => self.poked(&store, poke),
                ns = access.recv() => {
                    let only = match ns {
                        Ok(ns) if !ns.is_empty() => Some(ns),
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    };
                    // A guest refused for access may load now; a settled one costs a comparison.
                    let names: Vec<String> = (self.dispatch.table.lock().unwrap())
                        .iter()
                        .filter(|(_, t)| only.as_ref().is_none_or(|ns| *ns == t.reconciler.namespace))
                        .map(|(g, _)| g.clone())
                        .collect();
                    self.sync_guests(&store, &names, false);
                }
            }
        }
    }

    /// What one of the loop's own tasks said changed.
    fn poked(&mut self, store: &Store, poke: Poke) {
        match poke {
            Poke::ConfigMap(ns, cm) => {
                let names: Vec<String> = (self.dispatch.table.lock().unwrap())
                    .iter()
                    .filter(|(_, t)| {
                        t.reconciler.namespace == ns && t.configmap.as_deref() == Some(cm.as_str())
                    })
                    .map(|(g, _)| g.clone())
                    .collect();
                self.sync_guests(store, &names, true);
            }
            Poke::Answered(ns) => {
                // Every Reconciler of the namespace: one waiting for this answer has no entry
                // in the table yet.
                let names: Vec<String> = store
                    .all()
                    .iter()
                    .filter(|o| o.namespace() == Some(ns.as_str()))
                    .map(guest_of)
                    .collect();
                self.sync_guests(store, &names, false);
            }
        }
    }

    fn sync_guests(&mut self, store: &Store, names: &[String], force: bool) {
        for guest in names {
            if let Some(o) = store.get(guest) {
                self.sync(&o, force);
            }
        }
    }

    /// Judges Reconciler `o` again and offers what it asks for, unless that was offered already
    /// and has settled (`force`: its ConfigMap changed, so read it again).
    fn sync(&mut self, o: &ObjectRef, force: bool) {
        let Some(r) = spec::read(o.json()) else {
            tracing::warn!(object = %o.name(), "ignoring a Reconciler without a name");
            return;
        };
        let allowed = match &r.spec {
            Ok(spec) => match self.may_act_as(&r.namespace, &spec.service_account) {
                Some(allowed) => allowed,
                // Judged again when the answer comes.
                None => return,
            },
            Err(_) => Ok(()),
        };
        let d = &self.dispatch;
        let guest = r.guest();
        // Where the replica driving its rollout left it: this one resumes there if it takes
        // over, or follows its end.
        if let Some(p) = &r.rollout {
            d.supervisor.record_rollout(&guest, p.clone());
        }
        // A labelled ConfigMap of the same name takes it only if it was there first.
        let taken_by = (d.labelled.get(&guest))
            .filter(|cm| r.created.is_empty() || created_at(cm) <= r.created)
            .map(|cm| cm.name().to_string());
        let revisions = revisions::of(&d.revisions, &r.namespace, &r.uid);
        let decision = match (&r.spec, allowed) {
            (Err(e), _) => Err(e.clone()),
            (Ok(spec), Ok(())) => {
                spec::decide(&r, spec, &d.policy, taken_by.as_deref(), &revisions)
            }
            // The policy's own refusals (namespace, name) come first: they say more.
            (Ok(spec), Err(refused)) => {
                match spec::decide(&r, spec, &d.policy, taken_by.as_deref(), &revisions) {
                    // Suspended needs no ServiceAccount: it unloads.
                    Ok(Wanted::Suspended) => Ok(Wanted::Suspended),
                    Ok(Wanted::Run { .. }) => Err(refused),
                    Err(policy) => Err(policy),
                }
            }
        };
        // Which revision starts first on a host where the guest does not run yet depends on the
        // revisions: until they are listed, a Reconciler with a rollout recorded waits.
        let open_rollout = (r.rollout.as_ref()).is_some_and(|p| {
            !matches!(
                p.phase,
                crate::rollout::progress::Phase::Promoted
                    | crate::rollout::progress::Phase::Superseded
            )
        });
        if open_rollout
            && r.current_revision.is_some()
            && d.supervisor.controller(&guest).is_none()
            && !self.revisions_listed
        {
            self.deferred.insert(guest);
            return;
        }
        // A rollout needs a serving revision beside it: where the guest does not run yet, the
        // one serving starts first, and the spec is offered once it serves (see `awaiting`).
        let mut based = false;
        let decision = match decision {
            Ok(wanted) if d.supervisor.controller(&guest).is_none() => {
                match spec::base_for_rollout(&r, &wanted, &revisions) {
                    Some(base) => {
                        based = true;
                        Ok(base)
                    }
                    None => Ok(wanted),
                }
            }
            other => other,
        };
        let configmap = match &decision {
            Ok(Wanted::Run { from, .. }) => from.configmap().map(|(name, _)| name.to_string()),
            _ => None,
        };
        d.apply(&r, decision, force);
        if let Some(t) = d.table.lock().unwrap().get_mut(&guest) {
            t.configmap = configmap;
        }
        self.watch_configmaps();
        if based {
            self.awaiting.insert(guest);
        }
    }

    /// Whether the host may act as `namespace/name`: `None` while the API server is being asked
    /// (the loop hears when it has answered).
    fn may_act_as(&self, namespace: &str, name: &str) -> Option<Result<(), spec::Refusal>> {
        let now = std::time::Instant::now();
        match self
            .impersonation
            .lock()
            .unwrap()
            .look(namespace, name, now)
        {
            impersonation::Known::Answer(answer) => return Some(answer),
            impersonation::Known::Asking => return None,
            impersonation::Known::Ask => {}
        }
        let client = self.dispatch.supervisor.identities().host().clone();
        let (checks, pokes) = (self.impersonation.clone(), self.pokes.clone());
        let (namespace, name) = (namespace.to_string(), name.to_string());
        tokio::spawn(async move {
            let answer = impersonation::ask(&client, &namespace, &name).await;
            let now = std::time::Instant::now();
            checks
                .lock()
                .unwrap()
                .answer(&namespace, &name, answer, now);
            let _ = pokes.send(Poke::Answered(namespace));
        });
        None
    }

    /// Keeps a metadata-only watch of each ConfigMap some Reconciler reads its module from
    /// (`wanted`, just judged, among them), and of no other.
    fn watch_configmaps(&mut self) {
        let needed: std::collections::HashSet<(String, String)> =
            (self.dispatch.table.lock().unwrap())
                .values()
                .filter_map(|t| Some((t.reconciler.namespace.clone(), t.configmap.clone()?)))
                .collect();
        self.watched.retain(|k, task| {
            let keep = needed.contains(k);
            if !keep {
                task.abort();
            }
            keep
        });
        for (ns, name) in needed {
            if self.watched.contains_key(&(ns.clone(), name.clone())) {
                continue;
            }
            let Ok(fields) = FieldSelector::parse(&format!("metadata.name={name}")) else {
                continue;
            };
            let key = InformerKey::new(
                "",
                "v1",
                "ConfigMap",
                Scope {
                    fields,
                    transform: Transform {
                        metadata_only: true,
                        ..Transform::default()
                    },
                    ..Scope::namespace(&ns)
                },
            );
            let Ok(mut sub) = self.factory.subscribe(key, &[]) else {
                continue;
            };
            let tx = self.pokes.clone();
            let (namespace, configmap) = (ns.clone(), name.clone());
            let task = tokio::spawn(async move {
                // Every change, the first list's Added included: that costs one more read of
                // the ConfigMap, whose module the supervisor then finds unchanged.
                while sub.recv().await.is_some() {
                    if tx
                        .send(Poke::ConfigMap(namespace.clone(), configmap.clone()))
                        .is_err()
                    {
                        return;
                    }
                }
            })
            .abort_handle();
            self.watched.insert((ns, name), task);
        }
    }

    /// Reconciler `o` is gone: its guest is unloaded.
    fn remove(&mut self, o: &ObjectRef) {
        if let Some(r) = spec::read(o.json()) {
            self.forget(&r);
        }
    }

    fn forget(&mut self, r: &Reconciler) {
        let guest = r.guest();
        self.dispatch.table.lock().unwrap().remove(&guest);
        self.dispatch.stop(&guest);
        self.dispatch.supervisor.offer(&guest, Offer::Remove);
        self.watch_configmaps();
    }
}

/// What the loop's own tasks tell it.
pub(super) enum Poke {
    /// ConfigMap (namespace, name), which a Reconciler reads its module from, changed.
    ConfigMap(String, String),
    /// The API server answered whether the host may act as a ServiceAccount of this namespace.
    Answered(String),
}

/// `metadata.creationTimestamp` of `o`, RFC 3339 as the API server writes it (which compares as
/// text), or empty.
fn created_at(o: &ObjectRef) -> String {
    #[derive(serde::Deserialize)]
    struct O {
        metadata: M,
    }
    #[derive(serde::Deserialize)]
    struct M {
        #[serde(default, rename = "creationTimestamp")]
        created: String,
    }
    serde_json::from_slice::<O>(o.json())
        .map(|o| o.metadata.created)
        .unwrap_or_default()
}

/// The guest name of the object `o` (a Reconciler, or a labelled ConfigMap of the same name).
fn guest_of(o: &ObjectRef) -> String {
    format!("{}/{}", o.namespace().unwrap_or(""), o.name())
}
