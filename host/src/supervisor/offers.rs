//! Offers: what every source hands the supervisor (load these bytes as guest X; X's source
//! cannot be loaded; remove X), and the slots that keep, per guest, the latest offer not yet
//! taken. Pure, so that its rules are unit-tested; `intake` runs the tasks that drain them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::source::Source;
use crate::controller::Settings;

/// Why a source's bytes could not be handed to the runtime (a `.wasm.gz` that does not unpack).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// What the rejection is remembered by, so the same bad bytes are not rejected twice.
    pub digest: String,
    /// Why, for the log, `/status` and the source's Events.
    pub message: String,
}

/// Produces a module's bytes (and their sha256, when the source has it), on the blocking pool
/// in the guest's own task: unpacking a large module must not hold up other guests.
pub type Read = Box<dyn FnOnce() -> Result<(Vec<u8>, Option<String>), Unreadable> + Send>;

/// The module a guest parked under cold standby loads when its shard comes to this replica:
/// what its source last offered, kept to be offered again (see `standby`).
#[derive(Clone)]
pub(super) struct Stash {
    pub(super) bytes: std::sync::Arc<Vec<u8>>,
    /// The sha256 the source gave with the bytes, if it gave one.
    pub(super) digest: Option<String>,
}

impl std::fmt::Debug for Stash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stash({} bytes)", self.bytes.len())
    }
}

/// What a source asks of the supervisor for one guest.
pub enum Offer {
    /// Load (or reload) the guest from what `read` produces.
    Load {
        /// Where the module comes from.
        source: Source,
        /// How the guest runs.
        settings: Settings,
        /// The bytes.
        read: Read,
        /// Least time since this guest's previous load before this one starts.
        min_interval: Duration,
    },
    /// The source delivers something that cannot be loaded for this guest; the serving
    /// version, if any, stays.
    Unreadable {
        /// Where.
        source: Source,
        /// How the guest would run.
        settings: Settings,
        /// Why.
        unreadable: Unreadable,
    },
    /// Unload the guest.
    Remove,
}

impl std::fmt::Debug for Offer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Offer::Load { source, .. } => write!(f, "Load({source})"),
            Offer::Unreadable {
                source, unreadable, ..
            } => write!(f, "Unreadable({source}: {})", unreadable.message),
            Offer::Remove => write!(f, "Remove"),
        }
    }
}

/// The queue's bookkeeping: per guest, the offer waiting for its task (latest wins), and which
/// guests settled from what was last offered. Pure, so its rules are unit-tested.
///
/// Invariant: a name is in `pending` exactly while a task drains it.
#[derive(Debug)]
pub(super) struct Slots<T> {
    pending: HashMap<String, Option<T>>,
    settled: HashSet<String>,
    /// When each guest last started a load: kept across its tasks, so that an offer arriving
    /// just after a task ended still waits out the least interval.
    last_load: HashMap<String, Instant>,
    closed: bool,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Self {
            pending: HashMap::new(),
            settled: HashSet::new(),
            last_load: HashMap::new(),
            closed: false,
        }
    }
}

impl<T> Slots<T> {
    /// Queues `item` for `name`, replacing one still waiting; true when no task drains `name`
    /// yet, so the caller must start one. Nothing is queued once closed.
    pub(super) fn submit(&mut self, name: &str, item: T) -> bool {
        if self.closed {
            return false;
        }
        self.settled.remove(name);
        match self.pending.get_mut(name) {
            Some(next) => {
                *next = Some(item);
                false
            }
            None => {
                self.pending.insert(name.to_string(), Some(item));
                true
            }
        }
    }

    /// The next item for `name`'s task; `None` ends the task and frees the slot.
    pub(super) fn next(&mut self, name: &str) -> Option<T> {
        match self.pending.get_mut(name).and_then(Option::take) {
            Some(item) if !self.closed => Some(item),
            _ => {
                self.pending.remove(name);
                None
            }
        }
    }

    /// An item that arrived for `name` while its task waited, if any (never once closed).
    pub(super) fn newer(&mut self, name: &str) -> Option<T> {
        if self.closed {
            return None;
        }
        self.pending.get_mut(name).and_then(Option::take)
    }

    /// When `name` last started a load, if it has.
    pub(super) fn last_load(&self, name: &str) -> Option<Instant> {
        self.last_load.get(name).copied()
    }

    /// Records that `name` starts a load now; `None` forgets it (the guest was removed).
    pub(super) fn loading(&mut self, name: &str, now: Option<Instant>) {
        match now {
            Some(at) => self.last_load.insert(name.to_string(), at),
            None => self.last_load.remove(name),
        };
    }

