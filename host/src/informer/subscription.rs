//! What an informer's subscribers receive: a bounded queue per subscriber that first replays the
//! store's content, then live events, and a single `Resync` instead of unbounded buffering.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::object::ObjectRef;

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
struct QueueInner {
    snapshot: VecDeque<ObjectRef>,
    events: VecDeque<Notification>,
    overflowed: bool,
    closed: bool,
}

/// One subscriber's bounded buffer.
#[derive(Debug)]
pub(super) struct SubscriberQueue {
    inner: Mutex<QueueInner>,
    notify: Notify,
    cap: usize,
}

impl SubscriberQueue {
    /// An open queue holding up to `cap` events (at least one), that first replays `snapshot`.
    pub(super) fn new(cap: usize, snapshot: VecDeque<ObjectRef>) -> Self {
        Self {
            inner: Mutex::new(QueueInner {
                snapshot,
                ..QueueInner::default()
            }),
            notify: Notify::new(),
            cap: cap.max(1),
        }
    }

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

    /// The next notification; `None` once closed.
    pub(super) async fn recv(&self) -> Option<Notification> {
        loop {
            let notified = self.notify.notified();
            {
                let mut q = self.inner.lock().unwrap();
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
}
