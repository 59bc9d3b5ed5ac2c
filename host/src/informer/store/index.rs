//! The indexes of a store: by namespace, owner UID, label and declared JSON-path field, kept in
//! step with its content, and the choice of the narrowest of them for a query.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::error::{Error, Result};
use super::query::Query;
use crate::object::ObjectRef;
use crate::selector::Operator;

/// Fields every store can match on without a declared index.
const BUILTIN_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

pub(super) type KeySet = HashSet<Arc<str>>;

#[derive(Debug)]
pub(super) struct FieldIndex {
    path: Vec<String>,
    /// Value → the keys of the objects with it.
    pub(super) values: HashMap<Box<str>, KeySet>,
}

/// A store's content and its indexes, kept in step under the store's lock.
#[derive(Debug, Default)]
pub(super) struct Inner {
    pub(super) items: HashMap<Arc<str>, ObjectRef>,
    pub(super) by_namespace: HashMap<Box<str>, KeySet>,
    pub(super) by_owner: HashMap<Box<str>, KeySet>,
    /// label key → label value → keys. Two levels so `key`, `key in (...)` and `key=value` all
    /// find their candidates without a scan.
    pub(super) by_label: HashMap<Box<str>, HashMap<Box<str>, KeySet>>,
    pub(super) fields: HashMap<String, FieldIndex>,
    /// The sum of `items`' [`heap_bytes`](crate::object::Object::heap_bytes), kept as they
    /// change so that reading it is not a walk over the store.
    pub(super) bytes: usize,
}

fn insert_key<K: std::hash::Hash + Eq>(map: &mut HashMap<K, KeySet>, value: K, key: &Arc<str>) {
    map.entry(value).or_default().insert(key.clone());
}

/// Removes `key` from `map[value]`, pruning the set once empty so that indexes do not grow
/// with every value ever seen.
fn remove_key(map: &mut HashMap<Box<str>, KeySet>, value: &str, key: &str) {
    if let Some(set) = map.get_mut(value) {
        set.remove(key);
        if set.is_empty() {
            map.remove(value);
        }
    }
}

/// The values at a dotted path, fanning out through arrays (so `spec.containers.image` yields
/// every container's image). Scalars index as their JSON text without quotes; a path that ends
/// on an object or on an array of objects cannot be indexed.
/// A field index path that ends on an object or an array of objects, which has no value to
/// index under.
#[derive(Debug, thiserror::Error)]
#[error("the value at {0:?} is not a scalar")]
struct NotScalar(String);

fn values_at(value: &Value, path: &[String]) -> Result<Vec<String>, NotScalar> {
    let mut current = vec![value];
    for part in path {
        let mut next = Vec::new();
        for v in current {
            match v {
                Value::Object(m) => next.extend(m.get(part)),
                Value::Array(items) => {
                    next.extend(items.iter().filter_map(|i| i.as_object()?.get(part)))
                }
                _ => {}
            }
        }
        current = next;
    }
    let mut out = Vec::new();
    for v in current {
        let scalars: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for s in scalars {
            match s {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Bool(b) => out.push(b.to_string()),
                Value::Null => {}
                Value::Object(_) | Value::Array(_) => {
                    return Err(NotScalar(path.join(".")));
                }
            }
        }
    }
    Ok(out)
}

impl Inner {
    fn field_values(&self, obj: &ObjectRef, failures: &AtomicU64) -> Vec<(String, Vec<String>)> {
        if self.fields.is_empty() {
            return Vec::new();
        }
        let value = obj.to_value();
        self.fields
            .iter()
            .map(|(name, idx)| {
                let values = values_at(&value, &idx.path).unwrap_or_else(|reason| {
                    // client-go panics here and takes the process down; one bad object must not.
                    failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(index = %name, key = obj.key(), %reason, "field index failed; object indexed under no value");
                    Vec::new()
                });
                (name.clone(), values)
            })
            .collect()
    }

    pub(super) fn index(&mut self, obj: &ObjectRef, failures: &AtomicU64) {
        let key = obj.key_arc();
        if let Some(ns) = obj.namespace() {
            insert_key(&mut self.by_namespace, ns.into(), key);
        }
        for owner in obj.owners() {
            insert_key(&mut self.by_owner, owner.uid.clone(), key);
        }
        for (k, v) in obj.labels() {
            insert_key(self.by_label.entry(k.into()).or_default(), v.into(), key);
        }
        for (name, values) in self.field_values(obj, failures) {
            let idx = self.fields.get_mut(&name).expect("index exists");
            for v in values {
                insert_key(&mut idx.values, v.into_boxed_str(), key);
            }
        }
    }

    pub(super) fn unindex(&mut self, obj: &ObjectRef, failures: &AtomicU64) {
        let key = obj.key();
        if let Some(ns) = obj.namespace() {
            remove_key(&mut self.by_namespace, ns, key);
        }
        for owner in obj.owners() {
            remove_key(&mut self.by_owner, &owner.uid, key);
        }
        for (k, v) in obj.labels() {
            if let Some(values) = self.by_label.get_mut(k) {
                remove_key(values, v, key);
                if values.is_empty() {
                    self.by_label.remove(k);
                }
            }
        }
        for (name, values) in self.field_values(obj, failures) {
            let idx = self.fields.get_mut(&name).expect("index exists");
            for v in values {
                remove_key(&mut idx.values, &v, key);
            }
        }
    }

