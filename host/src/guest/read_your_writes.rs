//! Read-your-writes: after a guest's write returns resourceVersion r, that guest's cache reads of
//! the object wait (event-driven, bounded) until the store holds at least r.
//!
//! Kubernetes 1.35+ makes resourceVersions comparable integers, which is what makes a floor per
//! key possible. A delete's floor is "that uid is gone" (or superseded).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::informer::store::Store;
use crate::object::ObjectRef;

/// Errors from waiting for the cache.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The store did not reach this guest's own write in time.
    #[error(
        "read-your-writes: the cache did not reach this guest's write of {key} (resourceVersion {floor}) within {after:?}; the watch may be lagging or broken"
    )]
    Timeout {
        /// The object key.
        key: String,
        /// What the cache had to reach.
        floor: String,
        /// How long we waited.
        after: Duration,
    },
}

/// What a key's cached version must reach before this guest may read it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Floor {
    /// At least this resourceVersion.
    Version(u64),
    /// The object with this uid deleted (absent, replaced by another uid, or at least this RV).
    Deleted { uid: String, rv: u64 },
}

impl Floor {
    /// Whether the store reflects the write: the object is at least that new, or the store has
    /// applied a later event of the same namespace (`watermark`), so whatever it holds for the
    /// key (perhaps nothing: someone deleted it since) is at least as new as the write.
    fn reached(&self, cached: Option<&ObjectRef>, watermark: u64) -> bool {
        let rv = match self {
            Floor::Version(rv) | Floor::Deleted { rv, .. } => *rv,
        };
        if watermark >= rv {
            return true;
        }
        match (self, cached) {
            (Floor::Version(rv), Some(o)) => o.resource_version_number().is_some_and(|c| c >= *rv),
            (Floor::Version(_), None) => false,
            (Floor::Deleted { .. }, None) => true,
            (Floor::Deleted { uid, rv }, Some(o)) => {
                o.uid() != uid || o.resource_version_number().is_some_and(|c| c >= *rv)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Floor::Version(rv) => rv.to_string(),
            Floor::Deleted { uid, .. } => format!("deletion of uid {uid}"),
        }
    }
}

/// What this guest's latest write of a key did, as [`Floors::own_version`] and
/// [`Floors::own_deletion`] remember it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Own {
    /// Left the object at this resourceVersion.
    Version(u64),
    /// Deleted the object with this uid.
    Deletion(String),
}

/// The most keys whose latest write is remembered ([`Floors::own_version`]); past it the record
/// starts afresh.
const OWN_WRITES_KEPT: usize = 4096;

/// One guest's write floors for one kind. Not shared between guests: another guest's writes
/// impose nothing on this one.
#[derive(Debug, Default)]
pub struct Floors {
    floors: Mutex<HashMap<String, Floor>>,
    /// The latest write of each key, kept after its floor is reached: it tells the watch event
    /// of the guest's own write from a change someone else made.
    own: Mutex<HashMap<String, Own>>,
    waits: AtomicU64,
    wakeups: AtomicU64,
}

impl Floors {
    /// Records that this guest wrote `key` and the server answered with resourceVersion `rv`.
    /// Non-numeric resourceVersions (pre-1.35 servers) are ignored: no floor can be compared.
    pub fn wrote(&self, key: &str, rv: &str) {
        if let Ok(rv) = rv.parse() {
            let mut f = self.floors.lock().unwrap();
            let newer = match f.get(key) {
                Some(Floor::Version(old)) => rv > *old,
                _ => true,
            };
            if newer {
                f.insert(key.to_string(), Floor::Version(rv));
            }
            drop(f);
            self.remember(key, Own::Version(rv));
        }
    }

    fn remember(&self, key: &str, own: Own) {
        let mut kept = self.own.lock().unwrap();
        if kept.len() >= OWN_WRITES_KEPT && !kept.contains_key(key) {
            kept.clear();
        }
        kept.insert(key.to_string(), own);
    }

    /// Whether the object of `key` at resourceVersion `rv` is what this guest's latest write of
    /// it left: its watch event is the guest's own write coming back, not a change someone
    /// else made.
    ///
    /// Where it may surprise: only the latest write of each of the last 4096 keys written is
    /// remembered (the record starts afresh past that), so an old write's echo may be taken
    /// for someone else's change; and with resourceVersions that are not numbers (servers
    /// before 1.35) nothing is ever the guest's own.
    pub fn own_version(&self, key: &str, rv: u64) -> bool {
        self.own.lock().unwrap().get(key) == Some(&Own::Version(rv))
    }

