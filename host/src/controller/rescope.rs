//! Re-scoping: the informer of a key-sharded guest's reconciled kind follows the shards this
//! replica holds (see [`super::key_gates`]), swapped make before break like a reload.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Controller;
use super::error::Error;
use super::key_gates::KeyGates;
use super::reload::{Reload, Swap};
use super::work_queue::Priority;
use crate::informer::Informer;
use crate::informer::factory::InformerFactory;
use crate::informer::shard::ShardSet;

/// How long the shards held must stay still before the informer follows them: the shards one
/// round of the elector takes arrive within milliseconds of each other, and each re-scope lists
/// every object of the shards held.
const SETTLE: Duration = Duration::from_millis(250);

/// How long a re-scoped informer may take to sync before the re-scope is given up (and tried
/// again after [`RETRY`]); the old scope serves meanwhile.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// How soon a failed re-scope is tried again.
const RETRY: Duration = Duration::from_secs(5);

impl Controller {
    /// Starts following the shards held here with the reconciled kind's informer, for as long
    /// as the controller lives.
    pub(super) fn follow_shards(self: &Arc<Self>, factory: Arc<InformerFactory>, keys: KeyGates) {
        let task = tokio::spawn(follow(Arc::downgrade(self), factory, keys));
        self.workers.lock().unwrap().push(task);
    }

    /// Re-scopes the informer of the reconciled kind to `shard` (the shards now held here, for
    /// a guest whose keys are split across replicas), make before break like a reload of the
    /// serving version. Returns `None` when it watches `shard` already.
    ///
    /// Where it may surprise: a rollout's staged revision shares the serving version's
    /// informers, so a re-scope supersedes it, as a reload does.
    pub(super) async fn rescope(
        self: &Arc<Self>,
        factory: &InformerFactory,
        shard: ShardSet,
        sync_timeout: Duration,
    ) -> Result<Option<Reload>, Error> {
        let _one_at_a_time = self.reloading.lock().await;
        if self.for_shard().as_ref() == Some(&shard) {
            return Ok(None);
        }
        let current = self.shared.current();
        let swap = Swap {
            shard: Some(shard),
            review: false,
            why: "superseded: the shards of the guest's keys held here changed",
        };
        let module = current.module.clone();
        let settings = current.ctx.settings.clone();
        let admit = |_: &[Arc<Informer>]| Ok::<(), std::convert::Infallible>(());
        (self
            .swap(factory, module, &settings, sync_timeout, admit, swap)
            .await)
            .map(Some)
    }
}

/// Keeps the reconciled kind's informer on the shards held here as they move, for as long as
/// the controller lives. When the shards change but the informer already watches them (a shard
/// lost and taken back within [`SETTLE`]), every key is queued again instead, since keys of a
/// shard closed meanwhile were dropped.
async fn follow(controller: Weak<Controller>, factory: Arc<InformerFactory>, keys: KeyGates) {
    let mut held = keys.watch_held();
    let mut retry = false;
    loop {
        if !retry && held.changed().await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                changed = held.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(if retry { RETRY } else { SETTLE }) => break,
            }
        }
        held.borrow_and_update();
        let Some(c) = controller.upgrade() else {
            return;
        };
        let want = keys.held_set();
        retry = match c.rescope(&factory, want.clone(), SYNC_TIMEOUT).await {
            Ok(Some(r)) => {
                tracing::info!(guest = %c.name(), shards = %want, requeued = r.requeued, "the reconciled kind's informer follows the shards held here");
                false
            }
            Ok(None) => {
                let n = c.shared.enqueue_all(Priority::Low);
                tracing::debug!(guest = %c.name(), shards = %want, requeued = n, "shards held here changed and came back");
                false
            }
            Err(e) => {
                tracing::warn!(guest = %c.name(), shards = %want, error = %e, "cannot follow the shards held here; the informer keeps its scope, and this is tried again in {RETRY:?}");
                true
            }
        };
    }
}
