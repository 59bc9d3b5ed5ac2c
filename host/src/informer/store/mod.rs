//! Store and indexes: an informer's cache, keyed by `namespace/name`, indexed by namespace,
//! owner UID, label and declared JSON-path fields.
//!
//! Reads are snapshots: one read lock covers a whole `list`, so a result never mixes two
//! versions of the store. Returned objects are the stored `Arc`s, never copies.
//!
//! A query on a field that has no index is an error naming the index to declare. It never
//! silently becomes a full scan, which is the controller-runtime trap this module exists to
//! close.
//!
//! **Three handles, three rights** (kube-rs splits its store the same way): a [`Writer`] changes
//! the content and is held only by the informer task that applies the delta FIFO; a [`Store`]
//! reads, and is what handlers, guest imports and tests get; [`Indexes`] declares field indexes
//! and nothing else, so declaring one for a guest never hands out the right to change what that
//! guest, or any other, reads.

mod error;
mod index;
mod query;

pub use error::{Error, Result};
pub use query::Query;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::informer::delta_fifo::KnownObjects;
use crate::informer::watermarks::Marks;
use crate::object::ObjectRef;
use index::Inner;

#[derive(Debug, Default)]
struct Shared {
    inner: RwLock<Inner>,
    touched: AtomicU64,
    index_failures: AtomicU64,
    changed: tokio::sync::Notify,
    /// What has been applied so far, and, as the watermarks, what had been applied the last
    /// time the delta FIFO was empty. Only then is every event up to it known to be in the
    /// store: the FIFO delivers per key, not in global resourceVersion order, so while it holds
    /// deltas a higher RV may have been applied before a lower one.
    marks: std::sync::Mutex<Marks>,
}

/// Read access to an indexed, thread-safe object cache. Cheap to clone: clones share one cache.
///
/// Note that this is a cache and may be stale: it holds what the informer has seen, which may
/// lag the API server (see [`Informer::staleness`](crate::informer::Informer::staleness) for
/// by how much). It has no way to change the content; only the [`Writer`] it came from does:
///
/// ```compile_fail
/// fn write_through_a_reader(store: &reconciled::informer::store::Store, obj: reconciled::object::ObjectRef) {
///     store.upsert(obj); // no such method on a reader
/// }
/// ```
///
/// ```compile_fail
/// fn declare_through_a_reader(store: &reconciled::informer::store::Store) {
///     store.add_field_index("spec.nodeName"); // declared through the informer instead
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

/// The only handle that changes a store's content: held by the informer task that applies the
/// delta FIFO, never handed to handlers or guests. Reads go through [`Writer::reader`].
///
/// Not `Clone`: a store has exactly one writer, the one that created it, so every change comes
/// from one place, in the FIFO's order.
#[derive(Debug, Default)]
pub struct Writer {
    shared: Arc<Shared>,
}

/// The right to declare field indexes on a store, without the right to change its content.
///
/// Declaring an index changes what every reader of the store may query, so this is the
/// informer's to give (see [`Informer::add_field_index`](crate::informer::Informer::add_field_index)),
/// not something a guest's reader can do.
#[derive(Debug, Clone)]
pub struct Indexes {
    shared: Arc<Shared>,
}

impl Shared {
    fn add_field_index(&self, path: &str) -> Result<()> {
        (self.inner.write().unwrap()).add_field_index(path, &self.index_failures)
    }
}

impl Indexes {
    /// Declares a field index on a dotted JSON path such as `spec.nodeName`; the path is also
    /// the index's name. Objects already stored are indexed at once, under the store's write
    /// lock, so a large store stalls its readers for that long.
    ///
    /// Where it may surprise: an index cannot be removed, and it serves every reader of the
    /// store, not only the one that asked for it.
    pub fn add_field_index(&self, path: &str) -> Result<()> {
        self.shared.add_field_index(path)
    }
}

impl Writer {
    /// An empty store with only the built-in indexes, and the only handle that may change it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A read handle on this store.
    pub fn reader(&self) -> Store {
        Store {
            shared: self.shared.clone(),
        }
    }

    /// A handle that may declare field indexes on this store, and do nothing else.
    pub fn indexes(&self) -> Indexes {
        Indexes {
            shared: self.shared.clone(),
        }
    }

