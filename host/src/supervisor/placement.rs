//! Where the supervisor's guests reconcile when the host shares them with other replicas: each
//! guest's gate is its shard's, and the replicas learn which guests exist so that they balance
//! shards by guests (see [`crate::replicas`]).

use super::*;
use crate::controller::gate::Gate;
use crate::controller::key_gates::Gating;

impl Supervisor {
    /// The gates `name`'s reconciles pass through: its shard's among replicas, or with
    /// `shard_keys` each key its own shard's; else one of its own that stays open.
    pub(super) fn gate_for(&self, name: &str, shard_keys: bool) -> Gating {
        match &self.options.replicas {
            Some(r) if shard_keys => Gating::Keys {
                lead: r.gate_for(name),
                keys: r.key_gates(),
            },
            Some(r) => Gating::Whole(r.gate_for(name)),
            None => Gating::Whole(Gate::open()),
        }
    }

    /// Tells the replicas which guests exist, and which have their keys split over every
    /// shard, for balancing shards by guests.
    pub(super) fn publish_guests(&self) {
        if let Some(r) = &self.options.replicas {
            let (mut whole, mut spread) = (Vec::new(), Vec::new());
            for (name, keys) in self.sharding() {
                if keys {
                    spread.push(name)
                } else {
                    whole.push(name)
                }
            }
            r.set_guests(whole, spread);
        }
    }

    /// Each guest's name, and whether its keys are split across the replicas.
    fn sharding(&self) -> Vec<(String, bool)> {
        let guests = self.guests.lock().unwrap();
        guests
            .iter()
            .map(|(name, e)| (name.clone(), e.settings.shard_keys))
            .collect()
    }

    /// The replicas this host shares its guests with, if any.
    pub fn replicas(&self) -> Option<&Arc<Replicas>> {
        self.options.replicas.as_ref()
    }
}
