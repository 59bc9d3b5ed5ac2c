//! Typed writes, straight to the API server. Each returns the server's answer.
//!
//! The namespace of an object written comes from its `metadata.namespace` (empty for
//! cluster-scoped kinds), and `apiVersion`/`kind` are filled in from [`Kind`] when the type does
//! not carry them. With read-your-writes (the default), a later cache read of the same object by
//! this guest waits until the cache holds at least what the write returned; if that takes
//! longer than the host's bound (5 s by default) the read is a `timeout` error once, and the
//! write is then forgotten, so later reads may be older than it.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::reconciled::runtime::client::{self as raw, ApplyPatch, PatchBody};
use crate::object::{Encoded, contains, decode, encode};
use crate::{Error, EventType, Kind, Object, Result, cache};

/// Creates `obj`; returns it as stored. An existing object is
/// [`Error::Conflict`](crate::Error::Conflict).
pub fn create<K: Kind + Serialize + DeserializeOwned>(obj: &K) -> Result<K> {
    let gvk = K::gvk();
    let obj = encode(obj)?;
    decode(&gvk, &raw::create(&gvk, &obj.namespace, &obj.body)?)
}

/// Replaces `obj`, with optimistic concurrency on its `metadata.resourceVersion`: if the object
/// changed since it was read, [`Error::Conflict`](crate::Error::Conflict). The status is left
/// as it is; use [`update_status`] for that.
pub fn update<K: Kind + Serialize + DeserializeOwned>(obj: &K) -> Result<K> {
    let gvk = K::gvk();
    let obj = encode(obj)?;
    decode(&gvk, &raw::update(&gvk, &obj.namespace, &obj.body)?)
}

/// Replaces `obj`'s status subresource (optimistic concurrency as for [`update`]); the rest of
/// the object is ignored by the server.
pub fn update_status<K: Kind + Serialize + DeserializeOwned>(obj: &K) -> Result<K> {
    let gvk = K::gvk();
    let obj = encode(obj)?;
    decode(&gvk, &raw::update_status(&gvk, &obj.namespace, &obj.body)?)
}

/// Server-side apply of `obj` as `field_manager`; creates the object if it does not exist.
///
/// Send only the fields you own: with `k8s_openapi` types, unset `Option`s are left out. With
/// `force`, conflicts with other managers are taken over instead of failing.
pub fn apply<K: Kind + Serialize + DeserializeOwned>(
    obj: &K,
    field_manager: &str,
    force: bool,
) -> Result<K> {
    applied(obj, field_manager, force, false)
}

/// Server-side apply of `obj`'s status subresource as `field_manager`: how a controller writes
/// status. Only `apiVersion`, `kind`, `metadata.name`, `metadata.namespace` and `status` are
/// sent, so pass the object as read with its new status, or one with just those fields.
///
/// Unlike [`update_status`], it carries no `resourceVersion` and so never conflicts with a spec
/// edit made since the object was read; with `force`, it takes over status fields another
/// manager owns instead of failing with [`Error::Conflict`](crate::Error::Conflict). The fields
/// this manager applied before and leaves out now are removed. A missing object is
/// [`Error::NotFound`](crate::Error::NotFound): it is never created.
pub fn apply_status<K: Kind + Serialize + DeserializeOwned>(
    obj: &K,
    field_manager: &str,
    force: bool,
) -> Result<K> {
    applied(obj, field_manager, force, true)
}

/// [`apply`], or with `status` [`apply_status`].
fn applied<K: Kind + Serialize + DeserializeOwned>(
    obj: &K,
    field_manager: &str,
    force: bool,
    status: bool,
) -> Result<K> {
    let gvk = K::gvk();
    let Encoded {
        namespace,
        name,
        body,
    } = encode(obj)?;
    let body = if status {
        status_only(&body, &namespace, &name)?
    } else {
        body
    };
    let patch = PatchBody::Apply(ApplyPatch {
        body,
        field_manager: field_manager.to_owned(),
        force,
    });
    let answer = if status {
        raw::patch_status(&gvk, &namespace, &name, &patch)?
    } else {
        raw::patch(&gvk, &namespace, &name, &patch)?
    };
    decode(&gvk, &answer)
}

/// JSON merge patch (RFC 7386) of `namespace`/`name`'s status subresource: `patch` is the
/// whole patch document, e.g. `{"status": {"phase": "Ready"}}`; changes outside `status` are
/// ignored by the server. No `resourceVersion` in it, no conflict.
pub fn merge_patch_status<K: Kind + DeserializeOwned>(
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<K> {
    let gvk = K::gvk();
    let patch = PatchBody::Merge(patch.to_string());
    decode(&gvk, &raw::patch_status(&gvk, namespace, name, &patch)?)
}

/// The apply body of a status write: type, name, namespace and status of `body`.
fn status_only(body: &str, namespace: &str, name: &str) -> Result<String> {
    let full: Value = serde_json::from_str(body).map_err(|e| Error::Invalid(e.to_string()))?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), name.into());
    if !namespace.is_empty() {
        metadata.insert("namespace".into(), namespace.into());
    }
    let mut out = serde_json::Map::new();
    for field in ["apiVersion", "kind"] {
        out.insert(field.into(), full[field].clone());
    }
    out.insert("metadata".into(), metadata.into());
    if let Some(status) = full.get("status").filter(|s| !s.is_null()) {
        out.insert("status".into(), status.clone());
    }
    Ok(Value::Object(out).to_string())
}

