//! Cold standby (`[replicas] standby = "cold"`): a guest is loaded only on the replica that
//! holds its shard. Everywhere else it is *parked*: the supervisor keeps its entry (so every
//! replica still balances shards by the same guests), its source, its settings and its module's
//! bytes, but no controller, no instance and no informers. When this replica takes the shard,
//! the stashed bytes are offered again and load as any offer does (the compiled artifact from
//! the disk cache, informers synced before the first reconcile); when it loses the
//! shard, the guest is stopped and parked again.
//!
//! [`place`] and [`decide`] are the decisions, pure; the rest of this module carries them out.
//!
//! Where it may surprise:
//! - A takeover costs a load and an initial sync of everything the guest reads (a LIST, or a
//!   watch stream where the API server offers one), where a warm one costs neither: cold
//!   standby trades takeover time for each replica caching only its own guests.
//! - A parked guest keeps its seat in its namespace's guest quota: some replica serves it, and
//!   the quota counts guests, not where they run.
//! - A parked guest's module is not validated here: the replica holding its shard rejects a bad
//!   one, and only that replica posts the guest's Events.
//! - Guests with `shard_keys` and guests rolled out step by step stay loaded everywhere (see
//!   [`crate::replicas::Standby`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::offers::{Offer, Stash};
use super::{Applied, Source, Supervisor};
use crate::controller::Settings;
use crate::replicas::Standby;

/// Where a guest belongs on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Loaded,
    Parked,
}

/// Where a guest belongs: loaded, unless cold standby parks it because another replica holds
/// its shard. Guests that run on every replica (`shard_keys`) and guests rolled out step by
/// step (whose staged revision a takeover resumes) are never parked.
pub(super) fn place(
    standby: Standby,
    holds_shard: bool,
    shard_keys: bool,
    progressive: bool,
) -> Place {
    match standby {
        Standby::Cold if !(holds_shard || shard_keys || progressive) => Place::Parked,
        _ => Place::Loaded,
    }
}

/// What to do about a guest whose shard came or went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Move {
    /// Offer the stashed module again.
    Load,
    /// Stop the serving controller and keep the module.
    Park,
}

/// What a guest needs, given where it belongs and what it is now: a parked guest that
/// belongs loaded is offered again, a serving one that belongs parked is parked. A guest
/// neither serving nor parked (rejected, still loading) is left to its offers.
pub(super) fn decide(place: Place, serving: bool, parked: bool) -> Option<Move> {
    match place {
        Place::Loaded if parked && !serving => Some(Move::Load),
        Place::Parked if serving => Some(Move::Park),
        _ => None,
    }
}

impl Supervisor {
    /// Whether this host parks the guests of shards held elsewhere: cold standby is set and
    /// [`Supervisor::follow_shards`] runs, which alone can load them again.
    pub(super) fn cold(&self) -> bool {
        self.standby() == Standby::Cold
    }

    fn standby(&self) -> Standby {
        match (&self.options.replicas, self.me.get()) {
            (Some(r), Some(_)) => r.config().standby,
            _ => Standby::Warm,
        }
    }

    /// Where guest `name`, run with `settings`, belongs on this replica now.
    pub(super) fn place_of(&self, name: &str, settings: &Settings) -> Place {
        let holds = self.options.replicas.as_ref().is_none_or(|r| r.holds(name));
        place(
            self.standby(),
            holds,
            settings.shard_keys,
            settings.rollout.progressive(),
        )
    }

    /// Under cold standby, loads and parks guests as this replica takes and loses shards, for
    /// as long as the supervisor lives; does nothing under warm standby or without replicas.
    /// Call it once, after creating the supervisor: offers made before are placed then.
    ///
    /// Where it may surprise: until it is called, a host configured for cold standby runs warm.
    pub fn follow_shards(self: &Arc<Self>) {
        let Some(replicas) = self.options.replicas.as_ref() else {
            return;
        };
        if replicas.config().standby != Standby::Cold || self.me.set(Arc::downgrade(self)).is_err()
        {
            return;
        }
        tracing::info!(
            "cold standby: guests load only where their shard is held; the others keep their module and no cache"
        );
        let held = replicas.held();
        tokio::spawn(follow(Arc::downgrade(self), held));
    }

    /// A load under cold standby: parked if another replica holds the guest's shard, else
    /// loaded here, keeping the bytes for when the shard goes and comes back.
    pub(super) async fn apply_cold(
        &self,
        name: &str,
        source: Source,
        settings: Settings,
        bytes: Vec<u8>,
        digest: Option<String>,
    ) -> Applied {
        let stash = Stash {
            bytes: Arc::new(bytes),
            digest,
        };
        if self.place_of(name, &settings) == Place::Parked {
            self.park_offered(name, source, settings, stash).await;
            return Applied::Parked;
        }
        let (bytes, digest) = (stash.bytes.as_ref().clone(), stash.digest.clone());
        let settings_now = settings.clone();
        let applied = self.load_now(name, source, settings, bytes, digest).await;
        self.keep_stash(name, stash, &applied);
        // The shard may have gone while the guest loaded: `follow` looked before it served.
        if self.place_of(name, &settings_now) == Place::Parked
            && let Some(me) = self.me.get().and_then(Weak::upgrade)
        {
            tokio::spawn(me.park_serving(name.to_string()));
        }
        applied
    }

    /// Parks `name` with what its source offered, instead of loading it: another replica holds
    /// its shard. A controller still serving here (the shard just went) is stopped.
    async fn park_offered(&self, name: &str, source: Source, settings: Settings, stash: Stash) {
        let lock = self.lock_for(name);
        let serial = lock.lock().await;
        let stopped = {
            let mut guests = self.guests.lock().unwrap();
            let entry = guests
                .entry(name.to_string())
                .or_insert_with(|| self.new_entry(name, source.clone(), settings.clone()));
            entry.source = source;
            entry.settings = settings;
            entry.loading = false;
            entry.parked = true;
            entry.stash = Some(stash);
            entry.controller.take()
        };
        self.publish_guests();
        self.parked(name, stopped, serial).await;
    }

