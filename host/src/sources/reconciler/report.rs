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
    current: HashMap<String, String>,
    /// Revisions this replica created that the cache may not show yet, by owner uid.
    created: HashMap<String, Vec<Revision>>,
    /// Revisions this replica deleted that the cache may still show.
    deleted: HashSet<String>,
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
        let live: HashSet<&str> = tracked.iter().map(|(g, _)| g.as_str()).collect();
        memory.written.retain(|g, _| live.contains(g.as_str()));
        memory.current.retain(|g, _| live.contains(g.as_str()));
        let mut by_owner: HashMap<String, Vec<Revision>> = HashMap::new();
        for o in inputs.revisions.all() {
            if let Some(r) = revisions::read(o.json()) {
                by_owner.entry(r.owner.clone()).or_default().push(r);
            }
        }
        memory.deleted.retain(|name| {
            by_owner
                .values()
                .any(|rs| rs.iter().any(|r| &r.name == name))
        });
        for (guest, t) in &tracked {
            let (owner, shard, mine) = placement(&inputs.supervisor, guest);
            if !mine {
                // Another replica writes; if this one takes over, it writes at once.
                memory.written.remove(guest);
                continue;
            }
            let status = inputs.supervisor.guest_status(guest);
            let known = by_owner.remove(&t.reconciler.uid).unwrap_or_default();
            let revision = record(
                &inputs.supervisor,
                &client,
                &mut memory,
                guest,
                t,
                status.as_ref(),
                known,
            )
            .await;
            let key = format!("{}/{}", t.reconciler.namespace, t.reconciler.name);
            let previous = inputs
                .reconcilers
                .get(&key)
                .and_then(|o| serde_json::from_slice::<Value>(o.json()).ok())
                .map(|v| v["status"].clone())
                .unwrap_or(Value::Null);
            let pending = !inputs.supervisor.offers_settled(&[guest.clone()].into());
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
            match write_status(&client, &t.reconciler.namespace, &t.reconciler.name, &doc).await {
                Ok(()) => {
                    memory.written.insert(
                        guest.clone(),
                        Written {
                            at: Instant::now(),
                            doc,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(reconciler = %guest, "cannot write the Reconciler's status (the host needs patch on reconciled.dev reconcilers/status); tried again next tick: {e}");
                }
            }
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

/// Records the version `guest` serves as a revision (creating it if it is new), marks the
/// revision it replaced, and prunes past the limit. Returns the number of the revision serving.
async fn record(
    supervisor: &Supervisor,
    client: &kube::Client,
    memory: &mut Memory,
    guest: &str,
    t: &Tracked,
    status: Option<&GuestStatus>,
    mut known: Vec<Revision>,
) -> Option<u64> {
    let r = &t.reconciler;
    if let Some(created) = memory.created.get_mut(&r.uid) {
        created.retain(|c| !known.iter().any(|k| k.name == c.name));
        known.extend(created.iter().cloned());
    }
    known.retain(|k| !memory.deleted.contains(&k.name));
    // Only a version that runs is a revision: one held back (informers not synced, access not
    // granted) has not reconciled anything yet.
    let status = status.filter(|s| matches!(s.state, GuestState::Serving | GuestState::Failing))?;
    let digest = status.digest.clone()?;
    // The version serving must be this Reconciler's (not a predecessor's of the same name).
    let Some(Source::Reconciler { uid, module, .. }) = supervisor.source_of(guest) else {
        return None;
    };
    if uid != r.uid {
        return None;
    }
    let controller = supervisor.controller(guest)?;
    let settings = controller.guest_settings();
    let number = match revisions::number_for(&known, &digest, &settings) {
        Ok(n) => n,
        Err(n) => {
            let served_from = status
                .loaded_at
                .clone()
                .unwrap_or_else(|| crate::text::rfc3339(SystemTime::now()));
            let new = revisions::New {
                namespace: &r.namespace,
                reconciler: &r.name,
                uid: &r.uid,
                number: n,
                digest: &digest,
                module: &module,
                settings: &settings,
                declared: controller.declaration(),
                served_from: &served_from,
            };
            if let Err(e) = revisions::create(client, new).await {
                tracing::warn!(reconciler = %guest, "{e}");
                return None;
            }
            tracing::info!(reconciler = %guest, revision = n, %digest, "revision recorded");
            let revision = Revision {
                name: revisions::name_of(&r.name, n),
                number: n,
                owner: r.uid.clone(),
                digest: digest.clone(),
                module: module.clone(),
                settings: settings.clone(),
            };
            memory
                .created
                .entry(r.uid.clone())
                .or_default()
                .push(revision.clone());
            known.push(revision);
            n
        }
    };
    let name = revisions::name_of(&r.name, number);
    if let Some(before) = memory.current.insert(guest.to_string(), name.clone())
        && before != name
        && let Err(e) = revisions::set_served(
            client,
            &r.namespace,
            &before,
            json!({ "servedUntil": crate::text::rfc3339(SystemTime::now()) }),
        )
        .await
    {
        tracing::debug!(reconciler = %guest, revision = %before, "cannot mark when the revision stopped serving: {e}");
    }
    let keep: Vec<u64> = std::iter::once(number).chain(t.pinned).collect();
    for gone in revisions::prunable(&known, &keep, t.history) {
        match revisions::delete(client, &r.namespace, &gone.name).await {
            Ok(()) => {
                tracing::info!(reconciler = %guest, revision = gone.number, "revision pruned (revisionHistoryLimit)");
                memory.deleted.insert(gone.name.clone());
            }
            Err(e) => tracing::warn!(reconciler = %guest, "{e}"),
        }
    }
    Some(number)
}

/// Applies `status` to Reconciler `namespace/name`'s status subresource.
async fn write_status(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    status: &Value,
) -> Result<(), kube::Error> {
    let gvk = kube::api::GroupVersionKind::gvk(GROUP, VERSION, "Reconciler");
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource::from_gvk(&gvk),
    );
    let patch = json!({
        "apiVersion": RECONCILER_API_VERSION,
        "kind": "Reconciler",
        "metadata": { "name": name, "namespace": namespace },
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
