//! The object as the cache keeps it: compact JSON bytes plus the keys extracted once, on insert.
//!
//! An [`Object`] is immutable and shared by `Arc`: the store, the delta FIFO, subscribers and
//! guest reads all hold the same allocation, and nothing ever deep-copies it. A guest `get` is a
//! copy of [`Object::json`] into guest memory, not a re-encode.

use std::sync::Arc;

use serde_json::Value;

/// How every log line, status page, error and reload report shows a kind, and how grants spell
/// it: `apiVersion/Kind`, so `v1/ConfigMap` for a core kind and `apps/v1/Deployment` otherwise.
/// The guest's `Gvk`, an informer's key and discovery all show kinds through this one type.
///
/// Where it may surprise: a core kind has two parts and any other three, so the text is not
/// `group/version/kind` with an empty group (never `/v1/ConfigMap`). It is unambiguous all the
/// same for a valid kind, since no group, version or kind name holds a `/`. Key maps by the kind
/// itself, never by this text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindName<'a> {
    /// The API group, `""` for core.
    pub group: &'a str,
    /// The version.
    pub version: &'a str,
    /// The kind.
    pub kind: &'a str,
}

impl std::fmt::Display for KindName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)
        }
    }
}

/// Errors from turning an API object into a cached [`Object`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object has no `metadata.name`; the API server never sends one, so the input is not a
    /// Kubernetes object.
    #[error("object has no metadata.name (is this a Kubernetes object?): {snippet}")]
    NoName {
        /// The start of the offending JSON.
        snippet: String,
    },
    /// The JSON value is not an object at all.
    #[error("expected a JSON object, got {kind}")]
    NotAnObject {
        /// What it was instead.
        kind: &'static str,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A shared, immutable cached object.
pub type ObjectRef = Arc<Object>;

/// A reference from an object to its owner (`metadata.ownerReferences[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's `apiVersion`, e.g. `apps/v1`.
    pub api_version: Box<str>,
    /// The owner's kind.
    pub kind: Box<str>,
    /// The owner's name (same namespace as the dependent).
    pub name: Box<str>,
    /// The owner's uid: what the owner-UID index is keyed by.
    pub uid: Box<str>,
    /// Whether this is the managing controller (at most one owner per object is).
    pub controller: bool,
}

/// How an object is trimmed before it is cached. Runs once per object, as it enters the delta
/// FIFO; applying it twice gives the same result as once.
///
/// Transforms are data, not closures, so that two subscribers asking for the same transform can
/// share one informer (the transform is part of the informer's key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transform {
    /// Drop `metadata.managedFields`, often the largest part of an object and of no use to a
    /// reconciler.
    pub strip_managed_fields: bool,
    /// Annotation keys to drop.
    pub strip_annotations: Vec<String>,
    /// Dotted JSON paths to drop, e.g. `status.conditions`. A path that does not exist is
    /// ignored.
    pub drop_paths: Vec<String>,
    /// Keep only `apiVersion`, `kind` and `metadata` (a metadata-only cache).
    pub metadata_only: bool,
}

impl Default for Transform {
    /// Strips `managedFields` and the `kubectl.kubernetes.io/last-applied-configuration`
    /// annotation (a full second copy of the object for anything `kubectl apply`-ed).
    fn default() -> Self {
        Self {
            strip_managed_fields: true,
            strip_annotations: vec![LAST_APPLIED.to_string()],
            drop_paths: Vec::new(),
            metadata_only: false,
        }
    }
}

/// The annotation `kubectl apply` (client side) stores a full copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl Transform {
    /// Keeps the object exactly as the API server sent it.
    pub fn none() -> Self {
        Self {
            strip_managed_fields: false,
            strip_annotations: Vec::new(),
            drop_paths: Vec::new(),
            metadata_only: false,
        }
    }

    /// Applies the transform in place.
    pub fn apply(&self, value: &mut Value) {
        let Some(obj) = value.as_object_mut() else {
            return;
        };
        if self.metadata_only {
            obj.retain(|k, _| k == "apiVersion" || k == "kind" || k == "metadata");
        }
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            if self.strip_managed_fields {
                meta.remove("managedFields");
            }
            if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                for key in &self.strip_annotations {
                    ann.remove(key);
                }
                if ann.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
        for path in &self.drop_paths {
            drop_path(value, path);
        }
    }
}

