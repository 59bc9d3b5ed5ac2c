//! What a Reconciler's owner writes back: its revisions (one per version served, pruned to the
//! limit) and its status, by server-side apply under one field manager, at a bounded rate.
//!
//! Where it may surprise:
//! - Only the replica holding a guest's shard writes (a host without replicas always does).
//!   A shard changing hands makes the new holder write at once, naming itself.
//! - A write that fails is logged and tried again at the next tick; a tick writes Reconcilers
//!   one after another, so a slow API server slows the status, never the guests.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::revisions::{self, FIELD_MANAGER, Revision};
use super::spec::Reconciler;
use super::status::{self, Pace, View, Written};
use super::table::{GROUP, Table, Tracked, VERSION};
use crate::informer::store::Store;
use crate::ops::status::{GuestState, GuestStatus};
use crate::supervisor::{RECONCILER_API_VERSION, Source, Supervisor};

/// How often status is looked at and written.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often each Reconciler's status is computed [1 s].
    pub tick: Duration,
    /// Least time between two status writes of one Reconciler [5 s].
    pub min_gap: Duration,
    /// Least time between two writes that change only counts (reconciles, errors) [60 s].
    pub refresh: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            min_gap: Duration::from_secs(5),
            refresh: Duration::from_secs(60),
        }
    }
}

/// What the reporter reads.
pub(super) struct Inputs {
    pub(super) table: Table,
    pub(super) supervisor: Arc<Supervisor>,
    pub(super) reconcilers: Store,
    pub(super) revisions: Store,
    pub(super) options: Options,
}

/// What the reporter remembers between ticks.
#[derive(Default)]
struct Memory {
    written: HashMap<String, Written>,
    /// The revision each guest served at the last tick, to mark when it stopped.
    current: HashMap<String, (u64, String)>,
    /// Revisions this replica created that the cache may not show yet, by owner uid.
    created: HashMap<String, Vec<Revision>>,
    /// Revisions this replica deleted that the cache may still show, by (namespace, name).
    deleted: HashSet<(String, String)>,
    /// When a failed revision write of a guest may be tried again.
    retry_at: HashMap<String, Instant>,
}

pub(super) async fn run(inputs: Inputs) {
    let pace = Pace {
        min_gap: inputs.options.min_gap,
        refresh: inputs.options.refresh,
    };
    let client = inputs.supervisor.identities().host().clone();
    let mut memory = Memory::default();
    let mut tick = tokio::time::interval(inputs.options.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let tracked: Vec<(String, Tracked)> = (inputs.table.lock().unwrap())
            .iter()
            .map(|(g, t)| (g.clone(), t.clone()))
            .collect();
        memory.forget_gone(&tracked);
        memory.seen(&inputs.revisions);
        for (guest, t) in &tracked {
            let (owner, shard, mine) = placement(&inputs.supervisor, guest);
            if !mine {
                // Another replica writes; if this one takes over, it writes at once.
                memory.written.remove(guest);
                continue;
            }
            let status = inputs.supervisor.guest_status(guest);
            let known = revisions::of(
                &inputs.revisions,
                &t.reconciler.namespace,
                &t.reconciler.uid,
            );
            let revision = match memory.retry_at.get(guest) {
                Some(at) if *at > Instant::now() => memory.current_number(guest),
                _ => {
                    let r = record(
                        &inputs.supervisor,
                        &client,
                        &mut memory,
                        guest,
                        t,
                        status.as_ref(),
                        known,
                    )
                    .await;
                    match r {
                        Ok(n) => n,
                        Err(()) => {
                            memory
                                .retry_at
                                .insert(guest.clone(), Instant::now() + pace.min_gap);
                            memory.current_number(guest)
                        }
                    }
                }
            };
            let key = format!("{}/{}", t.reconciler.namespace, t.reconciler.name);
            let previous = inputs
                .reconcilers
                .get(&key)
                .and_then(|o| serde_json::from_slice::<Value>(o.json()).ok())
                .map(|v| v["status"].clone())
                .unwrap_or(Value::Null);
            let pending = inputs.supervisor.loading(guest);
            let view = View {
                generation: t.reconciler.generation,
                accepted: t.verdict.as_ref().map(Vec::as_slice),
                suspended: t.suspended,
                guest: status.as_ref(),
                pending,
                revision,
                owner: owner.as_deref(),
                shard,
            };
            let now = crate::text::rfc3339(SystemTime::now());
            let doc = status::document(&view, &previous, &now);
            if !status::due(memory.written.get(guest), &doc, Instant::now(), pace) {
                continue;
            }
            memory.write(&client, guest, &t.reconciler, doc, pace).await;
        }
    }
}

/// Where guest `guest` runs: its owner and shard, and whether this replica is the owner.
fn placement(supervisor: &Supervisor, guest: &str) -> (Option<String>, Option<u32>, bool) {
    match supervisor.replicas() {
        None => (None, None, true),
        Some(r) => {
            let p = r.placement(guest);
            let mine = p.owner.as_deref() == Some(r.config().identity.as_str());
            (p.owner, Some(p.shard), mine)
        }
    }
}

