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
use crate::object::{Encoded, decode, encode};
use crate::{EventType, Kind, Result};

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
    let gvk = K::gvk();
    let Encoded {
        namespace,
        name,
        body,
    } = encode(obj)?;
    let patch = PatchBody::Apply(ApplyPatch {
        body,
        field_manager: field_manager.to_owned(),
        force,
    });
    decode(&gvk, &raw::patch(&gvk, &namespace, &name, &patch)?)
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