/// JSON merge patch (RFC 7386) of `namespace`/`name`: `null` deletes a field, objects merge,
/// anything else replaces.
pub fn merge_patch<K: Kind + DeserializeOwned>(
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<K> {
    let gvk = K::gvk();
    let patch = PatchBody::Merge(patch.to_string());
    decode(&gvk, &raw::patch(&gvk, namespace, name, &patch)?)
}

/// JSON patch (RFC 6902) of `namespace`/`name`: `patch` is an array of operations.
pub fn json_patch<K: Kind + DeserializeOwned>(
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<K> {
    let gvk = K::gvk();
    let patch = PatchBody::Json(patch.to_string());
    decode(&gvk, &raw::patch(&gvk, namespace, name, &patch)?)
}

/// Deletes `namespace`/`name`. A missing object is
/// [`Error::NotFound`](crate::Error::NotFound); check [`Error::is_not_found`](crate::Error::is_not_found)
/// if that is fine.
pub fn delete<K: Kind>(namespace: &str, name: &str) -> Result<()> {
    raw::delete(&K::gvk(), namespace, name)
}

/// Records a Kubernetes Event about `namespace`/`name` of kind `K`. `reason` is a short
/// UpperCamelCase word (`Generated`), `message` a sentence for humans.
pub fn record_event<K: Kind>(
    namespace: &str,
    name: &str,
    event_type: EventType,
    reason: &str,
    message: &str,
) -> Result<()> {
    raw::record_event(&K::gvk(), namespace, name, event_type, reason, message)
}

/// What [`create_or_update`] or [`apply_if_changed`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Changed {
    /// The object did not exist; it was created.
    Created,
    /// The object existed and was written.
    Updated,
    /// The object already was as wanted; nothing was written.
    Unchanged,
}

/// Creates or updates `namespace`/`name` through `mutate`, as controller-runtime's
/// `CreateOrUpdate`: the object is read from the cache; when missing, `mutate` fills in a
/// default one with that name and namespace and it is created; otherwise `mutate` changes a
/// copy, which is written with [`update`] only if it differs from what was read.
///
/// `mutate` must not change the name or namespace ([`Error::Invalid`]). An update that loses a
/// race is [`Error::Conflict`], retried with backoff.
pub fn create_or_update<K, F>(namespace: &str, name: &str, mutate: F) -> Result<(K, Changed)>
where
    K: Object + Default + Clone + PartialEq + Serialize + DeserializeOwned,
    F: FnOnce(&mut K) -> Result<()>,
{
    let current = cache::get_opt::<K>(namespace, name)?;
    let mut wanted = current.clone().unwrap_or_else(|| {
        let mut fresh = K::default();
        let meta = fresh.meta_mut();
        meta.name = Some(name.to_owned());
        meta.namespace = (!namespace.is_empty()).then(|| namespace.to_owned());
        fresh
    });
    mutate(&mut wanted)?;
    let meta = wanted.meta();
    if meta.name.as_deref() != Some(name)
        || meta.namespace.as_deref().unwrap_or_default() != namespace
    {
        return Err(Error::Invalid(format!(
            "create_or_update of {} {namespace}/{name}: the function changed the object's name or namespace; it may change anything else",
            K::gvk().kind
        )));
    }
    match current {
        None => Ok((create(&wanted)?, Changed::Created)),
        Some(current) if current == wanted => Ok((current, Changed::Unchanged)),
        Some(_) => Ok((update(&wanted)?, Changed::Updated)),
    }
}

/// Server-side applies `obj` as `field_manager` (forced, as a controller owns the fields it
/// sets) unless the cache already holds every field of `obj` with the same values:
/// [`Changed::Unchanged`], and no write. [`Changed::Created`] when the cache held no such
/// object, [`Changed::Updated`] otherwise.
///
/// Where it may surprise: the comparison is against the cache (which sees this guest's own
/// writes), so a stale cache costs one write the server finds nothing to change in; and a
/// value the server normalises (a quantity `1000m` stored as `1`) is written every time.
pub fn apply_if_changed<K: Object + Serialize + DeserializeOwned>(
    obj: &K,
    field_manager: &str,
) -> Result<(K, Changed)> {
    let gvk = K::gvk();
    let Encoded {
        namespace,
        name,
        body,
    } = encode(obj)?;
    let cached = match cache::get_raw(&gvk, &namespace, &name) {
        Ok(text) => Some(text),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    if let Some(text) = &cached {
        let held: Value = serde_json::from_str(text).map_err(|e| Error::Other(e.to_string()))?;
        let mut wanted: Value =
            serde_json::from_str(&body).map_err(|e| Error::Invalid(e.to_string()))?;
        // A cached item need not carry its type; the call's kind already says it.
        if let Some(map) = wanted.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        if contains(&held, &wanted) {
            return Ok((decode(&gvk, text)?, Changed::Unchanged));
        }
    }
    let applied = apply(obj, field_manager, true)?;
    let changed = match cached {
        None => Changed::Created,
        Some(_) => Changed::Updated,
    };
    Ok((applied, changed))
}