    /// Declares a field index; see [`Indexes::add_field_index`].
    pub fn add_field_index(&self, path: &str) -> Result<()> {
        self.shared.add_field_index(path)
    }

    /// Records that `obj`'s resourceVersion has been applied (an upsert does this itself; the
    /// informer calls it for deletes, whose event carries the deletion's resourceVersion).
    pub fn observe(&self, obj: &ObjectRef) {
        self.shared.marks.lock().unwrap().observe(obj);
    }

    /// Publishes what has been applied as the watermark. Call only when nothing is pending
    /// between the watch and the store (the informer does, when its delta FIFO is empty).
    ///
    /// It costs the namespaces changed since the last publish, not every namespace seen.
    pub fn publish_watermarks(&self) {
        self.shared.marks.lock().unwrap().publish();
        self.shared.changed.notify_waiters();
    }

    /// Inserts or replaces an object, returning the previous version.
    ///
    /// Its resourceVersion counts as applied at once, but reaches the
    /// [`watermark`](Store::watermark) only at the next [`publish_watermarks`](Self::publish_watermarks).
    pub fn upsert(&self, obj: ObjectRef) -> Option<ObjectRef> {
        self.observe(&obj);
        let mut inner = self.shared.inner.write().unwrap();
        let old = inner.items.insert(obj.key_arc().clone(), obj.clone());
        if let Some(old) = &old {
            inner.unindex(old, &self.shared.index_failures);
            inner.bytes -= old.heap_bytes();
        }
        inner.index(&obj, &self.shared.index_failures);
        inner.bytes += obj.heap_bytes();
        drop(inner);
        self.shared.changed.notify_waiters();
        old
    }

    /// Removes an object by key, returning it.
    ///
    /// Where it may surprise: a key carries no resourceVersion, so this moves no watermark; the
    /// informer [`observe`](Self::observe)s the delete event's object first.
    pub fn remove(&self, key: &str) -> Option<ObjectRef> {
        let mut inner = self.shared.inner.write().unwrap();
        let old = inner.items.remove(key)?;
        inner.unindex(&old, &self.shared.index_failures);
        inner.bytes -= old.heap_bytes();
        drop(inner);
        self.shared.changed.notify_waiters();
        Some(old)
    }

    /// Replaces the whole content with a complete list taken at `resource_version` and rebuilds
    /// every index from scratch (declared field indexes are kept). Readers see either the old or
    /// the new content, never a mix.
    ///
    /// Every namespace's watermark becomes `resource_version` (or the newest item's, if higher)
    /// and is published at once: a complete list is by definition every event up to its version,
    /// so, unlike after [`upsert`](Self::upsert), there is nothing to wait for. client-go's
    /// `Store.Replace(list, resourceVersion)` takes the same version but its thread-safe store
    /// ignores it, leaving the reflector alone to remember it; here read-your-writes needs it to
    /// tell that a key absent from the list was deleted after, not before, the list.
    ///
    /// Where it may surprise: the watermark *follows* the list, so replacing with an older list
    /// than the store held moves it back. Pass 0 when the version is unknown (a server older than
    /// 1.35, whose versions do not compare): then only the items' own versions count.
    pub fn replace(&self, items: Vec<ObjectRef>, resource_version: u64) {
        let mut marks = Marks::at(resource_version);
        let mut inner = self.shared.inner.write().unwrap();
        inner.clear();
        for obj in items {
            marks.observe(&obj);
            inner.index(&obj, &self.shared.index_failures);
            inner.bytes += obj.heap_bytes();
            if let Some(twice) = inner.items.insert(obj.key_arc().clone(), obj) {
                // A list names each key once; should one come twice, the last one stays.
                inner.bytes -= twice.heap_bytes();
            }
        }
        // Under the content's write lock, so no reader pairs the new content with an old
        // watermark.
        marks.publish();
        *self.shared.marks.lock().unwrap() = marks;
        drop(inner);
        self.shared.changed.notify_waiters();
    }
}

