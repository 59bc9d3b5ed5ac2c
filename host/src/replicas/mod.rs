//! Replicas: several hosts share the guests between them through `coordination.k8s.io` Leases.
//!
//! Every guest hashes onto one of a fixed number of shards ([`shard::shard_of`]); each shard is
//! one Lease, `<group>-shard-<n>`, in the host's namespace, and each replica announces itself
//! with a Lease of its own, `<group>-replica-<identity>`. Every replica loads every guest (its
//! module compiled, its informers synced), but a guest's reconciles run only where its shard's
//! Lease is held: its [`Gate`] is open there and closed everywhere else. Under cold standby
//! ([`Standby::Cold`]) a replica loads only the guests of the shards it holds, and loads the
//! others' as it takes their shards (the supervisor does, following [`Replicas::held`]). Which replica should
//! hold which shard is computed by each replica from the same Leases ([`assignment`]), balanced
//! by guests; the Leases alone decide who does.
//!
//! Safety, and the margins it rests on:
//! - A replica opens a shard's gate only after a write of its Lease succeeded, and closes it
//!   (cancelling reconciles in flight) when `renew_deadline` has passed since the *sending* of
//!   the last write that succeeded, whether or not the API server answers meanwhile: a
//!   watchdog task does it, on a timer of its own.
//! - Another replica may take the shard only once `lease_duration` has passed since it *saw*
//!   that write, which is later than it was sent. So the holder stops at least
//!   `lease_duration - renew_deadline` (5 s by default) before anyone else may start. That
//!   margin absorbs clock-rate differences between the machines (tiny), a write already sent
//!   when the gate closed (the API server answers within it or the request times out), and a
//!   reconcile's cancellation (at its next await; guests yield every 5 ms).
//! - Every write is guarded by the resourceVersion read: of two replicas racing for a free
//!   shard, one wins.
//!
//! A guest may instead have its keys split across the replicas (`shard_keys`): shard `i` is
//! then also the `i`-th of `shards` equal ranges of its objects' uid hash, and the replica
//! holding shard `i`'s Lease watches and reconciles the objects in that range
//! ([`Replicas::key_gates`]). Such a guest weighs one on every shard, so the shards, and with
//! them its keys, are spread evenly; with `shards` a multiple of the replicas each gets an equal
//! share (16 shards over 3 replicas split 6/5/5, 12 or 24 split evenly).
//!
//! Where it may surprise:
//! - Lease writes per second are `(shards + replicas) / renew interval`, independent of the
//!   number of guests; the renew interval is a third of the lease duration (5 s by default),
//!   not the retry period, which paces only retries after a failed renew.
//! - Identities must be unique: the pod name is (`POD_NAME`). A process writes a token of its
//!   own into its replica Lease ([`instance`]); a second process started with an identity whose
//!   Lease another live process renews refuses to start ([`Error::Duplicate`]), and one that
//!   finds out later (both started at once) stops taking part ([`Replicas::refused`]).
//! - A replica killed without deleting its Lease leaves it behind; the first replica alive by
//!   name deletes it once it has been expired for [`stale::AFTER_DURATIONS`] lease durations,
//!   and so shard Leases beyond a lowered `shards` count. The last replica to stop cleanly
//!   deletes the shard Leases, so removing every replica leaves no Lease behind. Where the
//!   replicas lose the rights to first (an uninstall deletes their Role with their
//!   Deployment), [`Config::lease_owner`] names a ConfigMap owning every Lease, and the garbage
//!   collector deletes them with it.
//! - A shard moves on its own only when the plan has wanted it elsewhere for
//!   `rebalance_after`, so a replica joining takes its share after that long, not at once.

pub mod assignment;
mod config;
mod decide;
mod elector;
pub mod identity;
pub mod instance;
pub mod lease;
pub mod shard;
mod snapshot;
pub mod stale;
mod state;

pub use config::{Config, Error, Standby};
pub use snapshot::{Placement, ShardView, Snapshot};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::controller::gate::Gate;
use crate::controller::key_gates::KeyGates;
use crate::informer::{self, Informer, InformerKey, Scope};
use crate::selector::LabelSelector;

use state::{Guests, Inner, State};

