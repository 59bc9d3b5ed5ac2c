//! Shared informer: discovery → reflectors → delta FIFO → store/indexes → subscribers, with a
//! health state that never hangs silently.
//!
//! **One watch per namespace.** A scope naming a set of namespaces runs one reflector per
//! namespace, all feeding one FIFO and one store (each reflector's relist only tombstones keys of
//! its own namespace). We chose this over one all-namespaces watch filtered locally, as
//! controller-runtime does, for two reasons: a tenant-confined host is usually granted a Role per
//! namespace, under which a cluster-wide watch is simply forbidden; and the API server then sends
//! only the objects we keep. The cost is one connection per namespace.
//!
//! **Reads may be stale, and say by how much.** The store serves whatever has arrived; while the
//! API server cannot be reached it keeps serving, the informer turns [`State::Degraded`], and
//! [`Informer::staleness`] tells how long the server has been silent and how far the content
//! has got. Reflectors retry an unreachable server within about a second of it answering again
//! (see [`crate::backoff`]), so a Degraded informer returns to Synced on its own.
//!
//! **Only the informer writes its store.** The processing task holds the store's only
//! [`Writer`]; everyone else, guests included, gets a read-only [`Store`]. Field indexes are
//! declared through [`Informer::add_field_index`], which is the host's to call, not a guest's.

pub mod delta_fifo;
pub mod discovery;
pub mod factory;
mod key;
mod offline;
mod options;
pub mod preflight;
pub mod protobuf;
pub mod reflector;
mod run;
pub mod shard;
mod shared;
mod status;
pub mod store;
mod subscription;
mod watermarks;

pub use key::{InformerKey, Namespaces, Scope};
pub use options::Options;
pub use status::{Staleness, State, Stats, Status, SyncError};
pub use subscription::{Event, Notification};

use shared::{Shared, Tasks};
use subscription::SubscriberQueue;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::backoff::Connectivity;
use crate::informer::discovery::Resource;
use crate::informer::store::{Store, Writer};

/// A shared informer for one [`InformerKey`]. Dropping the last `Arc` stops its watches.
#[derive(Debug)]
pub struct Informer {
    shared: Arc<Shared>,
    driver: AbortHandle,
    tasks: Arc<Tasks>,
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.driver.abort();
        self.tasks.close();
        if let Some(f) = self.shared.fifo.get() {
            f.close();
        }
        for q in self
            .shared
            .subscribers
            .lock()
            .unwrap()
            .iter()
            .filter_map(Weak::upgrade)
        {
            q.close();
        }
    }
}

impl Informer {
    /// Starts an informer: discovery, RBAC preflight, list, watch. Must be called inside a
    /// tokio runtime; returns at once, before anything is synced.
    ///
    /// Where it may surprise: the informer watches connectivity to the server on its own; several
    /// informers on one client should share that through
    /// [`start_with_connectivity`](Self::start_with_connectivity) (the
    /// [`InformerFactory`](crate::informer::factory::InformerFactory) does), so that one of them reaching
    /// the server again wakes them all.
    pub fn start(client: kube::Client, key: InformerKey, options: Options) -> Arc<Self> {
        let connectivity = Connectivity::new(client.clone());
        Self::start_with_connectivity(client, key, options, connectivity)
    }

    /// Like [`start`](Self::start), with connectivity to the server shared with whatever else
    /// uses `client`.
    pub fn start_with_connectivity(
        client: kube::Client,
        key: InformerKey,
        options: Options,
        connectivity: Connectivity,
    ) -> Arc<Self> {
        let writer = Writer::new();
        let shared = Arc::new(Shared::new(
            key,
            &writer,
            connectivity,
            State::Syncing,
            None,
        ));
        let tasks = Arc::new(Tasks::default());
        let driver = tokio::spawn(run::drive(
            client,
            shared.clone(),
            options,
            tasks.clone(),
            writer,
        ))
        .abort_handle();
        Arc::new(Self {
            shared,
            driver,
            tasks,
        })
    }

    /// The informer's identity.
    pub fn key(&self) -> &InformerKey {
        &self.shared.key
    }

    /// The store, read-only. Note that this is a cache and may be stale (see
    /// [`staleness`](Self::staleness)); before the informer is first synced it may also be
    /// incomplete, and while [`State::Degraded`] it holds what arrived before the watch broke.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Declares a field index on the store (see
    /// [`Indexes::add_field_index`](store::Indexes::add_field_index)); a field index is declared
    /// when a guest subscribes, by the host on its behalf.
    ///
    /// Where it may surprise: indexes are per informer, so an index one subscriber declared
    /// serves, and costs, every subscriber of this informer; declaring an existing one is
    /// [`store::Error::DuplicateIndex`], which callers declaring on a shared informer ignore.
    pub fn add_field_index(&self, path: &str) -> store::Result<()> {
        self.shared.indexes.add_field_index(path)
    }