impl Store {
    /// A resourceVersion at or below which every event of `namespace` ("" for cluster-scoped
    /// objects) is known to be in the store.
    ///
    /// Where it may surprise: it moves only when the informer's delta FIFO is empty (or at a
    /// [`Writer::replace`]), so under a steady stream of events it can trail
    /// [`resource_version`](Self::resource_version).
    pub fn watermark(&self, namespace: &str) -> u64 {
        self.shared.marks.lock().unwrap().watermark(namespace)
    }

    /// The highest resourceVersion applied to the store, over all namespaces (0 before the
    /// first): how far the content has got, for staleness reports.
    ///
    /// Where it may surprise: a bookmark moves the reflector on but not this, so on a quiet kind
    /// it stays at the last change while the cache is perfectly current; and unlike the
    /// [`watermark`](Self::watermark) it does not promise that every older event is applied.
    pub fn resource_version(&self) -> u64 {
        self.shared.marks.lock().unwrap().highest
    }

    /// Resolves after the next change (content or watermark). To wait for a condition without
    /// missing a change: create the future, `enable` it, check the condition, then await it.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.changed.notified()
    }

    /// The declared field indexes.
    pub fn field_indexes(&self) -> Vec<String> {
        let mut names: Vec<_> = self
            .shared
            .inner
            .read()
            .unwrap()
            .fields
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// The object stored under `key` (`namespace/name`, or `name` when cluster-scoped).
    pub fn get(&self, key: &str) -> Option<ObjectRef> {
        self.shared.inner.read().unwrap().items.get(key).cloned()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.shared.inner.read().unwrap().items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every stored object, sorted by key: one consistent snapshot.
    pub fn all(&self) -> Vec<ObjectRef> {
        self.list(&Query::default())
            .expect("an empty query needs no index")
    }

    /// Objects matching `query`, sorted by key, as one consistent snapshot.
    ///
    /// Uses the narrowest index the query allows (namespace, owner, a declared field, a positive
    /// label requirement) and filters those candidates. Only a query with no indexable condition
    /// at all (for example `app!=x` alone) scans the whole store. A field match on a field
    /// without an index is an [`Error::UnindexedField`], never a scan.
    pub fn list(&self, query: &Query) -> Result<Vec<ObjectRef>> {
        let inner = self.shared.inner.read().unwrap();
        let (mut out, touched) = inner.select(query)?;
        drop(inner);
        self.shared.touched.fetch_add(touched, Ordering::Relaxed);
        out.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        Ok(out)
    }

    /// How many stored objects `list` calls have examined, in total. An indexed query adds about
    /// the size of its result; a scan adds the size of the store.
    pub fn touched(&self) -> u64 {
        self.shared.touched.load(Ordering::Relaxed)
    }

    /// How many times a field index function failed on an object (the object was indexed under
    /// no value for that index).
    pub fn index_failures(&self) -> u64 {
        self.shared.index_failures.load(Ordering::Relaxed)
    }

    /// Stored objects' approximate heap bytes (their compact JSON and extracted keys; see
    /// [`Object::heap_bytes`](crate::object::Object::heap_bytes)), excluding index overhead.
    ///
    /// Kept up to date by every change, so reading it costs a read lock, not a walk over the
    /// store: a scrape may ask for every informer's.
    pub fn object_bytes(&self) -> usize {
        self.shared.inner.read().unwrap().bytes
    }

    /// Number of distinct values held by each index, for tests and metrics: (namespace, owner,
    /// label keys, field index → values).
    pub fn index_sizes(&self) -> (usize, usize, usize, Vec<(String, usize)>) {
        let inner = self.shared.inner.read().unwrap();
        let mut fields: Vec<_> = inner
            .fields
            .iter()
            .map(|(n, i)| (n.clone(), i.values.len()))
            .collect();
        fields.sort();
        (
            inner.by_namespace.len(),
            inner.by_owner.len(),
            inner.by_label.len(),
            fields,
        )
    }
}

impl KnownObjects for Store {
    fn get(&self, key: &str) -> Option<ObjectRef> {
        Store::get(self, key)
    }

    fn keys(&self, namespace: Option<&str>) -> Vec<Arc<str>> {
        let inner = self.shared.inner.read().unwrap();
        match namespace {
            None => inner.items.keys().cloned().collect(),
            Some(ns) => inner
                .by_namespace
                .get(ns)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Object, Transform};
    use crate::selector::LabelSelector;
    use serde_json::Value;
    use serde_json::json;

    fn obj(ns: &str, name: &str, labels: Value, spec: Value) -> ObjectRef {
        Arc::new(
            Object::from_value(
                json!({"metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "resourceVersion": "1", "labels": labels}, "spec": spec}),
                &Transform::none(),
                None,
            )
            .unwrap(),
        )
    }

    fn owned(ns: &str, name: &str, owner_uid: &str) -> ObjectRef {
        Arc::new(
            Object::from_value(
                json!({"metadata": {"name": name, "namespace": ns, "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": owner_uid, "controller": true}]}}),
                &Transform::none(),
                None,
            )
            .unwrap(),
        )
    }

    fn keys(objs: &[ObjectRef]) -> Vec<&str> {
        objs.iter().map(|o| o.key()).collect()
    }

    fn q() -> Query {
        Query::default()
    }

    #[test]
    fn builtin_indexes_narrow_by_namespace_owner_and_label() {
        let w = Writer::new();
        let s = w.reader();
        w.upsert(obj("a", "1", json!({"app": "web"}), json!({})));
        w.upsert(obj("a", "2", json!({"app": "db"}), json!({})));
        w.upsert(obj("b", "3", json!({"app": "web"}), json!({})));
        w.upsert(owned("b", "4", "owner-1"));

        let ns_a = s
            .list(&Query {
                namespace: Some("a".into()),
                ..q()
            })
            .unwrap();
        assert_eq!(keys(&ns_a), ["a/1", "a/2"]);
        let web = s
            .list(&Query {
                labels: LabelSelector::parse("app=web").unwrap(),
                ..q()
            })
            .unwrap();
        assert_eq!(keys(&web), ["a/1", "b/3"]);
        let web_in_b = Query {
            namespace: Some("b".into()),
            labels: LabelSelector::parse("app in (web,db)").unwrap(),
            ..q()
        };
        assert_eq!(keys(&s.list(&web_in_b).unwrap()), ["b/3"]);
        let by_owner = s
            .list(&Query {
                owner_uid: Some("owner-1".into()),
                ..q()
            })
            .unwrap();
        assert_eq!(keys(&by_owner), ["b/4"]);
        let has_app = s
            .list(&Query {
                labels: LabelSelector::parse("app").unwrap(),
                ..q()
            })
            .unwrap();
        assert_eq!(has_app.len(), 3);
        let not_web = s
            .list(&Query {
                labels: LabelSelector::parse("app!=web").unwrap(),
                ..q()
            })
            .unwrap();
        assert_eq!(
            keys(&not_web),
            ["a/2", "b/4"],
            "!= matches objects without the label"
        );
    }

    #[test]
    fn field_index_may_yield_several_values() {
        let w = Writer::new();
        let s = w.reader();
        w.add_field_index("spec.containers.image").unwrap();
        w.upsert(obj(
            "a",
            "p1",
            json!({}),
            json!({"containers": [{"image": "nginx"}, {"image": "envoy"}]}),
        ));
        w.upsert(obj(
            "a",
            "p2",
            json!({}),
            json!({"containers": [{"image": "envoy"}]}),
        ));
        let q_envoy = Query {
            fields: vec![("spec.containers.image".into(), "envoy".into())],
            ..q()
        };
        assert_eq!(keys(&s.list(&q_envoy).unwrap()), ["a/p1", "a/p2"]);
        let q_nginx = Query {
            fields: vec![("spec.containers.image".into(), "nginx".into())],
            ..q()
        };
        assert_eq!(keys(&s.list(&q_nginx).unwrap()), ["a/p1"]);
    }

    #[test]
    fn unindexed_field_match_is_an_error_naming_the_index() {
        let w = Writer::new();
        let s = w.reader();
        w.add_field_index("spec.nodeName").unwrap();
        w.upsert(obj("a", "1", json!({}), json!({"nodeName": "n1"})));
        let err = s
            .list(&Query {
                fields: vec![("spec.serviceAccountName".into(), "x".into())],
                ..q()
            })
            .unwrap_err();
        assert_eq!(
            err,
            Error::UnindexedField {
                field: "spec.serviceAccountName".into(),
                declared: vec!["spec.nodeName".into()]
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("declare the field index \"spec.serviceAccountName\""),
            "{msg}"
        );
        assert_eq!(s.touched(), 0, "an unindexed query must not scan");
    }

    #[test]
    fn builtin_fields_need_no_declaration() {
        let w = Writer::new();
        let s = w.reader();
        w.upsert(obj("a", "1", json!({}), json!({})));
        w.upsert(obj("b", "1", json!({}), json!({})));
        let by_name = Query {
            fields: vec![("metadata.name".into(), "1".into())],
            ..q()
        };
        assert_eq!(keys(&s.list(&by_name).unwrap()), ["a/1", "b/1"]);
        let exact = Query {
            fields: vec![
                ("metadata.namespace".into(), "b".into()),
                ("metadata.name".into(), "1".into()),
            ],
            ..q()
        };
        assert_eq!(keys(&s.list(&exact).unwrap()), ["b/1"]);
        let contradiction = Query {
            namespace: Some("a".into()),
            fields: vec![("metadata.namespace".into(), "b".into())],
            ..q()
        };
        assert!(s.list(&contradiction).unwrap().is_empty());
    }

    #[test]
    fn adding_an_index_to_a_populated_store_reindexes_and_duplicates_are_refused() {
        let w = Writer::new();
        let s = w.reader();
        for i in 0..10 {
            w.upsert(obj(
                "a",
                &format!("p{i}"),
                json!({}),
                json!({"nodeName": format!("n{}", i % 2)}),
            ));
        }
        w.add_field_index("spec.nodeName").unwrap();
        let on_n1 = Query {
            fields: vec![("spec.nodeName".into(), "n1".into())],
            ..q()
        };
        assert_eq!(s.list(&on_n1).unwrap().len(), 5);
        assert_eq!(
            w.add_field_index("spec.nodeName").unwrap_err(),
            Error::DuplicateIndex("spec.nodeName".into())
        );
        assert_eq!(
            w.add_field_index("metadata.name").unwrap_err(),
            Error::DuplicateIndex("metadata.name".into())
        );
        assert_eq!(
            w.add_field_index("spec..x").unwrap_err(),
            Error::BadIndexPath("spec..x".into())
        );
    }

    #[test]
    fn updates_move_index_entries_and_empty_sets_are_pruned() {
        let w = Writer::new();
        let s = w.reader();
        w.add_field_index("spec.nodeName").unwrap();
        w.upsert(obj(
            "a",
            "1",
            json!({"v": "old"}),
            json!({"nodeName": "n1"}),
        ));
        w.upsert(obj(
            "a",
            "1",
            json!({"v": "new"}),
            json!({"nodeName": "n2"}),
        ));
        let old = Query {
            labels: LabelSelector::parse("v=old").unwrap(),
            ..q()
        };
        assert!(s.list(&old).unwrap().is_empty());
        let n2 = Query {
            fields: vec![("spec.nodeName".into(), "n2".into())],
            ..q()
        };
        assert_eq!(s.list(&n2).unwrap().len(), 1);
        assert_eq!(
            s.index_sizes(),
            (1, 0, 1, vec![("spec.nodeName".into(), 1)])
        );
        w.remove("a/1");
        assert_eq!(
            s.index_sizes(),
            (0, 0, 0, vec![("spec.nodeName".into(), 0)])
        );
    }

    #[test]
    fn replace_rebuilds_indexes() {
        let w = Writer::new();
        let s = w.reader();
        w.add_field_index("spec.nodeName").unwrap();
        w.upsert(obj(
            "a",
            "gone",
            json!({"x": "1"}),
            json!({"nodeName": "n1"}),
        ));
        w.replace(
            vec![obj(
                "b",
                "new",
                json!({"y": "2"}),
                json!({"nodeName": "n2"}),
            )],
            0,
        );
        assert_eq!(keys(&s.all()), ["b/new"]);
        assert_eq!(
            s.index_sizes(),
            (1, 0, 1, vec![("spec.nodeName".into(), 1)])
        );
        let n2 = Query {
            fields: vec![("spec.nodeName".into(), "n2".into())],
            ..q()
        };
        assert_eq!(keys(&s.list(&n2).unwrap()), ["b/new"]);
    }

    #[test]
    fn a_failing_index_function_does_not_take_the_store_down() {
        let w = Writer::new();
        let s = w.reader();
        w.add_field_index("spec.nodeName").unwrap();
        w.upsert(obj(
            "a",
            "weird",
            json!({}),
            json!({"nodeName": {"not": "a scalar"}}),
        ));
        w.upsert(obj("a", "fine", json!({}), json!({"nodeName": "n1"})));
        assert_eq!(s.len(), 2);
        assert_eq!(s.index_failures(), 1);
        let n1 = Query {
            fields: vec![("spec.nodeName".into(), "n1".into())],
            ..q()
        };
        assert_eq!(keys(&s.list(&n1).unwrap()), ["a/fine"]);
    }

    #[test]
    fn indexed_lookup_touches_only_the_matches() {
        let w = Writer::new();
        let s = w.reader();
        w.add_field_index("spec.nodeName").unwrap();
        for i in 0..20_000 {
            let node = if i % 2000 == 0 {
                "hot".to_string()
            } else {
                format!("n{}", i % 97)
            };
            w.upsert(obj(
                &format!("ns{}", i % 50),
                &format!("p{i}"),
                json!({"i": i.to_string()}),
                json!({"nodeName": node}),
            ));
        }
        let before = s.touched();
        let hot = Query {
            fields: vec![("spec.nodeName".into(), "hot".into())],
            ..q()
        };
        assert_eq!(s.list(&hot).unwrap().len(), 10);
        assert_eq!(s.touched() - before, 10);
        let before = s.touched();
        let label = Query {
            labels: LabelSelector::parse("i in (5,6,7)").unwrap(),
            ..q()
        };
        assert_eq!(s.list(&label).unwrap().len(), 3);
        assert_eq!(s.touched() - before, 3);
    }

    #[test]
    fn reads_share_the_stored_object() {
        let w = Writer::new();
        let s = w.reader();
        let o = obj("a", "1", json!({}), json!({}));
        w.upsert(o.clone());
        assert!(Arc::ptr_eq(&o, &s.get("a/1").unwrap()));
        assert!(Arc::ptr_eq(&o, &s.all()[0]));
    }

    #[test]
    fn lists_are_snapshots_under_concurrent_writes() {
        // A writer flips every object between two generations; a list must never see a mix.
        let w = Writer::new();
        let s = w.reader();
        let gen_of = |o: &ObjectRef| o.label("gen").unwrap().to_string();
        let write_gen = |w: &Writer, g: &str| {
            let items = (0..200)
                .map(|i| obj("a", &format!("o{i}"), json!({"gen": g}), json!({})))
                .collect();
            w.replace(items, 0);
        };
        write_gen(&w, "0");
        let writer = std::thread::spawn(move || {
            for round in 0..200 {
                write_gen(&w, &(round % 2).to_string());
            }
        });
        for _ in 0..200 {
            let all = s.all();
            let first = gen_of(&all[0]);
            assert!(
                all.iter().all(|o| gen_of(o) == first),
                "a list mixed two generations"
            );
        }
        writer.join().unwrap();
    }

    fn at(ns: &str, name: &str, rv: u64) -> ObjectRef {
        Arc::new(
            Object::from_value(
                json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string()}}),
                &Transform::none(),
                None,
            )
            .unwrap(),
        )
    }

    #[test]
    fn replace_moves_the_watermark_to_the_lists_resource_version() {
        let w = Writer::new();
        let s = w.reader();
        w.upsert(at("a", "x", 7));
        w.publish_watermarks();
        assert_eq!(s.watermark("a"), 7);
        // A list at 40 whose newest item is 12: every event up to 40 is in it, including the
        // deletion of x and anything in namespaces with no objects left.
        w.replace(vec![at("a", "y", 12), at("b", "z", 9)], 40);
        assert_eq!(
            (s.watermark("a"), s.watermark("b"), s.watermark("empty")),
            (40, 40, 40),
            "published at once: a complete list leaves nothing pending"
        );
        assert_eq!(s.resource_version(), 40);
        w.upsert(at("a", "y", 41));
        assert_eq!(s.watermark("a"), 40, "an upsert waits to be published");
        assert_eq!(s.resource_version(), 41, "but counts as applied at once");
        w.publish_watermarks();
        assert_eq!((s.watermark("a"), s.watermark("b")), (41, 40));
    }

    #[test]
    fn a_publish_moves_only_the_namespaces_changed_since_the_last_one() {
        let mut marks = Marks::at(5);
        for i in 0..1000 {
            marks.observe(&at(&format!("ns{i}"), "x", 10 + i));
        }
        marks.publish();
        assert!(marks.dirty.is_empty());
        marks.observe(&at("ns7", "y", 2000));
        marks.observe(&at("ns7", "z", 1500));
        marks.observe(&at("ns8", "old", 3));
        assert_eq!(
            marks.dirty,
            [7],
            "one namespace moved, listed once; an older version moves nothing"
        );
        assert_eq!(marks.watermark("ns7"), 17, "not published yet");
        marks.publish();
        assert_eq!(
            (
                marks.watermark("ns7"),
                marks.watermark("ns8"),
                marks.watermark("never-seen")
            ),
            (2000, 18, 5)
        );
        assert_eq!(marks.highest, 2000);
    }

    #[test]
    fn replace_without_a_comparable_version_counts_its_items() {
        let w = Writer::new();
        let s = w.reader();
        w.replace(vec![at("a", "y", 12), at("b", "z", 9)], 0);
        assert_eq!((s.watermark("a"), s.watermark("b")), (12, 9));
        assert_eq!(s.resource_version(), 12);
    }

    #[test]
    fn the_resource_version_is_the_highest_applied_in_any_namespace() {
        let w = Writer::new();
        let s = w.reader();
        assert_eq!(s.resource_version(), 0);
        w.upsert(at("a", "x", 5));
        w.upsert(at("b", "y", 9));
        w.upsert(at("a", "x", 7));
        assert_eq!(s.resource_version(), 9);
        w.observe(&at("c", "gone", 11));
        w.remove("c/gone");
        assert_eq!(s.resource_version(), 11, "a delete's version counts");
    }

    #[test]
    fn an_index_declared_through_indexes_serves_every_reader() {
        let w = Writer::new();
        let (guest, other) = (w.reader(), w.reader());
        w.upsert(obj("a", "1", json!({}), json!({"nodeName": "n1"})));
        w.indexes().add_field_index("spec.nodeName").unwrap();
        let n1 = Query {
            fields: vec![("spec.nodeName".into(), "n1".into())],
            ..q()
        };
        assert_eq!(keys(&guest.list(&n1).unwrap()), ["a/1"]);
        assert_eq!(other.field_indexes(), ["spec.nodeName"]);
    }

    /// The sum a walk over the store would give, to hold the kept count against.
    fn walked(w: &Writer) -> usize {
        w.reader().all().iter().map(|o| o.heap_bytes()).sum()
    }

    #[test]
    fn the_byte_count_follows_every_change_without_a_walk() {
        let w = Writer::new();
        assert_eq!(w.reader().object_bytes(), 0);
        w.upsert(obj("a", "x", json!({"app": "web"}), json!({"n": 1})));
        w.upsert(obj("a", "y", json!({}), json!({"n": 2})));
        assert_eq!(w.reader().object_bytes(), walked(&w));
        let bigger = obj(
            "a",
            "x",
            json!({"app": "web", "tier": "front"}),
            json!({"n": "a longer value"}),
        );
        w.upsert(bigger);
        assert_eq!(
            w.reader().object_bytes(),
            walked(&w),
            "a replaced object counts once, at its new size"
        );
        w.remove("a/y");
        assert_eq!(w.reader().object_bytes(), walked(&w));
        assert!(w.remove("a/absent").is_none());
        assert_eq!(
            w.reader().object_bytes(),
            walked(&w),
            "removing what is not there changes nothing"
        );
        w.replace(vec![obj("b", "z", json!({}), json!({}))], 0);
        assert_eq!(
            w.reader().object_bytes(),
            walked(&w),
            "a replace counts the new content only"
        );
        w.replace(Vec::new(), 0);
        assert_eq!(w.reader().object_bytes(), 0);
    }
}