fn drop_path(value: &mut Value, path: &str) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut cur = value;
    for p in parts {
        match cur.get_mut(p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(obj) = cur.as_object_mut() {
        obj.remove(last);
    }
}

/// A cached object: its compact JSON and the fields the store indexes by.
///
/// Where it may surprise: [`Object::json`] is the object *after* the informer's [`Transform`],
/// so by default it has no `managedFields`; it is not byte-identical to what the API server sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Object {
    key: Arc<str>,
    /// Length of the namespace prefix of `key`; 0 for cluster-scoped objects.
    ns_len: u32,
    uid: Box<str>,
    resource_version: Box<str>,
    /// Sorted by label key.
    labels: Box<[(Box<str>, Box<str>)]>,
    owners: Box<[OwnerRef]>,
    json: Box<[u8]>,
}

/// The store key of an object: `namespace/name`, or `name` for cluster-scoped objects (the same
/// convention as client-go's `MetaNamespaceKeyFunc`).
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// How a JSON value's type reads in an error message ("an array", "null").
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Object {
    /// Builds a cached object from what the API server sent, applying `transform` first.
    ///
    /// `type_meta` fills in `apiVersion` and `kind` when they are missing, as they are on the
    /// items of a LIST response.
    pub fn from_value(
        mut value: Value,
        transform: &Transform,
        type_meta: Option<(&str, &str)>,
    ) -> Result<Self> {
        let Some(obj) = value.as_object_mut() else {
            return Err(Error::NotAnObject {
                kind: kind_of(&value),
            });
        };
        if let Some((api_version, kind)) = type_meta {
            obj.entry("apiVersion")
                .or_insert_with(|| api_version.into());
            obj.entry("kind").or_insert_with(|| kind.into());
        }
        transform.apply(&mut value);
        let meta = value.get("metadata").unwrap_or(&Value::Null);
        let Some(name) = str_at(meta, "name") else {
            let text = value.to_string();
            return Err(Error::NoName {
                snippet: text.chars().take(120).collect(),
            });
        };
        let namespace = str_at(meta, "namespace").filter(|ns| !ns.is_empty());
        let key: Arc<str> = object_key(namespace, name).into();
        let ns_len = namespace.map_or(0, str::len) as u32;
        let uid = str_at(meta, "uid").unwrap_or_default().into();
        let resource_version = str_at(meta, "resourceVersion").unwrap_or_default().into();
        let mut labels: Vec<(Box<str>, Box<str>)> = meta
            .get("labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or_default().into()))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort_unstable();
        let owners = meta
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .map(|r| OwnerRef {
                        api_version: str_at(r, "apiVersion").unwrap_or_default().into(),
                        kind: str_at(r, "kind").unwrap_or_default().into(),
                        name: str_at(r, "name").unwrap_or_default().into(),
                        uid: str_at(r, "uid").unwrap_or_default().into(),
                        controller: r
                            .get("controller")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let json = serde_json::to_vec(&value)
            .expect("a JSON value serializes")
            .into_boxed_slice();
        Ok(Self {
            key,
            ns_len,
            uid,
            resource_version,
            labels: labels.into_boxed_slice(),
            owners,
            json,
        })
    }

    /// Builds a cached object from JSON already in the store's form (compact, keys sorted, the
    /// transform applied) and the fields read beside it, as the protobuf reader does.
    ///
    /// `labels` must be sorted by key with no key twice. An empty `name` is an error, as a
    /// missing `metadata.name` is for [`Object::from_value`].
    pub(crate) fn from_parts(
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
        labels: Vec<(Box<str>, Box<str>)>,
        owners: Vec<OwnerRef>,
        json: Vec<u8>,
    ) -> Result<Self> {
        debug_assert!(labels.windows(2).all(|w| w[0].0 < w[1].0));
        if name.is_empty() {
            return Err(Error::NoName {
                snippet: String::from_utf8_lossy(&json).chars().take(120).collect(),
            });
        }
        let namespace = Some(namespace).filter(|ns| !ns.is_empty());
        Ok(Self {
            key: object_key(namespace, name).into(),
            ns_len: namespace.map_or(0, str::len) as u32,
            uid: uid.into(),
            resource_version: resource_version.into(),
            labels: labels.into_boxed_slice(),
            owners: owners.into_boxed_slice(),
            json: json.into_boxed_slice(),
        })
    }

    /// Parses JSON bytes (one object) and builds a cached object from them.
    pub fn from_slice(bytes: &[u8], transform: &Transform) -> Result<Self, ParseError> {
        let value: Value = serde_json::from_slice(bytes).map_err(ParseError::Json)?;
        Self::from_value(value, transform, None).map_err(ParseError::Object)
    }

    /// The store key: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The store key as a shared string, to index by without another allocation.
    pub fn key_arc(&self) -> &Arc<str> {
        &self.key
    }

    /// The namespace, or `None` for a cluster-scoped object.
    pub fn namespace(&self) -> Option<&str> {
        (self.ns_len > 0).then(|| &self.key[..self.ns_len as usize])
    }

    /// The name.
    pub fn name(&self) -> &str {
        if self.ns_len > 0 {
            &self.key[self.ns_len as usize + 1..]
        } else {
            &self.key
        }
    }

    /// The uid; empty if the object had none (never the case for objects from the API server).
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The resourceVersion string exactly as the API server sent it.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// The resourceVersion as a number. Kubernetes 1.35+ guarantees resourceVersions are
    /// comparable integers; this returns `None` for anything else.
    pub fn resource_version_number(&self) -> Option<u64> {
        self.resource_version.parse().ok()
    }

    /// The labels, sorted by key.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    /// The owner references.
    pub fn owners(&self) -> &[OwnerRef] {
        &self.owners
    }

    /// The owner reference marked `controller: true`, if any.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owners.iter().find(|o| o.controller)
    }

    /// The compact JSON of the (transformed) object.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Parses the JSON back into a value. This allocates a full tree: meant for index
    /// functions and tests, not for the read path.
    pub fn to_value(&self) -> Value {
        serde_json::from_slice(&self.json).expect("stored JSON is valid")
    }

    /// Bytes this object holds on the heap, approximately (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.key.len()
            + self.uid.len()
            + self.resource_version.len()
            + self
                .labels
                .iter()
                .map(|(k, v)| k.len() + v.len() + 32)
                .sum::<usize>()
            + self
                .owners
                .iter()
                .map(|o| o.api_version.len() + o.kind.len() + o.name.len() + o.uid.len() + 72)
                .sum::<usize>()
            + self.json.len()
            + size_of::<Self>()
    }
}

/// Errors from [`Object::from_slice`].
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The bytes are not JSON.
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// The JSON is not a Kubernetes object.
    #[error(transparent)]
    Object(Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "team-a", "uid": "u1", "resourceVersion": "42",
                "labels": {"tier": "web", "app": "shop"},
                "annotations": {LAST_APPLIED: "{...}", "keep": "me"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}],
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs1", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "uid": "cm1"}
                ]
            },
            "spec": {"nodeName": "n1"}
        })
    }

    #[test]
    fn extracts_keys_once() {
        let o = Object::from_value(pod(), &Transform::default(), None).unwrap();
        assert_eq!(o.key(), "team-a/web-1");
        assert_eq!(o.namespace(), Some("team-a"));
        assert_eq!(o.name(), "web-1");
        assert_eq!(o.uid(), "u1");
        assert_eq!(o.resource_version_number(), Some(42));
        assert_eq!(
            o.labels().collect::<Vec<_>>(),
            vec![("app", "shop"), ("tier", "web")]
        );
        assert_eq!(o.label("tier"), Some("web"));
        assert_eq!(o.label("nope"), None);
        assert_eq!(o.controller().unwrap().uid.as_ref(), "rs1");
        assert_eq!(o.owners().len(), 2);
    }

    #[test]
    fn default_transform_strips_managed_fields_and_last_applied() {
        let o = Object::from_value(pod(), &Transform::default(), None).unwrap();
        let v = o.to_value();
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(v["metadata"]["annotations"], json!({"keep": "me"}));
        assert_eq!(v["spec"]["nodeName"], "n1");
    }

    #[test]
    fn transform_is_idempotent() {
        let t = Transform {
            drop_paths: vec!["spec.nodeName".into()],
            ..Transform::default()
        };
        let once = Object::from_value(pod(), &t, None).unwrap();
        let twice = Object::from_value(once.to_value(), &t, None).unwrap();
        assert_eq!(once, twice);
        assert!(once.to_value()["spec"].get("nodeName").is_none());
    }

    #[test]
    fn metadata_only_keeps_type_and_metadata() {
        let t = Transform {
            metadata_only: true,
            ..Transform::default()
        };
        let v = Object::from_value(pod(), &t, None).unwrap().to_value();
        assert!(v.get("spec").is_none());
        assert_eq!(v["kind"], "Pod");
        assert_eq!(v["metadata"]["name"], "web-1");
    }

    #[test]
    fn list_items_get_their_type_meta_back() {
        let item = json!({"metadata": {"name": "n1", "resourceVersion": "1"}});
        let o = Object::from_value(item, &Transform::none(), Some(("v1", "Node"))).unwrap();
        let v = o.to_value();
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("v1"), Some("Node"))
        );
        assert_eq!(o.key(), "n1");
        assert_eq!(o.namespace(), None);
        assert_eq!(o.name(), "n1");
    }

    #[test]
    fn rejects_what_is_not_an_object() {
        let err =
            Object::from_value(json!({"metadata": {}}), &Transform::none(), None).unwrap_err();
        assert!(err.to_string().contains("no metadata.name"), "{err}");
        let err = Object::from_value(json!([1]), &Transform::none(), None).unwrap_err();
        assert!(err.to_string().contains("an array"), "{err}");
    }
}
