//! Delta FIFO: per-key ordered deltas between the reflector and the store.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::pin::pin;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::object::{Object, ObjectRef};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// A watch ADDED event.
    Added,
    /// A watch MODIFIED event.
    Updated,
    /// A watch DELETED event, or a key that vanished from a relist (then the object is a
    /// [`DeltaObject::Tombstone`]).
    Deleted,
    /// The object was in a relist. It may or may not have changed since it was last seen.
    Replaced,
    /// A periodic resync re-delivering the stored object; nothing changed.
    Sync,
}

/// What a delta carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaObject {
    /// The object as the API server sent it (after the informer's transform).
    Object(ObjectRef),
    /// Deleted with final state unknown (client-go `DeletedFinalStateUnknown`): the key vanished
    /// from a relist, so the delete event itself was missed. Carries the last known object, which
    /// may be stale.
    Tombstone {
        /// The store key that vanished.
        key: Arc<str>,
        /// The newest object the FIFO or the store had for the key. The same `Arc` as before, so
        /// it is not transformed again.
        last_known: ObjectRef,
    },
}

impl DeltaObject {
    /// The store key of the object.
    pub fn key(&self) -> &str {
        match self {
            Self::Object(obj) => obj.key(),
            Self::Tombstone { key, .. } => key,
        }
    }

    /// The object; for a tombstone, the last known (possibly stale) object.
    pub fn object(&self) -> &ObjectRef {
        match self {
            Self::Object(obj) => obj,
            Self::Tombstone { last_known, .. } => last_known,
        }
    }

    /// Whether this is a "deleted, final state unknown" tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Self::Tombstone { .. })
    }
}

/// One change to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change; for [`DeltaType::Deleted`], its state before deletion.
    pub object: DeltaObject,
}

/// What the FIFO needs to know about the store behind it (the store implements this).
///
/// Where it may surprise: the FIFO calls these methods while holding its own lock (from
/// [`DeltaFifo::delete`], [`DeltaFifo::replace`] and [`DeltaFifo::resync`]), so an
/// implementation must never call into the FIFO, and the store's lock must always be taken
/// after (inside) the FIFO's, as [`DeltaFifo::pop`]'s `process` does.
pub trait KnownObjects: Send + Sync {
    /// The stored object for a key.
    fn get(&self, key: &str) -> Option<ObjectRef>;
    /// Keys currently stored, optionally only those in one namespace (None = all keys).
    fn keys(&self, namespace: Option<&str>) -> Vec<Arc<str>>;
}

/// A queue of keys, each with the deltas that arrived for it since it was last popped.
///
/// Producers (reflectors) call [`add`](Self::add), [`update`](Self::update),
/// [`delete`](Self::delete), [`replace`](Self::replace) and [`resync`](Self::resync); one
/// consumer calls [`pop`](Self::pop) and applies the deltas to the store. Each key is queued at
/// most once and keeps its place in the queue while more deltas pile up behind it.
///
/// Where it may surprise: with several concurrent poppers, two of them may process different
/// versions of the same key at once; use one popper per FIFO.
pub struct DeltaFifo {
    inner: Mutex<Inner>,
    notify: Notify,
    known: Arc<dyn KnownObjects>,
    initial_replaces: usize,
}

struct Inner {
    /// Invariant: a key is in `queue` iff it is in `items`, and its deltas are never empty.
    items: HashMap<Arc<str>, Vec<Delta>>,
    queue: VecDeque<Arc<str>>,
    closed: bool,
    /// Whether the initial population has arrived (see [`DeltaFifo::has_synced`]).
    populated: bool,
    /// Distinct Replace scopes seen before `populated`; emptied once populated.
    initial_scopes: HashSet<Option<Box<str>>>,
    /// Keys queued by initial Replaces and not popped since. A set rather than client-go's
    /// counter because with several initial Replaces interleaved with pops a counter drifts.
    initial_pending: HashSet<Arc<str>>,
}