    /// Ends `name`'s task whatever it was doing: what a task that panicked leaves behind
    /// must not swallow that guest's later offers.
    pub(super) fn abandon(&mut self, name: &str) {
        self.pending.remove(name);
    }

    /// Whether a task is carrying out an offer for `name`, or one waits for it.
    pub(super) fn is_pending(&self, name: &str) -> bool {
        self.pending.contains_key(name)
    }

    /// Whether an offer for `name` waits behind the one its task is carrying out.
    pub(super) fn has_newer(&self, name: &str) -> bool {
        self.pending.get(name).is_some_and(Option::is_some)
    }

    /// Marks `name` as not settled: what was last offered for it was not carried out.
    pub(super) fn unsettle(&mut self, name: &str) {
        self.settled.remove(name);
    }

    /// Whether the host is stopping.
    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Marks `name` settled, unless something newer is already waiting: this outcome is not
    /// that offer's.
    pub(super) fn settle(&mut self, name: &str) {
        if !self.has_newer(name) {
            self.settled.insert(name.to_string());
        }
    }

    /// Whether every one of `names` (at least one) settled with nothing offered since.
    pub(super) fn all_settled(&self, names: &BTreeSet<String>) -> bool {
        !names.is_empty() && names.iter().all(|n| self.settled.contains(n))
    }

    /// Whether no task drains any guest.
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Refuses every later offer and drops the waiting ones: the host is stopping.
    pub(super) fn close(&mut self) {
        self.closed = true;
        for item in self.pending.values_mut() {
            *item = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_offer_starts_a_task_and_later_ones_replace_what_waits() {
        let mut s = Slots::default();
        assert!(s.submit("g", 1), "nothing drains g yet");
        assert!(!s.submit("g", 2), "its task will take it");
        assert!(!s.submit("g", 3));
        assert_eq!(s.next("g"), Some(3), "the latest wins");
        assert_eq!(s.next("g"), None, "nothing left: the task ends");
        assert!(s.submit("g", 4), "and the next offer starts a new one");
    }

    #[test]
    fn guests_queue_apart() {
        let mut s = Slots::default();
        assert!(s.submit("a", 1));
        assert!(s.submit("b", 2), "b does not wait behind a");
        assert_eq!((s.next("a"), s.next("b")), (Some(1), Some(2)));
    }

    #[test]
    fn a_guest_is_settled_only_from_the_latest_offer() {
        let mut s = Slots::default();
        let g: BTreeSet<String> = ["g".to_string()].into();
        s.submit("g", 1);
        assert_eq!(s.next("g"), Some(1));
        s.submit("g", 2);
        s.settle("g");
        assert!(!s.all_settled(&g), "2 came in while 1 loaded");
        assert_eq!(s.next("g"), Some(2));
        s.settle("g");
        assert!(s.all_settled(&g));
        s.submit("g", 3);
        assert!(!s.all_settled(&g), "a new offer unsettles it");
        assert!(!s.all_settled(&BTreeSet::new()), "nothing is not settled");
    }

    #[test]
    fn the_last_load_outlives_the_task_that_made_it_and_a_removal_forgets_it() {
        let mut s: Slots<u32> = Slots::default();
        let at = Instant::now();
        s.submit("g", 1);
        assert_eq!(s.next("g"), Some(1));
        s.loading("g", Some(at));
        assert_eq!(s.next("g"), None, "the task ends");
        s.submit("g", 2);
        assert_eq!(s.last_load("g"), Some(at), "the next task still sees it");
        s.loading("g", None);
        assert_eq!(s.last_load("g"), None);
    }

    #[test]
    fn an_abandoned_guest_takes_offers_again() {
        let mut s = Slots::default();
        s.submit("g", 1);
        assert_eq!(s.next("g"), Some(1));
        s.abandon("g");
        assert!(s.submit("g", 2), "a new task starts");
    }

    #[test]
    fn after_close_nothing_more_is_taken() {
        let mut s = Slots::default();
        s.submit("g", 1);
        s.close();
        assert_eq!(s.next("g"), None, "what waited is dropped");
        assert!(!s.submit("g", 2), "no task is started");
        assert_eq!(s.next("g"), None);
        assert_eq!(s.newer("g"), None, "nor after a wait");
        assert!(s.is_closed());
    }

    #[test]
    fn what_arrives_during_a_wait_supersedes_what_was_taken() {
        let mut s = Slots::default();
        s.submit("g", 1);
        assert_eq!(s.next("g"), Some(1));
        assert_eq!(s.newer("g"), None);
        s.submit("g", 2);
        assert_eq!(s.newer("g"), Some(2));
    }
}
