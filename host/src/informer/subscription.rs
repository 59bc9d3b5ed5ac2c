//! What an informer's subscribers receive: a bounded queue per subscriber that first replays the
//! store's content, then live events, and a single `Resync` instead of unbounded buffering.

use super::*;

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Event {
    /// An object appeared (or, for a late subscriber, was already there).
    Added(ObjectRef),
    /// An object changed. `old` and `new` may be the same object for a resync.
    Updated {
        /// The previous version.
        old: ObjectRef,
        /// The new version.
        new: ObjectRef,
    },
    /// An object was deleted.
    Deleted {
        /// The last version the cache saw.
        last_known: ObjectRef,
        /// The delete itself was not seen: a relist found the object gone. Its last state
        /// may be older than the real final state.
        final_state_unknown: bool,
    },
    /// This subscriber fell behind and events were dropped to bound its memory: treat every
    /// object in the store as changed (re-read the store).
    Resync,
}

/// An event plus whether a user caused it.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The event.
    pub event: Event,
    /// Nothing a user did: the initial list, or a resync or relist that changed nothing.
    /// Controllers give these low priority.
    pub background: bool,
}

#[derive(Debug, Default)]
pub(super) struct QueueInner {
    pub(super) snapshot: VecDeque<ObjectRef>,
    pub(super) events: VecDeque<Notification>,
    pub(super) overflowed: bool,
    pub(super) closed: bool,
}

/// One subscriber's bounded buffer.
#[derive(Debug)]
pub(super) struct SubscriberQueue {
    pub(super) inner: Mutex<QueueInner>,
    pub(super) notify: Notify,
    pub(super) cap: usize,
}

impl SubscriberQueue {
    pub(super) fn push(&self, n: Notification) {
        let mut q = self.inner.lock().unwrap();
        if q.overflowed {
            // Already owed a Resync, which covers this event too.
        } else if q.events.len() >= self.cap {
            q.events.clear();
            q.events.shrink_to(self.cap.min(64));
            q.overflowed = true;
        } else {
            q.events.push_back(n);
        }
        drop(q);
        self.notify.notify_one();
    }

    pub(super) fn close(&self) {
        self.inner.lock().unwrap().closed = true;
        self.notify.notify_one();
    }
}

/// A subscription to an informer. Holding it keeps the informer (and its watches) alive.
#[derive(Debug)]
pub struct Subscription {
    pub(super) queue: Arc<SubscriberQueue>,
    pub(super) informer: Arc<Informer>,
}

impl Subscription {
    /// The next notification; `None` once the informer has stopped.
    ///
    /// A new subscription first yields an `Added` (background) for every object already stored,
    /// then live events, with nothing lost or repeated between the two.
    pub async fn recv(&mut self) -> Option<Notification> {
        loop {
            let notified = self.queue.notify.notified();
            {
                let mut q = self.queue.inner.lock().unwrap();
                if let Some(o) = q.snapshot.pop_front() {
                    return Some(Notification {
                        event: Event::Added(o),
                        background: true,
                    });
                }
                if q.overflowed && q.events.is_empty() {
                    q.overflowed = false;
                    return Some(Notification {
                        event: Event::Resync,
                        background: false,
                    });
                }
                if let Some(n) = q.events.pop_front() {
                    return Some(n);
                }
                if q.closed {
                    return None;
                }
            }
            notified.await;
        }
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