impl Inner {
    /// Appends a delta to the key's list, merging a trailing pair of deletions. A key that was
    /// not queued goes to the back.
    fn queue_action(&mut self, kind: DeltaType, object: DeltaObject) {
        let key: Arc<str> = match &object {
            DeltaObject::Object(obj) => obj.key_arc().clone(),
            DeltaObject::Tombstone { key, .. } => key.clone(),
        };
        let delta = Delta { kind, object };
        match self.items.get_mut(&key) {
            Some(deltas) => {
                deltas.push(delta);
                dedup_trailing_deletes(deltas);
            }
            None => {
                self.queue.push_back(key.clone());
                self.items.insert(key, vec![delta]);
            }
        }
    }

    fn has_synced(&self) -> bool {
        self.populated && self.initial_pending.is_empty()
    }
}

/// Merges the last two deltas when both are deletions (a watch replay, or a relist tombstone
/// racing the real delete event); nothing else ever merges, so every Added/Updated reaches the
/// handlers.
///
/// Which one survives follows client-go's `isDeletionDup` exactly: the later one if the earlier
/// is a tombstone, otherwise the earlier one. So a real object always beats a tombstone, two
/// tombstones keep the later, and two real deletes keep the *earlier*.
fn dedup_trailing_deletes(deltas: &mut Vec<Delta>) {
    let n = deltas.len();
    if n < 2 || deltas[n - 1].kind != DeltaType::Deleted || deltas[n - 2].kind != DeltaType::Deleted
    {
        return;
    }
    let later = deltas.pop().expect("n >= 2");
    if deltas[n - 2].object.is_tombstone() {
        deltas[n - 2] = later;
    }
}