impl Memory {
    /// Forgets what it kept of Reconcilers no longer tracked.
    fn forget_gone(&mut self, tracked: &[(String, Tracked)]) {
        let live: HashSet<&str> = tracked.iter().map(|(g, _)| g.as_str()).collect();
        self.written.retain(|g, _| live.contains(g.as_str()));
        self.current.retain(|g, _| live.contains(g.as_str()));
        self.retry_at.retain(|g, _| live.contains(g.as_str()));
        let uids: HashSet<&str> = tracked
            .iter()
            .map(|(_, t)| t.reconciler.uid.as_str())
            .collect();
        self.created.retain(|uid, _| uids.contains(uid.as_str()));
    }

    /// Forgets the deletions the cache of revisions has caught up with.
    fn seen(&mut self, revisions: &Store) {
        self.deleted
            .retain(|(ns, name)| revisions.get(&format!("{ns}/{name}")).is_some());
    }

    /// Whether `r` was deleted here though the cache may still show it.
    fn hides(&self, r: &Revision) -> bool {
        self.deleted
            .contains(&(r.namespace.clone(), r.name.clone()))
    }

    /// Writes `doc` as `r`'s status; a failure is tried again after the least gap, not at
    /// every tick.
    async fn write(
        &mut self,
        client: &kube::Client,
        guest: &str,
        r: &Reconciler,
        doc: Value,
        pace: Pace,
    ) {
        let at = Instant::now();
        let written = match write_status(client, r, &doc).await {
            Ok(()) => doc,
            Err(e) => {
                tracing::warn!(reconciler = %guest, "cannot write the Reconciler's status (the host needs patch on reconciled.dev reconcilers/status); tried again in {:?}: {e}", pace.min_gap);
                Value::Null
            }
        };
        self.written
            .insert(guest.to_string(), Written { at, doc: written });
    }

    /// The number of the revision `guest` served at the last look, if known.
    fn current_number(&self, guest: &str) -> Option<u64> {
        self.current.get(guest).map(|(n, _)| *n)
    }
}

/// Records the version `guest` serves as a revision (creating it if it is new), marks the
/// revision it replaced, and prunes past the limit. Returns the number of the revision serving
/// (`None` while nothing of this Reconciler's serves), or `Err` when a write failed: it is
/// tried again after a while.
async fn record(
    supervisor: &Supervisor,
    client: &kube::Client,
    memory: &mut Memory,
    guest: &str,
    t: &Tracked,
    status: Option<&GuestStatus>,
    mut known: Vec<Revision>,
) -> Result<Option<u64>, ()> {
    let r = &t.reconciler;
    if let Some(created) = memory.created.get_mut(&r.uid) {
        created.retain(|c| !known.iter().any(|k| k.name == c.name));
        known.extend(created.iter().cloned());
    }
    known.retain(|k| !memory.hides(k));
    // Only a version that runs is a revision: one held back (informers not synced, access not
    // granted) has not reconciled anything yet.
    let Some(status) =
        status.filter(|s| matches!(s.state, GuestState::Serving | GuestState::Failing))
    else {
        return Ok(None);
    };
    // Digest, settings and source of one version: read around a reload, they are read again
    // at the next look rather than recorded mixed.
    let source = supervisor.source_of(guest);
    let Some(controller) = supervisor.controller(guest) else {
        return Ok(None);
    };
    let (digest, settings) = (controller.digest(), controller.guest_settings());
    if supervisor.source_of(guest) != source || status.digest.as_deref() != Some(digest.as_str()) {
        return Ok(None);
    }
    // The version serving must be this Reconciler's (not a predecessor's of the same name).
    let Some(Source::Reconciler { uid, module, .. }) = source else {
        return Ok(None);
    };
    if uid != r.uid {
        return Ok(None);
    }
    let number = match revisions::number_for(&known, &digest, &settings) {
        Ok(n) => n,
        Err(n) => {
            let new = NewRevision {
                number: n,
                digest: &digest,
                module: &module,
                settings: &settings,
                loaded_at: status.loaded_at.as_deref(),
            };
            create(client, memory, guest, r, &controller, new).await?;
            known.push(
                memory.created[&r.uid]
                    .last()
                    .cloned()
                    .expect("just recorded"),
            );
            n
        }
    };
    tidy(client, memory, guest, t, number, &known).await?;
    Ok(Some(number))
}

/// What a new revision records of the version serving.
struct NewRevision<'a> {
    number: u64,
    digest: &'a str,
    module: &'a str,
    settings: &'a crate::guest::settings::GuestSettings,
    loaded_at: Option<&'a str>,
}

