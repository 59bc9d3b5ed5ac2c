//! Which reconciles are traffic: those of keys queued because of a live change (an object
//! created, changed or deleted by someone other than the guest, or every key reconciled again
//! by a rollout's resync) since their last reconcile began, and how long the serving revision's
//! reconciles of such changes take. A progressive rollout judges its steps on these (see
//! `candidate`): the reconciles of the keys that just moved to a new revision, or of the
//! guest's own writes coming back, say nothing of how it meets the cluster.
//!
//! Where it may surprise:
//! - "Someone other than the guest" is told by resourceVersion: an event whose object is at the
//!   version the guest's latest write of it left is an echo (see
//!   [`Floors::own_version`](crate::guest::read_your_writes::Floors::own_version)). Whether a
//!   queued key's changes were echoes is judged when its reconcile begins, not when the event
//!   arrives: the watch may deliver a write's event before the write's own answer reaches the
//!   guest, and only the answer says which version the guest made.
//! - A key queued both by a live change and for another reason before it runs counts as live.
//! - An initial list or an informer's resync is not a live change.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::guest::bindings::Gvk;
use crate::guest::read_your_writes::Floors;

/// How many changes a queued key keeps for judging; past it the oldest are dropped.
const CHANGES_KEPT: usize = 32;

/// Why a key was queued, as far as traffic goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// An object of `kind` (its key `object`) changed: to this resourceVersion, or deleted
    /// with this uid.
    Object {
        kind: Gvk,
        object: String,
        seen: Seen,
    },
    /// Every key reconciled again by a rollout's `resyncInterval`: traffic whatever the guest
    /// wrote.
    Resync,
}

/// What an event said of its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// It is at this resourceVersion (none when it is not a number).
    Version(Option<u64>),
    /// It was deleted; its uid.
    Deleted(String),
}

/// How many of the serving revision's most recent live reconcile times are kept.
const SERVING_TIMES_KEPT: usize = 256;

/// The most recent reconcile times, oldest first, at most a fixed number.
#[derive(Debug, Clone)]
pub(super) struct Recent {
    times: VecDeque<Duration>,
    kept: usize,
}

impl Recent {
    /// Keeps the latest `kept`.
    pub(super) fn new(kept: usize) -> Self {
        Self {
            times: VecDeque::new(),
            kept,
        }
    }

    pub(super) fn push(&mut self, took: Duration) {
        if self.times.len() == self.kept {
            self.times.pop_front();
        }
        self.times.push_back(took);
    }

    /// The times kept, oldest first.
    pub(super) fn to_vec(&self) -> Vec<Duration> {
        self.times.iter().copied().collect()
    }
}

/// Whether a reconcile queued for `changes` is one of a live change: a resync, or a change of
/// an object that is not the guest's own latest write of it (`floors_of` gives the guest's
/// floors of a kind, where its writes are remembered).
pub(super) fn live<'f>(changes: &[Change], floors_of: impl Fn(&Gvk) -> Option<&'f Floors>) -> bool {
    changes.iter().any(|c| match c {
        Change::Resync => true,
        Change::Object { kind, object, seen } => {
            !floors_of(kind).is_some_and(|floors| match seen {
                Seen::Version(Some(rv)) => floors.own_version(object, *rv),
                Seen::Version(None) => false,
                Seen::Deleted(uid) => floors.own_deletion(object, uid),
            })
        }
    })
}

/// The changes queued keys wait with, and the serving revision's live reconcile times (each
/// with when it ended), of one guest.
#[derive(Debug)]
pub(super) struct Traffic {
    queued: Mutex<HashMap<String, Vec<Change>>>,
    serving: Mutex<VecDeque<(Instant, Duration)>>,
}

impl Default for Traffic {
    fn default() -> Self {
        Self {
            queued: Mutex::default(),
            serving: Mutex::new(VecDeque::with_capacity(SERVING_TIMES_KEPT)),
        }
    }
}

impl Traffic {
    /// `key` was queued because of `change`.
    pub(super) fn mark(&self, key: &str, change: Change) {
        let mut queued = self.queued.lock().unwrap();
        let changes = queued.entry(key.to_string()).or_default();
        if changes.len() == CHANGES_KEPT {
            changes.remove(0);
        }
        if !changes.contains(&change) {
            changes.push(change);
        }
    }

    /// The changes `key` was queued for since its last reconcile began, which is beginning now;
    /// forgets them.
    pub(super) fn take(&self, key: &str) -> Vec<Change> {
        self.queued.lock().unwrap().remove(key).unwrap_or_default()
    }