impl DeltaFifo {
    /// Creates an empty FIFO in front of `known` (the store it feeds).
    ///
    /// `initial_replaces`: how many distinct Replace scopes must arrive before the FIFO counts as
    /// populated (one per namespace reflector; 1 for an all-namespaces or cluster-scoped
    /// informer). 0 means there is no initial list to wait for: [`has_synced`](Self::has_synced)
    /// is true from the start.
    pub fn new(known: Arc<dyn KnownObjects>, initial_replaces: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                items: HashMap::new(),
                queue: VecDeque::new(),
                closed: false,
                populated: initial_replaces == 0,
                initial_scopes: HashSet::new(),
                initial_pending: HashSet::new(),
            }),
            notify: Notify::new(),
            known,
            initial_replaces,
        }
    }

    /// Queues an [`DeltaType::Added`] delta.
    ///
    /// With `initial_replaces == 1`, an add before any Replace marks the FIFO populated (as in
    /// client-go), so [`has_synced`](Self::has_synced) turns true without waiting for a list.
    pub fn add(&self, obj: ObjectRef) {
        self.enqueue(DeltaType::Added, obj);
    }

    /// Queues an [`DeltaType::Updated`] delta. Populates like [`add`](Self::add).
    pub fn update(&self, obj: ObjectRef) {
        self.enqueue(DeltaType::Updated, obj);
    }

    /// Queues a [`DeltaType::Deleted`] delta carrying the object's final state.
    ///
    /// Where it may surprise: the delete is silently dropped when the key is neither stored nor
    /// queued, because then a relist has already reported it (as a tombstone) or it was never
    /// seen; reporting it again would tell handlers about one deletion twice.
    pub fn delete(&self, obj: ObjectRef) {
        let mut inner = self.inner.lock().unwrap();
        self.mark_populated_by_event(&mut inner);
        if !inner.items.contains_key(obj.key()) && self.known.get(obj.key()).is_none() {
            return;
        }
        inner.queue_action(DeltaType::Deleted, DeltaObject::Object(obj));
        drop(inner);
        self.notify.notify_waiters();
    }

    fn enqueue(&self, kind: DeltaType, obj: ObjectRef) {
        let mut inner = self.inner.lock().unwrap();
        self.mark_populated_by_event(&mut inner);
        inner.queue_action(kind, DeltaObject::Object(obj));
        drop(inner);
        self.notify.notify_waiters();
    }

    fn mark_populated_by_event(&self, inner: &mut Inner) {
        // With several namespace reflectors, one reflector's watch events say nothing about
        // whether the other namespaces have been listed yet, so only Replaces count then.
        if self.initial_replaces <= 1 {
            inner.populated = true;
        }
    }

    /// A relist: the complete current contents of `namespace` (or of everything, when `None`).
    ///
    /// Every item gets a [`DeltaType::Replaced`] delta. Every key that is stored or queued in
    /// that scope but absent from `items` gets `Deleted(Tombstone { last_known })`, where
    /// `last_known` is the newest queued object for the key if it is queued, else the stored
    /// object. A queued real delete is never lost: the tombstone merges into it and the real one
    /// is kept.
    ///
    /// Where it may surprise: `namespace` scopes the relist (several per-namespace reflectors
    /// share one FIFO), so a Replace for `a` never tombstones keys of `b` or cluster-scoped keys;
    /// but items are queued as given, whatever their namespace.
    pub fn replace(&self, items: Vec<ObjectRef>, namespace: Option<&str>) {
        let mut inner = self.inner.lock().unwrap();
        let mut listed: HashSet<Arc<str>> = HashSet::with_capacity(items.len());
        for obj in items {
            listed.insert(obj.key_arc().clone());
            inner.queue_action(DeltaType::Replaced, DeltaObject::Object(obj));
        }

        let in_scope = |obj: &Object| namespace.is_none_or(|ns| obj.namespace() == Some(ns));
        // Queued keys first, in queue order, so the outcome does not depend on hash order; their
        // newest delta is fresher than the store, which only catches up when they are popped.
        let vanished_queued: Vec<(Arc<str>, ObjectRef)> = inner
            .queue
            .iter()
            .filter(|key| !listed.contains(*key))
            .filter_map(|key| {
                let newest = inner.items[key].last()?.object.object();
                in_scope(newest).then(|| (key.clone(), newest.clone()))
            })
            .collect();
        let mut tombstoned: Vec<Arc<str>> = Vec::with_capacity(vanished_queued.len());
        for (key, last_known) in vanished_queued {
            tombstoned.push(key.clone());
            inner.queue_action(
                DeltaType::Deleted,
                DeltaObject::Tombstone { key, last_known },
            );
        }
        for key in self.known.keys(namespace) {
            if listed.contains(&key) || inner.items.contains_key(&key) {
                continue;
            }
            let Some(last_known) = self.known.get(&key) else {
                // Listed but gone by the time we looked: nothing left to delete.
                tracing::warn!(%key, "store listed a key it then could not get; no tombstone");
                continue;
            };
            tombstoned.push(key.clone());
            inner.queue_action(
                DeltaType::Deleted,
                DeltaObject::Tombstone { key, last_known },
            );
        }

        if !inner.populated {
            inner.initial_pending.extend(listed);
            inner.initial_pending.extend(tombstoned);
            inner.initial_scopes.insert(namespace.map(Box::from));
            if inner.initial_scopes.len() >= self.initial_replaces {
                inner.populated = true;
                inner.initial_scopes = HashSet::new();
            }
        }
        let queued_any = !inner.queue.is_empty();
        drop(inner);
        if queued_any {
            self.notify.notify_waiters();
        }
    }

    /// Periodic resync: a [`DeltaType::Sync`] delta for every stored key that has nothing
    /// queued.
    ///
    /// Keys with queued deltas are skipped because the store still holds their previous
    /// version: a Sync of it, queued after a newer delta, would look like a step back.
    pub fn resync(&self) {
        let mut inner = self.inner.lock().unwrap();
        let mut queued_any = false;
        for key in self.known.keys(None) {
            if inner.items.contains_key(&key) {
                continue;
            }
            if let Some(obj) = self.known.get(&key) {
                inner.queue_action(DeltaType::Sync, DeltaObject::Object(obj));
                queued_any = true;
            }
        }
        drop(inner);
        if queued_any {
            self.notify.notify_waiters();
        }
    }

    /// Waits for a key, removes it from the queue and calls `process(key, deltas oldest-first)`,
    /// returning what `process` returns.
    ///
    /// Where it may surprise: `process` runs while the FIFO lock is held (as in client-go), so
    /// that a concurrent [`replace`](Self::replace) sees the store and the queue consistently.
    /// It must therefore be quick and must never call back into the FIFO (that deadlocks).
    /// Returns `None` once the FIFO is [closed](Self::close), even if keys remain queued.
    /// Cancel-safe: dropping the future before it completes loses nothing.
    pub async fn pop<R>(&self, process: impl FnOnce(&Arc<str>, Vec<Delta>) -> R) -> Option<R> {
        loop {
            // Registered before looking at the queue, so an add between the look and the await
            // still wakes us.
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut inner = self.inner.lock().unwrap();
                if inner.closed {
                    return None;
                }
                if let Some(key) = inner.queue.pop_front() {
                    let deltas = inner.items.remove(&key).expect("queued key has deltas");
                    if !inner.initial_pending.is_empty() {
                        inner.initial_pending.remove(&key);
                    }
                    // A large initial sync leaves capacity for every key behind; once drained,
                    // give it back rather than hold tens of bytes per cached object forever.
                    if inner.queue.is_empty() && inner.items.capacity() > 1024 {
                        inner.items.shrink_to_fit();
                        inner.queue.shrink_to_fit();
                        inner.initial_pending.shrink_to_fit();
                    }
                    return Some(process(&key, deltas));
                }
            }
            notified.await;
        }
    }

    /// True once the initial population has been delivered: `initial_replaces` distinct scopes
    /// have called [`replace`](Self::replace) and every key those Replaces queued (items and
    /// tombstones) has been popped and processed.
    ///
    /// Where it may surprise (client-go's choice, kept): with `initial_replaces == 1`, an
    /// add/update/delete before the first Replace marks the FIFO populated, and that later
    /// Replace no longer counts as initial. With `initial_replaces > 1` only Replaces count;
    /// Replaces repeated for a scope before all scopes have arrived count as initial too.
    pub fn has_synced(&self) -> bool {
        self.inner.lock().unwrap().has_synced()
    }

    /// Closes the FIFO: every pending and future [`pop`](Self::pop) returns `None`.
    ///
    /// Where it may surprise: queued keys are not dropped, and producers may still queue; only
    /// popping stops.
    pub fn close(&self) {
        self.inner.lock().unwrap().closed = true;
        self.notify.notify_waiters();
    }

    /// Number of queued keys (not deltas).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for DeltaFifo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("DeltaFifo");
        // try_lock: Debug may be reached from inside `process`, which already holds the lock.
        match self.inner.try_lock() {
            Ok(inner) => d
                .field("len", &inner.queue.len())
                .field("closed", &inner.closed)
                .field("has_synced", &inner.has_synced()),
            Err(_) => d.field("len", &"<locked>"),
        };
        d.field("initial_replaces", &self.initial_replaces)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use futures::FutureExt;
    use serde_json::json;

    use super::*;
    use crate::object::Transform;

    fn obj(ns: Option<&str>, name: &str, rv: &str) -> ObjectRef {
        let mut meta = json!({"name": name, "resourceVersion": rv});
        if let Some(ns) = ns {
            meta["namespace"] = ns.into();
        }
        let value = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta});
        Arc::new(Object::from_value(value, &Transform::none(), None).unwrap())
    }

    fn pod(name: &str, rv: &str) -> ObjectRef {
        obj(Some("ns"), name, rv)
    }

    /// A store stand-in; BTreeMap so that `keys` (and so tombstone order) is deterministic.
    #[derive(Default)]
    struct FakeStore(Mutex<BTreeMap<Arc<str>, ObjectRef>>);

    impl FakeStore {
        fn put(&self, o: ObjectRef) {
            self.0.lock().unwrap().insert(o.key_arc().clone(), o);
        }

        /// What an informer's process function does with popped deltas.
        fn apply(&self, deltas: &[Delta]) {
            let mut map = self.0.lock().unwrap();
            for d in deltas {
                let o = d.object.object();
                if d.kind == DeltaType::Deleted {
                    map.remove(d.object.key());
                } else {
                    map.insert(o.key_arc().clone(), o.clone());
                }
            }
        }
    }

    impl KnownObjects for FakeStore {
        fn get(&self, key: &str) -> Option<ObjectRef> {
            self.0.lock().unwrap().get(key).cloned()
        }

        fn keys(&self, namespace: Option<&str>) -> Vec<Arc<str>> {
            let map = self.0.lock().unwrap();
            map.iter()
                .filter(|(_, o)| namespace.is_none_or(|ns| o.namespace() == Some(ns)))
                .map(|(k, _)| k.clone())
                .collect()
        }
    }

    fn fifo(store: &Arc<FakeStore>, initial_replaces: usize) -> DeltaFifo {
        DeltaFifo::new(store.clone() as Arc<dyn KnownObjects>, initial_replaces)
    }

    fn new_fifo() -> (Arc<FakeStore>, DeltaFifo) {
        let store = Arc::new(FakeStore::default());
        let f = fifo(&store, 1);
        (store, f)
    }

    /// Pops without waiting; `None` when nothing is queued.
    fn try_pop(f: &DeltaFifo) -> Option<(Arc<str>, Vec<Delta>)> {
        f.pop(|k, d| (k.clone(), d)).now_or_never().flatten()
    }

    /// Pops and applies to the store, as the informer does.
    fn pop_into(f: &DeltaFifo, store: &FakeStore) -> Option<Arc<str>> {
        f.pop(|k, d| {
            store.apply(&d);
            k.clone()
        })
        .now_or_never()
        .flatten()
    }

    /// (kind, resourceVersion, is_tombstone) per delta.
    fn summary(deltas: &[Delta]) -> Vec<(DeltaType, String, bool)> {
        deltas
            .iter()
            .map(|d| {
                let rv = d.object.object().resource_version().to_string();
                (d.kind, rv, d.object.is_tombstone())
            })
            .collect()
    }

    fn tombstone(o: &ObjectRef) -> DeltaObject {
        DeltaObject::Tombstone {
            key: o.key_arc().clone(),
            last_known: o.clone(),
        }
    }

    use DeltaType::*;

    #[test]
    fn pop_hands_over_all_deltas_of_a_key_oldest_first() {
        let (_, f) = new_fifo();
        f.add(pod("a", "1"));
        f.update(pod("a", "2"));
        f.update(pod("a", "3"));
        assert_eq!(f.len(), 1);
        let (key, deltas) = try_pop(&f).unwrap();
        assert_eq!(&*key, "ns/a");
        assert_eq!(
            summary(&deltas),
            [
                (Added, "1".into(), false),
                (Updated, "2".into(), false),
                (Updated, "3".into(), false)
            ]
        );
        assert!(f.is_empty());
        assert!(try_pop(&f).is_none());
    }

    #[test]
    fn keys_pop_in_fifo_order_without_duplicates() {
        let (_, f) = new_fifo();
        f.add(pod("a", "1"));
        f.add(pod("b", "1"));
        f.update(pod("a", "2"));
        f.add(pod("c", "1"));
        f.update(pod("b", "2"));
        assert_eq!(f.len(), 3);
        let keys: Vec<_> = std::iter::from_fn(|| try_pop(&f).map(|(k, _)| k)).collect();
        assert_eq!(
            keys.iter().map(|k| &**k).collect::<Vec<_>>(),
            ["ns/a", "ns/b", "ns/c"]
        );
    }

    #[test]
    fn key_readded_after_pop_goes_to_the_back() {
        let (_, f) = new_fifo();
        f.add(pod("a", "1"));
        f.add(pod("b", "1"));
        assert_eq!(&*try_pop(&f).unwrap().0, "ns/a");
        f.update(pod("a", "2"));
        assert_eq!(&*try_pop(&f).unwrap().0, "ns/b");
        let (key, deltas) = try_pop(&f).unwrap();
        assert_eq!(
            (&*key, summary(&deltas)),
            ("ns/a", vec![(Updated, "2".into(), false)])
        );
    }

    #[test]
    fn only_two_trailing_deletes_merge() {
        let (store, f) = new_fifo();
        store.put(pod("a", "1"));
        f.delete(pod("a", "1"));
        f.update(pod("a", "2"));
        f.delete(pod("a", "2"));
        f.delete(pod("a", "3"));
        let (_, deltas) = try_pop(&f).unwrap();
        // The first delete is not adjacent to the others, and the Updated never merges.
        assert_eq!(
            summary(&deltas),
            [
                (Deleted, "1".into(), false),
                (Updated, "2".into(), false),
                (Deleted, "2".into(), false)
            ]
        );

        f.update(pod("a", "4"));
        f.update(pod("a", "4"));
        assert_eq!(
            try_pop(&f).unwrap().1.len(),
            2,
            "identical updates do not merge"
        );
    }

    #[test]
    fn real_delete_beats_tombstone_in_either_order() {
        let (store, f) = new_fifo();
        let real = pod("a", "2");
        let stale = pod("a", "1");
        store.put(stale.clone());

        f.replace(vec![], None); // tombstone(rv 1)
        f.delete(real.clone());
        assert_eq!(
            try_pop(&f).unwrap().1,
            [Delta {
                kind: Deleted,
                object: DeltaObject::Object(real.clone())
            }]
        );

        f.delete(real.clone());
        f.replace(vec![], None);
        assert_eq!(
            try_pop(&f).unwrap().1,
            [Delta {
                kind: Deleted,
                object: DeltaObject::Object(real)
            }]
        );
    }

    #[test]
    fn two_tombstones_keep_the_later_and_two_real_deletes_keep_the_earlier() {
        let (store, f) = new_fifo();
        let (old, new) = (pod("a", "1"), pod("a", "2"));
        store.put(old.clone());
        {
            let mut inner = f.inner.lock().unwrap();
            inner.queue_action(Deleted, tombstone(&old));
            inner.queue_action(Deleted, tombstone(&new));
        }
        assert_eq!(
            try_pop(&f).unwrap().1,
            [Delta {
                kind: Deleted,
                object: tombstone(&new)
            }]
        );

        // client-go's isDeletionDup keeps the earlier real delete.
        f.delete(old.clone());
        f.delete(new);
        assert_eq!(
            try_pop(&f).unwrap().1,
            [Delta {
                kind: Deleted,
                object: DeltaObject::Object(old)
            }]
        );
    }

    #[test]
    fn delete_of_unknown_key_is_dropped() {
        let (_, f) = new_fifo();
        f.delete(pod("ghost", "1"));
        assert!(f.is_empty());
    }

    #[test]
    fn delete_of_stored_or_queued_key_is_kept() {
        let (store, f) = new_fifo();
        store.put(pod("stored", "1"));
        f.delete(pod("stored", "1"));
        f.add(pod("queued", "1"));
        f.delete(pod("queued", "1"));
        assert_eq!(
            summary(&try_pop(&f).unwrap().1),
            [(Deleted, "1".into(), false)]
        );
        assert_eq!(
            summary(&try_pop(&f).unwrap().1),
            [(Added, "1".into(), false), (Deleted, "1".into(), false)]
        );
    }

    #[test]
    fn replace_marks_every_item_replaced() {
        let (store, f) = new_fifo();
        store.put(pod("a", "1"));
        f.replace(vec![pod("a", "2"), pod("b", "1")], None);
        assert_eq!(
            summary(&try_pop(&f).unwrap().1),
            [(Replaced, "2".into(), false)]
        );
        assert_eq!(
            summary(&try_pop(&f).unwrap().1),
            [(Replaced, "1".into(), false)]
        );
        assert!(f.is_empty());
    }

    #[test]
    fn replace_tombstones_vanished_stored_and_queued_keys() {
        let (store, f) = new_fifo();
        store.put(pod("stored", "1"));
        store.put(pod("both", "1"));
        f.update(pod("both", "2"));
        f.add(pod("queued", "5"));
        f.replace(vec![pod("kept", "1")], None);

        let popped: Vec<_> = std::iter::from_fn(|| try_pop(&f)).collect();
        let got: Vec<_> = popped.iter().map(|(k, d)| (&**k, summary(d))).collect();
        assert_eq!(
            got,
            [
                // Queued: last known is the newest queued object, not the stored one.
                (
                    "ns/both",
                    vec![(Updated, "2".into(), false), (Deleted, "2".into(), true)]
                ),
                (
                    "ns/queued",
                    vec![(Added, "5".into(), false), (Deleted, "5".into(), true)]
                ),
                ("ns/kept", vec![(Replaced, "1".into(), false)]),
                ("ns/stored", vec![(Deleted, "1".into(), true)]),
            ]
        );
        assert_eq!(popped[3].1[0].object.key(), "ns/stored");
    }

    #[test]
    fn replace_never_drops_a_queued_deletion() {
        let (store, f) = new_fifo();
        store.put(pod("a", "1"));
        f.delete(pod("a", "2"));
        // The relist's tombstone for "a" merges into the queued real delete, which survives.
        f.replace(vec![], None);
        let (_, deltas) = try_pop(&f).unwrap();
        assert_eq!(summary(&deltas), [(Deleted, "2".into(), false)]);

        // A key whose only trace is a queued tombstone gets a (merged) tombstone again.
        let (store, f) = new_fifo();
        store.put(pod("b", "1"));
        f.replace(vec![], None);
        store.0.lock().unwrap().clear();
        f.replace(vec![], None);
        assert_eq!(
            summary(&try_pop(&f).unwrap().1),
            [(Deleted, "1".into(), true)]
        );
    }

    #[test]
    fn tombstone_reuses_the_last_known_object_untransformed() {
        let (store, f) = new_fifo();
        let stored = pod("a", "1");
        store.put(stored.clone());
        f.replace(vec![], None);
        let (_, deltas) = try_pop(&f).unwrap();
        assert!(Arc::ptr_eq(deltas[0].object.object(), &stored));
    }

    #[test]
    fn replace_for_one_namespace_leaves_other_namespaces_alone() {
        let store = Arc::new(FakeStore::default());
        let f = fifo(&store, 2);
        store.put(obj(Some("a"), "x", "1"));
        store.put(obj(Some("b"), "y", "1"));
        store.put(obj(None, "cluster", "1"));
        f.add(obj(Some("b"), "queued", "1"));
        f.replace(vec![], Some("a"));

        let popped: Vec<_> = std::iter::from_fn(|| try_pop(&f)).collect();
        let got: Vec<_> = popped.iter().map(|(k, d)| (&**k, summary(d))).collect();
        assert_eq!(
            got,
            [
                ("b/queued", vec![(Added, "1".into(), false)]),
                ("a/x", vec![(Deleted, "1".into(), true)]),
            ]
        );
    }

    #[test]
    fn resync_skips_keys_with_queued_deltas() {
        let (store, f) = new_fifo();
        store.put(pod("idle", "1"));
        store.put(pod("busy", "1"));
        f.update(pod("busy", "2"));
        f.resync();
        let popped: Vec<_> = std::iter::from_fn(|| try_pop(&f)).collect();
        let got: Vec<_> = popped.iter().map(|(k, d)| (&**k, summary(d))).collect();
        assert_eq!(
            got,
            [
                ("ns/busy", vec![(Updated, "2".into(), false)]),
                ("ns/idle", vec![(Sync, "1".into(), false)]),
            ]
        );
    }

    #[test]
    fn has_synced_after_initial_items_are_processed() {
        let (store, f) = new_fifo();
        store.put(pod("gone", "1"));
        assert!(!f.has_synced());
        f.replace(vec![pod("a", "1"), pod("b", "1")], None);
        assert!(!f.has_synced(), "nothing processed yet");
        assert!(pop_into(&f, &store).is_some());
        assert!(pop_into(&f, &store).is_some());
        assert!(!f.has_synced(), "the tombstone is still queued");
        assert_eq!(pop_into(&f, &store).as_deref(), Some("ns/gone"));
        assert!(f.has_synced());
        assert!(store.get("ns/gone").is_none());

        // Later traffic and relists do not unsync it.
        f.add(pod("c", "1"));
        f.replace(vec![], None);
        assert!(f.has_synced());
    }

    #[test]
    fn has_synced_with_an_empty_initial_list_is_immediate() {
        let (_, f) = new_fifo();
        f.replace(vec![], None);
        assert!(f.has_synced());
    }

    #[test]
    fn has_synced_after_an_event_before_any_replace_like_client_go() {
        let (_, f) = new_fifo();
        f.add(pod("a", "1"));
        assert!(f.has_synced());
        f.replace(vec![pod("b", "1")], None);
        assert!(f.has_synced(), "a Replace after population is not initial");
    }

    #[test]
    fn has_synced_waits_for_every_initial_replace_scope() {
        let store = Arc::new(FakeStore::default());
        let f = fifo(&store, 2);
        f.add(obj(Some("a"), "early", "1"));
        assert!(
            !f.has_synced(),
            "events do not populate a multi-namespace FIFO"
        );
        f.replace(vec![obj(Some("a"), "x", "1")], Some("a"));
        f.replace(vec![obj(Some("a"), "x", "2")], Some("a"));
        while pop_into(&f, &store).is_some() {}
        assert!(!f.has_synced(), "the same scope twice is still one scope");
        f.replace(vec![obj(Some("b"), "y", "1")], Some("b"));
        assert!(!f.has_synced());
        assert_eq!(pop_into(&f, &store).as_deref(), Some("b/y"));
        assert!(f.has_synced());
    }

    #[test]
    fn zero_initial_replaces_is_synced_from_the_start() {
        let store = Arc::new(FakeStore::default());
        assert!(fifo(&store, 0).has_synced());
    }

    #[tokio::test]
    async fn pop_waits_until_add() {
        let (_, f) = new_fifo();
        let f = Arc::new(f);
        let popper = tokio::spawn({
            let f = f.clone();
            async move { f.pop(|k, d| (k.clone(), d.len())).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!popper.is_finished(), "pop returned with nothing queued");
        f.add(pod("a", "1"));
        let got = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got.map(|(k, n)| (k.to_string(), n)),
            Some(("ns/a".to_string(), 1))
        );
    }

    #[tokio::test]
    async fn close_wakes_pop() {
        let (_, f) = new_fifo();
        let f = Arc::new(f);
        let popper = tokio::spawn({
            let f = f.clone();
            async move { f.pop(|_, _| ()).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!popper.is_finished());
        f.close();
        let got = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, None);
    }

    #[tokio::test]
    async fn pop_returns_none_after_close_even_with_items_queued() {
        let (_, f) = new_fifo();
        f.add(pod("a", "1"));
        f.close();
        assert_eq!(f.pop(|_, _| ()).await, None);
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn pop_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let (_, f) = new_fifo();
        let fut = f.pop(|_, _| ());
        assert_send(&fut);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_adds_and_pops_lose_nothing() {
        const N: usize = 2000;
        let (_, f) = new_fifo();
        let f = Arc::new(f);
        let consumer = tokio::spawn({
            let f = f.clone();
            async move {
                let mut seen = 0;
                while seen < N {
                    seen += f.pop(|_, d| d.len()).await.unwrap();
                }
                seen
            }
        });
        for i in 0..N {
            f.add(pod(&format!("p{}", i % 37), &i.to_string()));
            if i % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let seen = tokio::time::timeout(Duration::from_secs(10), consumer)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, N);
        assert!(f.is_empty());
    }

    #[test]
    fn debug_shows_len() {
        let (_, f) = new_fifo();
        f.add(pod("a", "1"));
        let s = format!("{f:?}");
        assert!(s.contains("len: 1"), "{s}");
    }
}