    /// How current the cache is: how long the API server has been silent for this informer, and
    /// the highest resourceVersion the store has applied.
    pub fn staleness(&self) -> Staleness {
        let heard: Vec<Option<Instant>> = self
            .shared
            .reflector_stats
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.last_heard())
            .collect();
        Staleness {
            silent_for: most_silent(&heard, Instant::now()),
            resource_version: self.shared.store.resource_version(),
        }
    }

    /// Connectivity to the API server, shared with every informer started with the same one.
    pub fn connectivity(&self) -> &Connectivity {
        &self.shared.connectivity
    }

    /// The resolved resource, once discovery has succeeded.
    pub fn resource(&self) -> Option<&Resource> {
        self.shared.resource.get()
    }

    /// The current health.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// A receiver that sees every health change.
    pub fn watch_status(&self) -> watch::Receiver<Status> {
        self.shared.status.subscribe()
    }

    /// Totals over this informer's reflectors.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for r in self.shared.reflector_stats.lock().unwrap().iter() {
            s.lists += r.lists.load(Ordering::Relaxed);
            s.relists += r.relists.load(Ordering::Relaxed);
            s.watches += r.watches.load(Ordering::Relaxed);
            s.watch_list_syncs += r.watch_list_syncs.load(Ordering::Relaxed);
            s.events += r.events.load(Ordering::Relaxed);
            s.bad_objects += r.bad_objects.load(Ordering::Relaxed);
            s.protobuf_reads += r.protobuf_reads.load(Ordering::Relaxed);
            s.protobuf_fallbacks += r.protobuf_fallbacks.load(Ordering::Relaxed);
            s.initial_sync_rv = s
                .initial_sync_rv
                .max(r.initial_sync_rv.load(Ordering::Relaxed));
        }
        s
    }

    /// Waits until the cache holds the initial list.
    ///
    /// Returns at once with the reason when the informer is Forbidden or its kind is not
    /// served: waiting would not help, and a silent hang is the failure this exists to
    /// prevent. Degraded counts as synced (the cache is complete but may lag).
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), SyncError> {
        let mut rx = self.watch_status();
        let deadline = Instant::now() + timeout;
        loop {
            let st = rx.borrow_and_update().clone();
            match st.state {
                State::Synced | State::Degraded => return Ok(()),
                State::Forbidden => {
                    return Err(SyncError::Forbidden(st.message.unwrap_or_default()));
                }
                State::KindNotFound => {
                    return Err(SyncError::KindNotFound(st.message.unwrap_or_default()));
                }
                State::Syncing => {}
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(SyncError::Timeout {
                        after: timeout,
                        last: st.to_string(),
                    });
                }
            }
        }
    }

    /// Subscribes to events. The subscription first yields the current content as `Added`.
    pub fn subscribe(self: &Arc<Self>, buffer: usize) -> Subscription {
        // Under the dispatch lock, so no event falls between the snapshot and the registration.
        let mut subs = self.shared.subscribers.lock().unwrap();
        let queue = Arc::new(SubscriberQueue::new(buffer, self.shared.store.all().into()));
        subs.retain(|w| w.strong_count() > 0);
        subs.push(Arc::downgrade(&queue));
        drop(subs);
        Subscription {
            queue,
            informer: self.clone(),
        }
    }

    /// Live subscriptions.
    pub fn subscriber_count(&self) -> usize {
        self.shared
            .subscribers
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

/// A subscription to an informer. Holding it keeps the informer (and its watches) alive.
#[derive(Debug)]
pub struct Subscription {
    queue: Arc<SubscriberQueue>,
    informer: Arc<Informer>,
}

impl Subscription {
    /// The next notification; `None` once the informer has stopped.
    ///
    /// A new subscription first yields an `Added` (background) for every object already stored,
    /// then live events, with nothing lost or repeated between the two.
    pub async fn recv(&mut self) -> Option<Notification> {
        self.queue.recv().await
    }

    /// The informer behind this subscription.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// The silence of the most silent of `heard` at `now`; `None` if there are none yet or one has
/// never heard from the server.
fn most_silent(heard: &[Option<Instant>], now: Instant) -> Option<Duration> {
    let mut oldest: Option<Instant> = None;
    for h in heard {
        let h = (*h)?;
        oldest = Some(oldest.map_or(h, |o| o.min(h)));
    }
    oldest.map(|o| now.saturating_duration_since(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_most_silent_watch_sets_the_informers_silence() {
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_secs(10)).await;
        let t1 = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        assert_eq!(
            most_silent(&[Some(t1), Some(t0)], now),
            Some(Duration::from_secs(15))
        );
        assert_eq!(most_silent(&[Some(t1)], now), Some(Duration::from_secs(5)));
        assert_eq!(
            most_silent(&[Some(t1), None], now),
            None,
            "a watch that never heard from the server is as stale as can be"
        );
        assert_eq!(most_silent(&[], now), None, "no watch yet");
    }
}
