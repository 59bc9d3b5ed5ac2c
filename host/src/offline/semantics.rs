//! What the API server does to an object on each write, as far as it can be modelled without
//! one: the metadata it owns, optimistic concurrency, generation, the status subresource, merge
//! and JSON patches, and a plain approximation of server-side apply that says where it falls
//! short.
//!
//! Pure functions on JSON, so that each rule is a unit test.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::offline::kinds::Kind;

/// A refusal, as the API server would answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP code: 400, 404, 409, 422…
    pub code: u16,
    /// The Status reason: `NotFound`, `Conflict`, `AlreadyExists`, `Invalid`, `BadRequest`…
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(code: u16, reason: &'static str, message: String) -> Self {
        Self {
            code,
            reason,
            message,
        }
    }

    /// The `Status` body the API server sends with it.
    pub fn status(&self) -> Value {
        serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}

/// Server-assigned metadata of a stored object, restored over whatever a write sent.
#[derive(Debug, Clone, Default)]
pub struct Assigned {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`.
    pub created: String,
}

pub(crate) fn meta<'a>(v: &'a Value, field: &str) -> &'a str {
    v["metadata"][field].as_str().unwrap_or("")
}

pub(crate) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = Value::Object(Map::new());
    }
    v["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// Whether the kind keeps `metadata.generation` (kinds with a spec and a status subresource; a
/// ConfigMap has none).
fn has_generation(kind: &Kind) -> bool {
    kind.status
}

/// Everything but metadata and status: what moves `metadata.generation` when it changes.
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

/// Checks `apiVersion`, `kind`, name and namespace of a body against the URL it was sent to,
/// filling in what is missing.
pub fn check_body(
    body: &mut Value,
    kind: &Kind,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), Refusal> {
    let r = &kind.resource;
    let Some(o) = body.as_object_mut() else {
        return Err(Refusal::new(
            400,
            "BadRequest",
            "the body is not a JSON object".into(),
        ));
    };
    for (field, expected) in [("apiVersion", &r.api_version), ("kind", &r.kind)] {
        match o.get(field).and_then(Value::as_str) {
            None | Some("") => {
                o.insert(field.into(), Value::String(expected.clone()));
            }
            Some(v) if v == expected => {}
            Some(v) => {
                return Err(Refusal::new(
                    400,
                    "BadRequest",
                    format!(
                        "the {field} of the object ({v}) does not match the URL's ({expected})"
                    ),
                ));
            }
        }
    }
    let m = meta_mut(body);
    if let Some(ns) = namespace {
        match m.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("namespace".into(), Value::String(ns.into()));
            }
            Some(v) if v == ns => {}
            Some(v) => {
                return Err(Refusal::new(
                    400,
                    "BadRequest",
                    format!(
                        "the namespace of the object ({v}) does not match the namespace on the request ({ns})"
                    ),
                ));
            }
        }
    }
    if let Some(name) = name {
        match m.get("name").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("name".into(), Value::String(name.into()));
            }
            Some(v) if v == name => {}
            Some(v) => {
                return Err(Refusal::new(
                    400,
                    "BadRequest",
                    format!(
                        "the name of the object ({v}) does not match the name on the URL ({name})"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A new object as stored by a create: server metadata set, `resourceVersion` `rv`, and
/// generation 1 where the kind keeps one.
pub fn created(mut body: Value, kind: &Kind, assigned: &Assigned, rv: u64) -> Value {
    let m = meta_mut(&mut body);
    m.insert("uid".into(), assigned.uid.clone().into());
    m.insert("creationTimestamp".into(), assigned.created.clone().into());
    m.insert("resourceVersion".into(), rv.to_string().into());
    m.remove("deletionTimestamp");
    m.remove("managedFields");
    if has_generation(kind) {
        m.insert("generation".into(), 1.into());
    } else {
        m.remove("generation");
    }
    if kind.status {
        // A create through the main resource never sets status when a subresource owns it.
        if let Some(o) = body.as_object_mut() {
            o.remove("status");
        }
    }
    body
}

/// Optimistic concurrency: a body naming a resourceVersion must name the stored one.
pub fn check_version(body: &Value, stored: &Value, what: &str) -> Result<(), Refusal> {
    let sent = meta(body, "resourceVersion");
    let now = meta(stored, "resourceVersion");
    if sent.is_empty() || sent == now {
        Ok(())
    } else {
        Err(Refusal::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {what}: the object has been modified; please apply your changes to the latest version and try again"
            ),
        ))
    }
}

/// The object a write leaves, from the stored one and what the write asks for (`wanted`, a full
/// object): server metadata kept, status or everything else kept depending on `status_only`,
/// generation moved if the spec changed. `None` if nothing changed (no new resourceVersion,
/// as the API server does for a no-op).
pub fn replaced(
    stored: &Value,
    mut wanted: Value,
    kind: &Kind,
    status_only: bool,
    rv: u64,
) -> Option<Value> {
    if status_only {
        let mut next = stored.clone();
        match wanted.get_mut("status").map(Value::take) {
            Some(s) => next["status"] = s,
            None => {
                if let Some(o) = next.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        wanted = next;
    } else if kind.status {
        match stored.get("status") {
            Some(s) => wanted["status"] = s.clone(),
            None => {
                if let Some(o) = wanted.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    let m = meta_mut(&mut wanted);
    for field in [
        "uid",
        "creationTimestamp",
        "resourceVersion",
        "generation",
        "deletionTimestamp",
    ] {
        match stored["metadata"].get(field) {
            Some(v) => {
                m.insert(field.into(), v.clone());
            }
            None => {
                m.remove(field);
            }
        }
    }
    m.remove("managedFields");
    if &wanted == stored {
        return None;
    }
    if has_generation(kind) && spec_part(&wanted) != spec_part(stored) {
        let g = stored["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta_mut(&mut wanted).insert("generation".into(), g.into());
    }
    meta_mut(&mut wanted).insert("resourceVersion".into(), rv.to_string().into());
    Some(wanted)
}

/// Whether `v` is being deleted and has no finalizer left: the API server then removes it.
pub fn finalized(v: &Value) -> bool {
    !meta(v, "deletionTimestamp").is_empty()
        && v["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
}

/// RFC 7386 merge patch.
pub fn merge_patch(stored: &Value, patch: &Value) -> Value {
    let mut doc = stored.clone();
    json_patch::merge(&mut doc, patch);
    doc
}

/// RFC 6902 JSON patch; a failed operation is `Invalid`, as the API server answers.
pub fn json_patch(stored: &Value, ops: &Value) -> Result<Value, Refusal> {
    let patch: json_patch::Patch = serde_json::from_value(ops.clone()).map_err(|e| {
        Refusal::new(
            400,
            "BadRequest",
            format!("the JSON patch cannot be read: {e}"),
        )
    })?;
    let mut doc = stored.clone();
    for op in patch.0 {
        if absent_and_tested_null(&doc, &op) {
            continue;
        }
        json_patch::patch(&mut doc, &[op]).map_err(|e| {
            Refusal::new(
                422,
                "Invalid",
                format!("the JSON patch does not apply: {e}"),
            )
        })?;
    }
    Ok(doc)
}

/// Whether `op` tests that a member absent from an existing object is `null`. The API server's
/// JSON patch (evanphx/json-patch) lets that test pass, and finalizer helpers rely on it to say
/// "no finalizers yet"; RFC 6902, and the `json-patch` crate, fail it.
fn absent_and_tested_null(doc: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(test) = op else {
        return false;
    };
    if !test.value.is_null() || doc.pointer(test.path.as_str()).is_some() {
        return false;
    }
    let parent = test.path.parent().map(|p| p.as_str().to_owned());
    parent.is_some_and(|p| doc.pointer(&p).is_some_and(Value::is_object))
}

/// What offline apply cannot model, said once per report.
pub const APPLY_LIMITS: &str = "server-side apply is modelled as a merge of the applied object into the stored one: fields this manager stopped applying are not removed, lists are replaced whole rather than merged by key, and conflicts with other field managers are not detected";

/// What offline strategic merge cannot model.
pub const STRATEGIC_LIMITS: &str = "a strategic merge patch is modelled as a JSON merge patch: lists are replaced whole rather than merged by key, and $patch directives are not understood";

/// Server-side apply, approximately (see [`APPLY_LIMITS`]): maps merge recursively, anything
/// else replaces.
pub fn apply(stored: &Value, applied: &Value) -> Value {
    let mut doc = stored.clone();
    deep_merge(&mut doc, applied);
    doc
}

fn deep_merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v);
                    }
                    _ => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// What offline deletes cannot model.
pub const GC_LIMITS: &str = "deleting an owner does not garbage-collect its dependents offline: objects whose ownerReferences name it stay";

pub(crate) fn owned_by(o: &Value, uid: &str) -> bool {
    o["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
}

pub(crate) fn timestamp(since_epoch: Duration) -> String {
    k8s_openapi::jiff::Timestamp::from_second(since_epoch.as_secs() as i64)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::discovery::Resource;
    use serde_json::json;

    fn kind(status: bool) -> Kind {
        Kind {
            resource: Resource {
                group: "example.com".into(),
                version: "v1".into(),
                api_version: "example.com/v1".into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
                namespaced: true,
            },
            status,
        }
    }

    fn stored() -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "u1", "resourceVersion": "5",
                         "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"size": 1},
            "status": {"ready": true},
        })
    }

    #[test]
    fn a_replace_keeps_server_metadata_and_status_and_moves_generation_only_for_spec() {
        let k = kind(true);
        let mut wanted = stored();
        wanted["spec"]["size"] = json!(2);
        wanted["status"] = json!({"ready": false});
        wanted["metadata"]["uid"] = json!("forged");
        let next = replaced(&stored(), wanted, &k, false, 9).unwrap();
        assert_eq!(next["metadata"]["uid"], "u1");
        assert_eq!(next["metadata"]["generation"], 3);
        assert_eq!(next["metadata"]["resourceVersion"], "9");
        assert_eq!(next["status"], json!({"ready": true}), "status kept");

        let mut labelled = stored();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        let next = replaced(&stored(), labelled, &k, false, 10).unwrap();
        assert_eq!(next["metadata"]["generation"], 2, "metadata only");
    }

    #[test]
    fn a_status_write_changes_only_the_status_and_a_no_op_writes_nothing() {
        let k = kind(true);
        let mut wanted = stored();
        wanted["spec"]["size"] = json!(7);
        wanted["status"] = json!({"ready": false});
        let next = replaced(&stored(), wanted, &k, true, 6).unwrap();
        assert_eq!(next["spec"]["size"], 1);
        assert_eq!(next["status"]["ready"], false);
        assert_eq!(next["metadata"]["generation"], 2);
        assert!(replaced(&stored(), stored(), &k, false, 7).is_none());
    }

    #[test]
    fn a_stale_resource_version_conflicts_and_none_is_unconditional() {
        let mut body = stored();
        body["metadata"]["resourceVersion"] = json!("4");
        let e = check_version(&body, &stored(), "widgets \"w\"").unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        meta_mut(&mut body).remove("resourceVersion");
        assert!(check_version(&body, &stored(), "w").is_ok());
    }

    #[test]
    fn a_body_for_another_name_or_kind_is_refused_and_missing_fields_are_filled() {
        let k = kind(false);
        let mut body = json!({"metadata": {}});
        check_body(&mut body, &k, Some("ns"), Some("w")).unwrap();
        assert_eq!(body["kind"], "Widget");
        assert_eq!(body["metadata"]["namespace"], "ns");
        let mut other = json!({"kind": "Gadget", "metadata": {}});
        assert_eq!(
            check_body(&mut other, &k, Some("ns"), None)
                .unwrap_err()
                .code,
            400
        );
        let mut renamed = json!({"metadata": {"name": "x"}});
        assert_eq!(
            check_body(&mut renamed, &k, Some("ns"), Some("w"))
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn patches_merge_apply_and_a_failing_json_patch_is_invalid() {
        let merged = merge_patch(&stored(), &json!({"spec": {"size": null, "color": "red"}}));
        assert_eq!(merged["spec"], json!({"color": "red"}));
        let applied = apply(&stored(), &json!({"spec": {"color": "red"}}));
        assert_eq!(applied["spec"], json!({"size": 1, "color": "red"}));
        let e =
            json_patch(&stored(), &json!([{"op": "remove", "path": "/spec/nope"}])).unwrap_err();
        assert_eq!(e.code, 422);
        let ok = json_patch(
            &stored(),
            &json!([{"op": "replace", "path": "/spec/size", "value": 3}]),
        )
        .unwrap();
        assert_eq!(ok["spec"]["size"], 3);
    }

    #[test]
    fn a_json_patch_testing_an_absent_member_for_null_passes_as_the_api_server_lets_it() {
        let add_first = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/x"]},
        ]);
        let added = json_patch(&stored(), &add_first).unwrap();
        assert_eq!(added["metadata"]["finalizers"], json!(["example.com/x"]));
        // Once the member exists, the same test fails: a concurrent first finalizer is caught.
        assert_eq!(json_patch(&added, &add_first).unwrap_err().code, 422);
        // An absent parent is not an absent member.
        let orphan = json!([{"op": "test", "path": "/nope/finalizers", "value": null}]);
        assert_eq!(json_patch(&stored(), &orphan).unwrap_err().code, 422);
        // And the ops stay all or nothing.
        let half = json!([
            {"op": "replace", "path": "/spec/size", "value": 3},
            {"op": "remove", "path": "/spec/nope"},
        ]);
        assert_eq!(json_patch(&stored(), &half).unwrap_err().code, 422);
    }
}