/// This replica's part in a group of replicas. Dropping it stops its tasks without releasing
/// anything; [`Replicas::shutdown`] hands the shards over at once.
pub struct Replicas {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

impl Replicas {
    /// Joins the group: claims this replica's identity, then watches the group's Leases and
    /// starts taking, renewing and handing over shards. Every gate starts closed.
    ///
    /// Where it may surprise: if the identity's Lease is held by another process, this waits up
    /// to a lease duration (15 s by default) to see whether that process renews it, and fails
    /// with [`Error::Duplicate`] if it does; a replica restarted after a crash therefore joins
    /// only once its old Lease has gone unrenewed that long.
    pub async fn start(client: kube::Client, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let selector = LabelSelector::parse(&format!("{}={}", lease::GROUP_LABEL, config.group))
            .map_err(|e| Error::Config(format!("group {:?}: {e}", config.group)))?;
        let key = InformerKey::new(
            "coordination.k8s.io",
            "v1",
            "Lease",
            Scope {
                labels: selector,
                ..Scope::namespace(&config.namespace)
            },
        );
        let informer = Informer::start(client.clone(), key, informer::Options::default());
        let owner = match &config.lease_owner {
            Some(name) => owner_of(&client, &config.namespace, name).await,
            None => None,
        };
        let writer = lease::Writer::new(
            client,
            &config.namespace,
            (&config.group, &config.identity, &instance::token()),
            config.lease_duration,
            config.retry_period,
        );
        let writer = match owner {
            Some(o) => writer.with_owner(o),
            None => writer,
        };
        let (claimed, observed) =
            elector::claim_observing(&writer, &config, informer.store()).await?;
        let gates = (0..config.shards)
            .map(|s| Gate::closed(format!("shard {s} is not held by this replica")))
            .collect();
        let inner = Arc::new(Inner {
            gates,
            state: Mutex::new(State {
                held: BTreeMap::new(),
                snapshot: Snapshot {
                    identity: config.identity.clone(),
                    namespace: config.namespace.clone(),
                    ..Snapshot::default()
                },
            }),
            guests: watch::Sender::new(Guests::default()),
            held: watch::Sender::new(BTreeSet::new()),
            refused: watch::Sender::new(None),
            writer,
            informer,
            config,
        });
        tracing::info!(identity = %inner.config.identity, namespace = %inner.config.namespace, shards = inner.config.shards, lease_duration = ?inner.config.lease_duration, renew_deadline = ?inner.config.renew_deadline, "joining the replicas: guests run where their shard's Lease is held");
        let tasks = vec![
            tokio::spawn(elector::elect(inner.clone(), claimed, observed)).abort_handle(),
            tokio::spawn(elector::watchdog(inner.clone())).abort_handle(),
        ];
        Ok(Self {
            inner,
            tasks: Mutex::new(tasks),
        })
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The shard of guest `name`.
    pub fn shard_of(&self, name: &str) -> u32 {
        shard::shard_of(name, self.inner.config.shards)
    }

    /// The gate of guest `name`'s shard, shared by every guest on it.
    pub fn gate_for(&self, name: &str) -> Arc<Gate> {
        self.inner.gates[self.shard_of(name) as usize].clone()
    }

    /// Whether this replica holds guest `name`'s shard now, with its gate open.
    pub fn holds(&self, name: &str) -> bool {
        self.inner.held.borrow().contains(&self.shard_of(name))
    }

    /// The shards held here, each with its gate open; changes as shards are taken and lost.
    pub fn held(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.inner.held.subscribe()
    }

    /// The gates of a guest whose keys are split across the replicas: shard `i`'s gate for the
    /// keys whose uid hashes into the `i`-th range, and which shards are held here.
    pub fn key_gates(&self) -> KeyGates {
        KeyGates::new(self.inner.gates.clone(), self.inner.held.subscribe())
    }

    /// Tells the replicas which guests exist, so that shards are balanced by guests: `whole`
    /// run on their name's shard, `spread` have their keys split over every shard. Every
    /// replica should be told the same names (it is, when each loads every guest).
    pub fn set_guests(&self, whole: Vec<String>, spread: Vec<String>) {
        let tidy = |mut v: Vec<String>| {
            v.sort();
            v.dedup();
            v
        };
        let next = Guests {
            whole: tidy(whole),
            spread: tidy(spread),
        };
        self.inner.guests.send_if_modified(|g| {
            let changed = *g != next;
            *g = next;
            changed
        });
    }

    /// Where guest `name` runs.
    pub fn placement(&self, name: &str) -> Placement {
        let shard = self.shard_of(name);
        let state = self.inner.state.lock().unwrap();
        let owner = state
            .snapshot
            .shards
            .get(shard as usize)
            .and_then(|s| s.holder.clone());
        drop(state);
        Placement {
            shard,
            owner,
            here: self.inner.held.borrow().contains(&shard),
        }
    }

    /// Resolves, with the reason, once this replica has stopped taking part because another
    /// running process holds its identity (both started at once, so neither saw the other as
    /// it started). Its gates are closed by then; the process should stop: it can do nothing.
    pub async fn refused(&self) -> String {
        let mut rx = self.inner.refused.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Why this replica cannot take part, if it cannot: another process holds its identity,
    /// its Lease informer has not synced (forbidden, with the RBAC rule to add), or the API
    /// server forbade its last Lease write. Passing trouble (a write that timed out) is not a
    /// problem: renewals retry it.
    pub fn problem(&self) -> Option<String> {
        if let Some(why) = self.inner.refused.borrow().clone() {
            return Some(format!("replicas: {why}"));
        }
        let ns = &self.inner.config.namespace;
        let st = self.inner.informer.status();
        if !st.state.is_synced() {
            return Some(format!("replicas: the Leases in namespace {ns}: {st}"));
        }
        let state = self.inner.state.lock().unwrap();
        state.snapshot.forbidden.as_ref().map(|e| {
            format!(
                "replicas: {e}; the host needs get, list, watch, create, update and delete on coordination.k8s.io leases in namespace {ns} (see deploy/reconciled.yaml)"
            )
        })
    }

    /// What this replica knows now.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.inner.state.lock().unwrap();
        let mut s = state.snapshot.clone();
        s.held = state.held.keys().copied().collect();
        s
    }

    /// Stops at once, as a killed process does: no renewal, no hand-over, every gate closed, so
    /// the Leases it holds expire and another replica takes them. For tests of failover.
    #[cfg(feature = "fault-injection")]
    pub fn crash(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
        for gate in &self.inner.gates {
            gate.close("this replica crashed");
        }
        self.inner.held.send_replace(BTreeSet::new());
    }

    /// Hands every shard over at once, for a quick rolling update: stops taking shards, closes
    /// every gate (cancelling reconciles in flight), waits up to a second for them to end, then
    /// releases each Lease it holds and deletes its own, so the others take over within about a
    /// second instead of a lease duration. A shard whose reconciles did not end in time is not
    /// released: it expires instead, which is slower but safe. Then it waits up to two seconds
    /// to see whether every other replica is going too, and if so deletes the shard Leases.
    ///
    /// Once [`Replicas::refused`], nothing is released or deleted: the Leases that name this
    /// identity are the other process's.
    pub async fn shutdown(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
        if self.inner.refused.borrow().is_some() {
            return;
        }
        elector::hand_over(&self.inner).await;
    }
}

/// The owner reference of ConfigMap `namespace/name`, for the Leases; `None`, with a warning,
/// if it cannot be read: the Leases are then written without an owner. Listed by name rather
/// than read, as the host may list ConfigMaps everywhere but get none.
async fn owner_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
    let lp = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let found = match api.list_metadata(&lp).await {
        Ok(list) => list.items.into_iter().next(),
        Err(e) => {
            tracing::warn!(
                "[replicas] lease_owner: cannot read ConfigMap {namespace}/{name} ({e}); the Leases are written without an owner, and outlive the release"
            );
            return None;
        }
    };
    let Some(uid) = found.and_then(|m| m.metadata.uid) else {
        tracing::warn!(
            "[replicas] lease_owner: there is no ConfigMap {namespace}/{name}; the Leases are written without an owner, and outlive the release"
        );
        return None;
    };
    Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: name.to_string(),
            uid,
            ..Default::default()
        },
    )
}