    /// Candidate keys from one label requirement, if the index can narrow it.
    fn label_candidates(&self, key: &str, op: Operator, values: &[String]) -> Option<Vec<&KeySet>> {
        let by_value = self.by_label.get(key);
        match op {
            Operator::Equals | Operator::In => Some(
                values
                    .iter()
                    .filter_map(|v| by_value?.get(v.as_str()))
                    .collect(),
            ),
            Operator::Exists => Some(by_value.map(|m| m.values().collect()).unwrap_or_default()),
            // Negations match objects *without* the label too, so no index can narrow them.
            Operator::NotEquals | Operator::NotIn | Operator::DoesNotExist => None,
        }
    }

    /// Forgets every object, keeping the declared field indexes, empty.
    pub(super) fn clear(&mut self) {
        let fields = std::mem::take(&mut self.fields)
            .into_iter()
            .map(|(name, idx)| {
                let idx = FieldIndex {
                    path: idx.path,
                    values: HashMap::new(),
                };
                (name, idx)
            })
            .collect();
        *self = Inner {
            fields,
            ..Inner::default()
        };
    }

    /// Declares the field index `path`, indexing what is stored; see
    /// [`Indexes::add_field_index`](super::Indexes::add_field_index).
    pub(super) fn add_field_index(&mut self, path: &str, failures: &AtomicU64) -> Result<()> {
        let parts: Vec<String> = path.split('.').map(str::to_string).collect();
        if path.is_empty() || parts.iter().any(String::is_empty) {
            return Err(Error::BadIndexPath(path.to_string()));
        }
        if self.fields.contains_key(path) || BUILTIN_FIELDS.contains(&path) {
            return Err(Error::DuplicateIndex(path.to_string()));
        }
        let mut idx = FieldIndex {
            path: parts,
            values: HashMap::new(),
        };
        for (key, obj) in &self.items {
            match values_at(&obj.to_value(), &idx.path) {
                Ok(values) => {
                    for v in values {
                        insert_key(&mut idx.values, v.into_boxed_str(), key);
                    }
                }
                Err(reason) => {
                    failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(index = path, key = %key, %reason, "field index failed; object indexed under no value");
                }
            }
        }
        self.fields.insert(path.to_string(), idx);
        Ok(())
    }

    /// The objects matching `query`, unsorted, and how many were looked at: see
    /// [`Store::list`](super::Store::list).
    pub(super) fn select(&self, query: &Query) -> Result<(Vec<ObjectRef>, u64)> {
        let mut name_filter = None;
        let mut namespace = query.namespace.as_deref();
        let mut field_sets: Vec<&KeySet> = Vec::new();
        let empty = KeySet::new();
        for (field, value) in &query.fields {
            match field.as_str() {
                "metadata.name" => name_filter = Some(value.as_str()),
                // Two different namespaces in one query match nothing.
                "metadata.namespace" => match namespace {
                    Some(ns) if ns != value => return Ok((Vec::new(), 0)),
                    _ => namespace = Some(value.as_str()),
                },
                _ => {
                    let Some(idx) = self.fields.get(field) else {
                        let mut declared: Vec<String> = self.fields.keys().cloned().collect();
                        declared.sort();
                        return Err(Error::UnindexedField {
                            field: field.clone(),
                            declared,
                        });
                    };
                    field_sets.push(idx.values.get(value.as_str()).unwrap_or(&empty));
                }
            }
        }

        // Each entry is a union of key sets that every match must belong to.
        let mut narrowing: Vec<Vec<&KeySet>> = field_sets.iter().map(|s| vec![*s]).collect();
        if let Some(ns) = namespace {
            narrowing.push(vec![self.by_namespace.get(ns).unwrap_or(&empty)]);
        }
        if let Some(uid) = &query.owner_uid {
            narrowing.push(vec![self.by_owner.get(uid.as_str()).unwrap_or(&empty)]);
        }
        for req in query.labels.requirements() {
            if let Some(sets) = self.label_candidates(req.key(), req.operator(), req.values()) {
                narrowing.push(sets);
            }
        }

        let matches = |obj: &ObjectRef| {
            namespace.is_none_or(|ns| obj.namespace() == Some(ns))
                && name_filter.is_none_or(|n| obj.name() == n)
                && query
                    .owner_uid
                    .as_deref()
                    .is_none_or(|u| obj.owners().iter().any(|o| &*o.uid == u))
                && field_sets.iter().all(|s| s.contains(obj.key()))
                && query.labels.matches(|k| obj.label(k))
        };

        let mut out: Vec<ObjectRef> = Vec::new();
        let mut touched = 0u64;
        if let (Some(name), Some(ns)) = (name_filter, namespace) {
            // namespace + name is a key lookup.
            let key = crate::object::object_key(Some(ns), name);
            if let Some(obj) = self.items.get(key.as_str()) {
                touched += 1;
                if matches(obj) {
                    out.push(obj.clone());
                }
            }
        } else if let Some(smallest) = narrowing
            .iter()
            .min_by_key(|sets| sets.iter().map(|s| s.len()).sum::<usize>())
        {
            let mut seen: HashSet<&str> = HashSet::new();
            for key in smallest.iter().flat_map(|s| s.iter()) {
                if smallest.len() > 1 && !seen.insert(key) {
                    continue;
                }
                touched += 1;
                let obj = &self.items[key];
                if matches(obj) {
                    out.push(obj.clone());
                }
            }
        } else {
            for obj in self.items.values() {
                touched += 1;
                if matches(obj) {
                    out.push(obj.clone());
                }
            }
        }
        Ok((out, touched))
    }
}
