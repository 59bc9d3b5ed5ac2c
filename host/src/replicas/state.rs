//! The state a replica's tasks share: its gates, the shards it holds, and its Lease writer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use crate::controller::gate::Gate;
use crate::informer::Informer;

use super::config::Config;
use super::lease;
use super::snapshot::Snapshot;

#[derive(Debug)]
pub(super) struct Held {
    pub(super) lease: k8s_openapi::api::coordination::v1::Lease,
    /// When the gate must close unless renewed: the sending of the last successful write plus
    /// the renew deadline.
    pub(super) deadline: Instant,
    pub(super) next_renew: Instant,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) held: BTreeMap<u32, Held>,
    pub(super) snapshot: Snapshot,
}

pub(super) struct Inner {
    pub(super) config: Config,
    pub(super) gates: Vec<Arc<Gate>>,
    pub(super) state: Mutex<State>,
    pub(super) guests: watch::Sender<Guests>,
    /// The shards held here, each with its gate open: what key-sharded guests watch.
    pub(super) held: watch::Sender<BTreeSet<u32>>,
    /// Why this replica stopped taking part, once another process turned out to hold its
    /// identity.
    pub(super) refused: watch::Sender<Option<String>>,
    pub(super) writer: lease::Writer,
    pub(super) informer: Arc<Informer>,
}

/// The guests the shards are balanced by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Guests {
    /// Guests that run whole on their name's shard.
    pub(super) whole: Vec<String>,
    /// Guests whose keys are split over every shard: each weighs one on every shard.
    pub(super) spread: Vec<String>,
}

impl Guests {
    /// Guests per shard, indexed by shard, for `shards` shards.
    pub(super) fn weights(&self, shards: u32) -> Vec<u32> {
        let spread = u32::try_from(self.spread.len()).unwrap_or(u32::MAX);
        let mut weights = vec![spread; shards as usize];
        for g in &self.whole {
            let w = &mut weights[super::shard::shard_of(g, shards) as usize];
            *w = w.saturating_add(1);
        }
        weights
    }
}

impl Inner {
    /// Tells key-sharded guests which shards are held here now.
    pub(super) fn publish_held(&self) {
        let now: BTreeSet<u32> = self.state.lock().unwrap().held.keys().copied().collect();
        self.held.send_if_modified(|h| {
            let changed = *h != now;
            *h = now;
            changed
        });
    }

    /// Gives up shard `shard` locally: the gate closes (cancelling reconciles in flight) and
    /// the shard leaves `held`. Returns the Lease as last written, if it was held.
    pub(super) fn drop_shard(&self, shard: u32, why: String, lost: bool) -> Option<Held> {
        let held = {
            let mut state = self.state.lock().unwrap();
            let held = state.held.remove(&shard)?;
            if lost {
                state.snapshot.lost += 1;
            }
            held
        };
        self.gates[shard as usize].close(why.clone());
        self.publish_held();
        if lost {
            tracing::warn!(
                shard,
                "shard lost: {why}; its guests' reconciles stopped here"
            );
        }
        Some(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicas::assignment::{Input, plan};

    #[test]
    fn a_guest_with_its_keys_spread_weighs_one_on_every_shard() {
        let guests = Guests {
            whole: vec!["a".into()],
            spread: vec!["big".into()],
        };
        let w = guests.weights(12);
        assert_eq!(w.iter().sum::<u32>(), 13);
        assert!(w.iter().all(|n| (1..=2).contains(n)), "{w:?}");
    }

    #[test]
    fn one_spread_guest_over_twelve_shards_gives_three_replicas_four_shards_each() {
        let guests = Guests {
            whole: Vec::new(),
            spread: vec!["big".into()],
        };
        let weights = guests.weights(12);
        let members: Vec<String> = (0..3).map(|i| format!("replica-{i}")).collect();
        let p = plan(&Input {
            members: &members,
            weights: &weights,
            holders: &vec![None; 12],
            spread: true,
        });
        for m in &members {
            assert_eq!(p.iter().filter(|o| *o == m).count(), 4, "{p:?}");
        }
    }
}