    /// Whether the deletion of `key`'s object with `uid` is this guest's own latest write of
    /// it; see [`Floors::own_version`].
    pub fn own_deletion(&self, key: &str, uid: &str) -> bool {
        matches!(self.own.lock().unwrap().get(key), Some(Own::Deletion(u)) if u == uid)
    }

    /// Records that this guest deleted `key`, whose object had `uid` (and, if the server
    /// returned it, resourceVersion `rv`).
    pub fn deleted(&self, key: &str, uid: &str, rv: &str) {
        let rv = rv.parse().unwrap_or(u64::MAX);
        self.floors.lock().unwrap().insert(
            key.to_string(),
            Floor::Deleted {
                uid: uid.to_string(),
                rv,
            },
        );
        self.remember(key, Own::Deletion(uid.to_string()));
    }

    /// Keys with a floor not yet known to be reached.
    pub fn pending(&self) -> usize {
        self.floors.lock().unwrap().len()
    }

    /// (reads that had to wait, wake-ups while waiting). Each wake-up is a change to the store
    /// (any object in it, not only the awaited one): a ratio near 1 shows the waits are
    /// event-driven, not polling.
    pub fn wait_stats(&self) -> (u64, u64) {
        (
            self.waits.load(Ordering::Relaxed),
            self.wakeups.load(Ordering::Relaxed),
        )
    }

    /// Waits until `store` satisfies the floor of `key` (if any), then forgets the floor.
    ///
    /// A floor that times out is forgotten too: the caller gets one `Timeout` error, not one
    /// on every later read of that key.
    pub async fn wait_key(&self, store: &Store, key: &str, timeout: Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        self.wait_key_until(store, key, deadline, timeout).await
    }