/// Creates revision `new` of `r`, and remembers it until the cache shows it.
async fn create(
    client: &kube::Client,
    memory: &mut Memory,
    guest: &str,
    r: &Reconciler,
    controller: &crate::controller::Controller,
    new: NewRevision<'_>,
) -> Result<(), ()> {
    let served_from = new
        .loaded_at
        .map_or_else(|| crate::text::rfc3339(SystemTime::now()), str::to_string);
    let written = revisions::New {
        namespace: &r.namespace,
        reconciler: &r.name,
        uid: &r.uid,
        number: new.number,
        digest: new.digest,
        module: new.module,
        settings: new.settings,
        declared: controller.declaration(),
        served_from: &served_from,
    };
    match revisions::create(client, written).await {
        Ok(true) => {}
        // The name is taken: this replica's own write the cache has not shown yet, or a
        // predecessor's of the same name not yet collected. Looked at again later.
        Ok(false) => return Err(()),
        Err(e) => {
            tracing::warn!(reconciler = %guest, "{e}");
            return Err(());
        }
    }
    tracing::info!(reconciler = %guest, revision = new.number, digest = %new.digest, "revision recorded");
    memory
        .created
        .entry(r.uid.clone())
        .or_default()
        .push(Revision {
            namespace: r.namespace.clone(),
            name: revisions::name_of(&r.name, new.number),
            uid: String::new(),
            number: new.number,
            owner: r.uid.clone(),
            digest: new.digest.to_string(),
            module: new.module.to_string(),
            settings: new.settings.clone(),
        });
    Ok(())
}

/// Marks when revision `number` of `t` started serving and the one before it stopped, and
/// prunes past the limit.
async fn tidy(
    client: &kube::Client,
    memory: &mut Memory,
    guest: &str,
    t: &Tracked,
    number: u64,
    known: &[Revision],
) -> Result<(), ()> {
    let r = &t.reconciler;
    let name = revisions::name_of(&r.name, number);
    let before = memory
        .current
        .insert(guest.to_string(), (number, name.clone()));
    if let Some((_, before)) = before.filter(|(_, b)| *b != name) {
        let now = crate::text::rfc3339(SystemTime::now());
        // Merge patches: each sets its fields and leaves the others as they are.
        for (revision, status) in [
            (&before, json!({ "servedUntil": now })),
            (&name, json!({ "servedFrom": now, "servedUntil": null })),
        ] {
            if let Err(e) = revisions::set_served(client, &r.namespace, revision, status).await {
                tracing::debug!(reconciler = %guest, %revision, "cannot record when the revision served: {e}");
            }
        }
    }
    let keep: Vec<u64> = std::iter::once(number).chain(t.pinned).collect();
    let mut failed = false;
    for gone in revisions::prunable(known, &keep, t.history) {
        match revisions::delete(client, gone).await {
            Ok(()) => {
                tracing::info!(reconciler = %guest, revision = gone.number, "revision pruned (revisionHistoryLimit)");
                memory
                    .deleted
                    .insert((gone.namespace.clone(), gone.name.clone()));
            }
            Err(e) => {
                tracing::warn!(reconciler = %guest, "{e}");
                failed = true;
            }
        }
    }
    if failed { Err(()) } else { Ok(()) }
}

/// Applies `status` to Reconciler `r`'s status subresource; its uid makes the apply fail rather
/// than write onto another Reconciler created since under the same name.
async fn write_status(
    client: &kube::Client,
    r: &Reconciler,
    status: &Value,
) -> Result<(), kube::Error> {
    let (namespace, name) = (r.namespace.as_str(), r.name.as_str());
    let gvk = kube::api::GroupVersionKind::gvk(GROUP, VERSION, "Reconciler");
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource::from_gvk(&gvk),
    );
    let patch = json!({
        "apiVersion": RECONCILER_API_VERSION,
        "kind": "Reconciler",
        "metadata": { "name": name, "namespace": namespace, "uid": r.uid },
        "status": status,
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::store::Writer;
    use crate::object::{Object, Transform};

    fn revision(namespace: &str, name: &str) -> crate::object::ObjectRef {
        let json = json!({
            "metadata": {
                "name": name, "namespace": namespace, "uid": format!("uid-{namespace}"),
                "ownerReferences": [{
                    "apiVersion": RECONCILER_API_VERSION, "kind": "Reconciler", "name": "stamp",
                    "uid": format!("owner-{namespace}"), "controller": true,
                }],
            },
            "spec": {"revision": 1, "digest": "aa", "source": "configmap/m/stamp.wasm"},
        });
        Arc::new(Object::from_value(json, &Transform::none(), None).unwrap())
    }

    #[test]
    fn a_revision_pruned_in_one_namespace_hides_none_of_the_same_name_in_another() {
        let writer = Writer::new();
        writer.upsert(revision("team-a", "stamp-1"));
        writer.upsert(revision("team-b", "stamp-1"));
        let store = writer.reader();
        let mut memory = Memory::default();
        memory
            .deleted
            .insert(("team-a".to_string(), "stamp-1".to_string()));
        memory.seen(&store);
        let a = revisions::of(&store, "team-a", "owner-team-a");
        let b = revisions::of(&store, "team-b", "owner-team-b");
        assert_eq!((a.len(), b.len()), (1, 1), "one revision each, by owner");
        assert!(memory.hides(&a[0]), "still in the cache: still hidden");
        assert!(
            !memory.hides(&b[0]),
            "team-b's revision of the same name is not hidden"
        );
        writer.remove("team-a/stamp-1");
        memory.seen(&store);
        assert!(memory.deleted.is_empty(), "gone from the cache: forgotten");
    }
}