    /// Puts back the changes of a reconcile that did not run after all (cancelled): the one
    /// that runs instead covers them.
    pub(super) fn restore(&self, key: &str, changes: Vec<Change>) {
        for change in changes {
            self.mark(key, change);
        }
    }

    /// The serving revision reconciled a live change in `took`, just now.
    pub(super) fn served(&self, took: Duration) {
        let mut serving = self.serving.lock().unwrap();
        if serving.len() == SERVING_TIMES_KEPT {
            serving.pop_front();
        }
        serving.push_back((Instant::now(), took));
    }

    /// The serving revision's live reconcile times that ended at or after `since` (of the most
    /// recent kept), oldest first.
    ///
    /// Where it may surprise: a rollout step compares with these, the same moments' work under
    /// the same load, so a step where the serving revision reconciles nothing (at 100% of keys)
    /// has none, and its latency is not judged.
    pub(super) fn serving_times_since(&self, since: Instant) -> Vec<Duration> {
        (self.serving.lock().unwrap().iter())
            .filter(|(ended, _)| *ended >= since)
            .map(|(_, took)| *took)
            .collect()
    }

    /// Another revision serves now: the times kept were its predecessor's.
    pub(super) fn new_serving(&self) {
        self.serving.lock().unwrap().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changes_a_key_was_queued_for_are_taken_once_by_the_reconcile_that_follows() {
        let t = Traffic::default();
        assert!(t.take("a/x").is_empty(), "queued for no change");
        let change = |rv| Change::Object {
            kind: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            object: "a/x".into(),
            seen: Seen::Version(Some(rv)),
        };
        t.mark("a/x", change(7));
        t.mark("a/x", change(7));
        t.mark("a/x", Change::Resync);
        assert_eq!(t.take("a/x"), [change(7), Change::Resync]);
        assert!(
            t.take("a/x").is_empty(),
            "the next reconcile needs changes of its own"
        );
        t.restore("a/x", vec![change(8)]);
        assert_eq!(t.take("a/x"), [change(8)]);
        for rv in 0..100 {
            t.mark("a/y", change(rv));
        }
        assert_eq!(t.take("a/y").len(), CHANGES_KEPT, "bounded");
    }

    #[test]
    fn the_guests_own_write_coming_back_is_no_traffic_and_anyone_elses_change_is() {
        let kind = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let floors = Floors::default();
        floors.wrote("a/x", "7");
        floors.deleted("a/y", "u1", "");
        let of = |object: &str, seen| Change::Object {
            kind: kind.clone(),
            object: object.into(),
            seen,
        };
        let floors_of = |k: &Gvk| (*k == kind).then_some(&floors);
        assert!(
            !live(&[of("a/x", Seen::Version(Some(7)))], floors_of),
            "its own write"
        );
        assert!(
            live(&[of("a/x", Seen::Version(Some(8)))], floors_of),
            "someone else's"
        );
        assert!(
            !live(&[of("a/y", Seen::Deleted("u1".into()))], floors_of),
            "its own delete"
        );
        assert!(live(&[of("a/y", Seen::Deleted("u2".into()))], floors_of));
        assert!(
            live(
                &[of("a/x", Seen::Version(Some(7))), Change::Resync],
                floors_of
            ),
            "an echo and a resync: traffic"
        );
        assert!(
            !live(&[], floors_of),
            "queued for no change: a move, a retry"
        );
    }

    #[test]
    fn the_most_recent_times_are_kept_oldest_first() {
        let mut r = Recent::new(3);
        for ms in 1..=5 {
            r.push(Duration::from_millis(ms));
        }
        assert_eq!(r.to_vec(), [3, 4, 5].map(Duration::from_millis).to_vec());
        let t = Traffic::default();
        t.served(Duration::from_millis(7));
        t.new_serving();
        assert!(
            t.serving_times_since(Instant::now() - Duration::from_secs(60))
                .is_empty()
        );
    }

    #[test]
    fn a_step_at_100_percent_is_compared_with_no_serving_history() {
        let t = Traffic::default();
        t.served(Duration::from_millis(3));
        let step = Instant::now();
        assert!(
            t.serving_times_since(step).is_empty(),
            "times from before the step are another load's"
        );
        t.served(Duration::from_millis(5));
        assert_eq!(t.serving_times_since(step), [Duration::from_millis(5)]);
    }
}