    async fn wait_key_until(
        &self,
        store: &Store,
        key: &str,
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<(), Error> {
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        let mut waited = false;
        loop {
            let changed = store.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let floor = match self.floors.lock().unwrap().get(key) {
                None => return Ok(()),
                Some(f) => f.clone(),
            };
            if floor.reached(store.get(key).as_ref(), store.watermark(namespace)) {
                let mut f = self.floors.lock().unwrap();
                if f.get(key) == Some(&floor) {
                    f.remove(key);
                }
                return Ok(());
            }
            if !waited {
                waited = true;
                self.waits.fetch_add(1, Ordering::Relaxed);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let mut f = self.floors.lock().unwrap();
                if f.get(key) == Some(&floor) {
                    f.remove(key);
                }
                return Err(Error::Timeout {
                    key: key.to_string(),
                    floor: floor.describe(),
                    after: timeout,
                });
            }
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits for every pending key (optionally only those in `namespace`): what a list needs.
    /// One deadline covers all of them.
    pub async fn wait_all(
        &self,
        store: &Store,
        namespace: Option<&str>,
        timeout: Duration,
    ) -> Result<(), Error> {
        let keys: Vec<String> = self
            .floors
            .lock()
            .unwrap()
            .keys()
            .filter(|k| namespace.is_none_or(|ns| k.split_once('/').is_some_and(|(n, _)| n == ns)))
            .cloned()
            .collect();
        let deadline = tokio::time::Instant::now() + timeout;
        for key in keys {
            self.wait_key_until(store, &key, deadline, timeout).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::store::Writer;
    use crate::object::{Object, Transform};
    use std::sync::Arc;

    fn cm(name: &str, uid: &str, rv: u64) -> ObjectRef {
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "a", "uid": uid, "resourceVersion": rv.to_string()}});
        Arc::new(Object::from_value(v, &Transform::none(), None).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_the_store_to_reach_the_write_then_returns() {
        let writer = Writer::new();
        let store = writer.reader();
        writer.upsert(cm("x", "u1", 5));
        let floors = Arc::new(Floors::default());
        floors.wrote("a/x", "9");
        let waiter = tokio::spawn({
            let (store, floors) = (store.clone(), floors.clone());
            async move { floors.wait_key(&store, "a/x", Duration::from_secs(5)).await }
        });
        tokio::task::yield_now().await;
        writer.upsert(cm("x", "u1", 7));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "7 < 9: still waiting");
        writer.upsert(cm("x", "u1", 9));
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(floors.pending(), 0, "a reached floor is forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_and_says_why() {
        let writer = Writer::new();
        let store = writer.reader();
        let floors = Floors::default();
        floors.wrote("a/x", "9");
        let err = floors
            .wait_key(&store, "a/x", Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("resourceVersion 9"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_waits_for_that_uid_to_go() {
        let writer = Writer::new();
        let store = writer.reader();
        writer.upsert(cm("x", "u1", 5));
        let floors = Floors::default();
        floors.deleted("a/x", "u1", "");
        assert!(
            floors
                .wait_key(&store, "a/x", Duration::from_millis(10))
                .await
                .is_err()
        );
        writer.remove("a/x");
        floors
            .wait_key(&store, "a/x", Duration::from_secs(1))
            .await
            .unwrap();
        floors.deleted("a/x", "u1", "");
        writer.upsert(cm("x", "u2", 6));
        floors
            .wait_key(&store, "a/x", Duration::from_secs(1))
            .await
            .expect("a new object under the same name supersedes the delete");
    }

    #[test]
    fn floors_only_move_forward_and_ignore_non_numeric_versions() {
        let floors = Floors::default();
        floors.wrote("a/x", "9");
        floors.wrote("a/x", "7");
        assert_eq!(floors.floors.lock().unwrap()["a/x"], Floor::Version(9));
        floors.wrote("a/y", "not-a-number");
        assert_eq!(floors.pending(), 1);
    }
}

#[cfg(test)]
mod watermark_tests {
    use super::*;
    use crate::informer::store::Writer;
    use crate::object::{Object, Transform};
    use std::sync::Arc;

    fn cm(name: &str, rv: u64) -> ObjectRef {
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "a", "uid": name, "resourceVersion": rv.to_string()}});
        Arc::new(Object::from_value(v, &Transform::none(), None).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_event_in_the_namespace_reaches_a_floor_whose_object_was_deleted_since() {
        let writer = Writer::new();
        let store = writer.reader();
        let floors = Floors::default();
        floors.wrote("a/x", "10");
        // Someone else deleted x (at 11); the store never held x at 10, but it has applied 12
        // with nothing pending.
        writer.upsert(cm("y", 12));
        writer.publish_watermarks();
        floors
            .wait_key(&store, "a/x", Duration::from_secs(1))
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_floor_that_times_out_is_forgotten() {
        let writer = Writer::new();
        let store = writer.reader();
        let floors = Floors::default();
        floors.wrote("a/x", "10");
        assert!(
            floors
                .wait_key(&store, "a/x", Duration::from_secs(1))
                .await
                .is_err()
        );
        assert_eq!(floors.pending(), 0);
        floors
            .wait_key(&store, "a/x", Duration::from_secs(1))
            .await
            .expect("the next read does not wait again");
    }
}

#[cfg(test)]
mod unpublished {
    use super::*;
    use crate::informer::store::Writer;
    use crate::object::{Object, Transform};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn an_applied_but_unpublished_version_does_not_reach_a_floor() {
        // The FIFO delivers per key: y at 12 may be applied while x at 10 is still queued.
        let writer = Writer::new();
        let store = writer.reader();
        let v = serde_json::json!({"metadata": {"name": "y", "namespace": "a", "uid": "y", "resourceVersion": "12"}});
        writer.upsert(Arc::new(
            Object::from_value(v, &Transform::none(), None).unwrap(),
        ));
        let floors = Floors::default();
        floors.wrote("a/x", "10");
        assert!(
            floors
                .wait_key(&store, "a/x", Duration::from_millis(100))
                .await
                .is_err()
        );
    }

    #[test]
    fn a_guests_own_write_is_told_from_someone_elses_change_after_its_floor_is_gone() {
        let floors = Floors::default();
        floors.wrote("a/x", "9");
        floors.deleted("a/y", "u1", "");
        // The floor goes once the store reaches it; what the write left is still known.
        floors.floors.lock().unwrap().clear();
        assert!(floors.own_version("a/x", 9), "the echo of its write");
        assert!(!floors.own_version("a/x", 10), "someone changed it since");
        assert!(!floors.own_version("a/z", 9), "never written");
        assert!(floors.own_deletion("a/y", "u1"));
        assert!(
            !floors.own_deletion("a/y", "u2"),
            "another object of that name"
        );
        floors.wrote("a/x", "12");
        assert!(!floors.own_version("a/x", 9) && floors.own_version("a/x", 12));
        // Bounded: past the limit the record starts afresh.
        for i in 0..OWN_WRITES_KEPT {
            floors.wrote(&format!("b/{i}"), "1");
        }
        assert!(!floors.own_version("a/x", 12));
        assert!(floors.own.lock().unwrap().len() <= OWN_WRITES_KEPT);
    }
}
