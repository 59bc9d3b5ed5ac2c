//! Key gates: for a guest whose keys are split across replicas (`shard_keys`), each key passes
//! through the gate of the shard its object's uid hashes into, instead of one gate for the whole
//! guest. The replica holding a shard's Lease reconciles that shard's keys and watches only
//! their objects; the others neither watch nor reconcile them.
//!
//! Where it may surprise:
//! - A key's shard comes from its object's uid, which only the cache knows. A key whose object
//!   this replica has never seen (another replica's, or mapped from a secondary kind before its
//!   primary arrived) is not reconciled here; a deleted object's uid is kept from its delete
//!   event until its key reconciles, so that the replica that saw it go cleans up after it.
//! - A key whose shard is held elsewhere is dropped, not queued again: the holder has it. When
//!   this replica takes a shard, its informer is re-scoped and every key in it queued afresh.
//! - The shard follows the uid, not the name: an object deleted and created again under the
//!   same name may land on another replica, which reconciles the new object while the first
//!   still reconciles the deletion of the old one. Both run the key at once there, each on
//!   what it sees; a guest that cleans up by name rather than by ownerReference should not
//!   split its keys.
//! - An object deleted while no replica held its shard (its holder died, the Lease not yet
//!   expired) is never seen going: the next holder lists the objects that exist. A guest that
//!   must act on deletion uses a finalizer, as it must across any restart.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::gate::Gate;
use crate::informer::shard::{self, ShardKey, ShardSet};

/// What a guest's reconciles pass through.
#[derive(Debug, Clone)]
pub enum Gating {
    /// One gate for the whole guest (its shard's among replicas, else one that stays open).
    Whole(Arc<Gate>),
    /// A gate per key (see [`KeyGates`]). `lead` is the gate of the guest's own shard: what
    /// the guest does as a whole (driving a rollout) happens where it is open.
    Keys {
        /// The guest's own shard's gate.
        lead: Arc<Gate>,
        /// The keys' gates.
        keys: KeyGates,
    },
}

impl From<Arc<Gate>> for Gating {
    fn from(gate: Arc<Gate>) -> Self {
        Gating::Whole(gate)
    }
}

/// The gates a key-sharded guest's keys pass through, one per shard, and which shards this
/// replica holds now. Keys are sharded by their object's uid.
#[derive(Debug, Clone)]
pub struct KeyGates {
    gates: Vec<Arc<Gate>>,
    held: watch::Receiver<BTreeSet<u32>>,
}

/// Where one key may be reconciled, as [`route`] decides it.
#[derive(Debug)]
pub enum Route {
    /// Through this gate (its shard's).
    Gate(Arc<Gate>),
    /// Nowhere here: its object is unknown here, so another replica has it (or nobody needs to).
    Unknown,
}

impl KeyGates {
    /// Gates `gates` (shard `i`'s at index `i`), with `held` saying which shards are held here.
    /// No gate at all is taken as one shard that is never held.
    pub fn new(mut gates: Vec<Arc<Gate>>, held: watch::Receiver<BTreeSet<u32>>) -> Self {
        if gates.is_empty() {
            gates.push(Gate::closed("no shard exists"));
        }
        Self { gates, held }
    }

    /// The objects of the shards held now: what this replica's primary informer should watch.
    pub fn held_set(&self) -> ShardSet {
        let held = self.held.borrow().clone();
        held_set(&held, self.gates.len())
    }

    /// A receiver that sees every change of the shards held.
    pub fn watch_held(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.held.clone()
    }

    /// The gate of the shard `uid` falls in.
    pub fn gate_of(&self, uid: &str) -> Arc<Gate> {
        let i = shard::index_of(uid, self.gates.len() as u64);
        self.gates[i as usize].clone()
    }
}

/// The uid ranges of the shards in `held`, of `count` (those past `count` ignored).
pub fn held_set(held: &BTreeSet<u32>, count: usize) -> ShardSet {
    let indices = held
        .iter()
        .map(|i| u64::from(*i))
        .filter(|i| *i < count as u64);
    ShardSet::of(ShardKey::Uid, indices, count as u64)
        .unwrap_or_else(|_| ShardSet::empty(ShardKey::Uid))
}

/// The uids of primaries deleted from the cache whose keys have not reconciled since: a
/// deleted object's key keeps its shard until the replica that saw it go has reconciled it.
#[derive(Debug, Default)]
pub struct Tombstones {
    uids: Mutex<HashMap<String, String>>,
}

impl Tombstones {
    /// Notes that `key`'s object, with `uid`, was deleted.
    pub fn bury(&self, key: &str, uid: &str) {
        self.uids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), uid.to_string());
    }

    /// The uid `key`'s deleted object had, if it was deleted here and not reconciled since.
    pub fn uid(&self, key: &str) -> Option<String> {
        self.uids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Forgets `key`: it reconciled, or its object is back.
    pub fn forget(&self, key: &str) {
        self.uids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// How many deleted keys wait for a reconcile.
    pub fn len(&self) -> usize {
        self.uids.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a key may be reconciled: through the gate of the shard of `uid` (its object's in the
/// cache, else the one it had when deleted), or, without one, nowhere here.
pub fn route(gates: &KeyGates, uid: Option<&str>) -> Route {
    match uid {
        Some(uid) => Route::Gate(gates.gate_of(uid)),
        None => Route::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(n: usize) -> (KeyGates, watch::Sender<BTreeSet<u32>>) {
        let (tx, rx) = watch::channel(BTreeSet::new());
        let gates = (0..n).map(|i| Gate::closed(format!("shard {i}"))).collect();
        (KeyGates::new(gates, rx), tx)
    }

    #[test]
    fn a_key_goes_through_the_gate_of_its_uids_shard() {
        let (g, _tx) = gates(4);
        for uid in (0..100).map(|i| format!("uid-{i}")) {
            let Route::Gate(gate) = route(&g, Some(&uid)) else {
                panic!("a known uid has a gate");
            };
            let i = shard::index_of(&uid, 4) as usize;
            assert!(Arc::ptr_eq(&gate, &g.gates[i]), "{uid}");
        }
        assert!(matches!(route(&g, None), Route::Unknown));
    }

    #[test]
    fn the_held_set_follows_the_shards_held() {
        let (g, tx) = gates(4);
        assert!(g.held_set().is_empty());
        tx.send_replace([1, 2].into());
        let set = g.held_set();
        for uid in (0..200).map(|i| format!("uid-{i}")) {
            let i = shard::index_of(&uid, 4);
            assert_eq!(set.contains(&uid), i == 1 || i == 2, "{uid}");
        }
        assert_eq!(
            held_set(&[0, 9].into(), 4),
            ShardSet::of(ShardKey::Uid, [0], 4).unwrap(),
            "a shard past the count is ignored"
        );
    }

    #[test]
    fn a_tombstone_lasts_until_its_key_is_forgotten() {
        let t = Tombstones::default();
        t.bury("ns/a", "uid-a");
        assert_eq!(t.uid("ns/a").as_deref(), Some("uid-a"));
        assert_eq!(t.len(), 1);
        t.forget("ns/a");
        assert!(t.uid("ns/a").is_none());
        assert!(t.is_empty());
    }
}