    /// What both ways of parking `name` end with, once it is recorded as parked: the controller
    /// that served here (if any) stopped, its informers released, and the load lock (`serial`)
    /// let go; then the stash is offered again if the shard came here meanwhile, since `follow`
    /// looked before the guest was parked and passed it by.
    async fn parked(
        &self,
        name: &str,
        stopped: Option<Arc<crate::controller::Controller>>,
        serial: tokio::sync::MutexGuard<'_, ()>,
    ) {
        self.access.forget(name);
        if let Some(c) = stopped {
            c.stop().await;
            tracing::info!(guest = %name, "guest parked: another replica holds its shard (cold standby); its informers are released");
        }
        drop(serial);
        self.reoffer_if_here(name);
    }

    /// Keeps the bytes a load of `name` was offered: those of the version that serves, or the
    /// latest while none does, so that a takeover loads what would serve.
    fn keep_stash(&self, name: &str, stash: Stash, applied: &Applied) {
        let mut guests = self.guests.lock().unwrap();
        let Some(entry) = guests.get_mut(name) else {
            return;
        };
        if applied.settled() || entry.controller.is_none() {
            entry.stash = Some(stash);
        }
    }

    /// Offers `name`'s stashed module again if it is parked and its shard is held here, unless
    /// a newer offer already waits (it loads instead, and must not be replaced by older bytes).
    fn reoffer_if_here(&self, name: &str) {
        let Some(me) = self.me.get().and_then(Weak::upgrade) else {
            return;
        };
        let offer = {
            let guests = self.guests.lock().unwrap();
            let Some(e) = guests.get(name) else {
                return;
            };
            let Some(stash) = e.stash.clone().filter(|_| e.parked) else {
                return;
            };
            if self.place_of(name, &e.settings) != Place::Loaded {
                return;
            }
            Offer::Load {
                source: e.source.clone(),
                settings: e.settings.clone(),
                read: Box::new(move || Ok((stash.bytes.as_ref().clone(), stash.digest))),
                min_interval: Duration::ZERO,
            }
        };
        let start = {
            let mut offers = self.offers.lock().unwrap();
            if offers.has_newer(name) {
                return;
            }
            offers.submit(name, offer)
        };
        tracing::info!(guest = %name, "this replica took the guest's shard: loading it (cold standby)");
        if start {
            me.drain_all(vec![name.to_string()]);
        }
    }

    /// Stops `name` and keeps it parked, if its shard is still held elsewhere once its load
    /// lock is taken.
    async fn park_serving(self: Arc<Self>, name: String) {
        let lock = self.lock_for(&name);
        let serial = lock.lock().await;
        let stopped = {
            let mut guests = self.guests.lock().unwrap();
            let Some(entry) = guests.get_mut(&name) else {
                return;
            };
            // Without a stash (loaded before cold standby could keep one) it could not be
            // loaded again: it stays warm rather than be lost.
            if entry.stash.is_none() || self.place_of(&name, &entry.settings) != Place::Parked {
                return;
            }
            entry.parked = true;
            entry.controller.take()
        };
        self.parked(&name, stopped, serial).await;
    }

    /// Loads or parks every guest as the shards held here now require.
    fn place_all(self: &Arc<Self>) {
        let moves: Vec<(String, Move)> = {
            let guests = self.guests.lock().unwrap();
            guests
                .iter()
                .filter_map(|(name, e)| {
                    let place = self.place_of(name, &e.settings);
                    decide(place, e.controller.is_some(), e.parked).map(|m| (name.clone(), m))
                })
                .collect()
        };
        for (name, m) in moves {
            match m {
                Move::Load => self.reoffer_if_here(&name),
                Move::Park => {
                    tokio::spawn(self.clone().park_serving(name));
                }
            }
        }
    }
}

/// Places every guest, then again at each change of the shards held here; ends with the
/// supervisor or the replicas.
async fn follow(
    sup: Weak<Supervisor>,
    mut held: tokio::sync::watch::Receiver<std::collections::BTreeSet<u32>>,
) {
    loop {
        held.mark_unchanged();
        match sup.upgrade() {
            Some(s) => s.place_all(),
            None => return,
        }
        if held.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_standby_loads_everything_and_cold_parks_only_whole_guests_held_elsewhere() {
        use Place::*;
        assert_eq!(place(Standby::Warm, false, false, false), Loaded);
        assert_eq!(place(Standby::Cold, true, false, false), Loaded);
        assert_eq!(place(Standby::Cold, false, false, false), Parked);
        assert_eq!(
            place(Standby::Cold, false, true, false),
            Loaded,
            "its keys run on every replica"
        );
        assert_eq!(
            place(Standby::Cold, false, false, true),
            Loaded,
            "a takeover resumes its staged revision"
        );
    }

    #[test]
    fn a_parked_guest_loads_when_its_shard_comes_and_a_serving_one_parks_when_it_goes() {
        use Move::*;
        use Place::*;
        assert_eq!(decide(Loaded, false, true), Some(Load));
        assert_eq!(decide(Parked, true, false), Some(Park));
        assert_eq!(decide(Loaded, true, false), None, "already serving");
        assert_eq!(decide(Parked, false, true), None, "already parked");
        assert_eq!(
            decide(Loaded, false, false),
            None,
            "rejected or loading: its offers decide"
        );
        assert_eq!(decide(Parked, false, false), None, "nothing runs to park");
    }
}
