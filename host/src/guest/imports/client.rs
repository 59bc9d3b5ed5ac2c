//! `client` import: writes straight to the API server, returning its answer, and recording the
//! read-your-writes floor of what was written.

use serde_json::Value;

use crate::guest::bindings::reconciled::runtime::client::{EventType, Host, PatchBody as Patch};
use crate::guest::bindings::{GuestError, Gvk};
use crate::guest::imports::notes::Asked;
use crate::guest::imports::{Access, Declared, GuestContext, HostState, Metrics, request};
use crate::informer::Namespaces;
use crate::informer::discovery::Resource;
use crate::names;
use crate::object::{kind_of, object_key};

/// The API server refuses request bodies above about 3 MiB; refuse them here with a clearer
/// message and without the round trip.
const MAX_BODY: usize = 3 << 20;

/// The JSON a body must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// An object; also a merge patch, since one that is not an object would replace the whole
    /// target (RFC 7386, section 2), which no reconciler means to do.
    Object,
    /// A JSON patch: a list of operations (RFC 6902).
    Array,
}

/// Parses a guest-supplied body (`what` names it in messages): too big is `too-large`; empty,
/// not JSON (a raw NUL, say) or of the wrong shape is `invalid`.
fn parse(body: &str, what: &str, shape: Shape) -> Result<Value, GuestError> {
    if body.len() > MAX_BODY {
        return Err(GuestError::TooLarge(format!(
            "the {what} is {} bytes; the API server accepts at most about {MAX_BODY}: write less per object",
            body.len()
        )));
    }
    let expected = match shape {
        Shape::Object => "a JSON object",
        Shape::Array => "a JSON array of patch operations",
    };
    if body.trim().is_empty() {
        return Err(GuestError::Invalid(format!(
            "the {what} is empty; send {expected}"
        )));
    }
    let v: Value = serde_json::from_str(body).map_err(|e| {
        GuestError::Invalid(format!(
            "the {what} is not valid JSON ({e}); send {expected}"
        ))
    })?;
    let fits = match shape {
        Shape::Object => v.is_object(),
        Shape::Array => v.is_array(),
    };
    if !fits {
        return Err(GuestError::Invalid(format!(
            "the {what} is {}; send {expected}",
            kind_of(&v)
        )));
    }
    Ok(v)
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Checks an object body's own `metadata.namespace` against the namespace the call names: the
/// API server would refuse a mismatch too (400), but after a round trip and in less plain words.
fn same_namespace(object: &Value, namespace: &str) -> Result<(), GuestError> {
    let own = meta_str(object, "namespace");
    if own.is_empty() || own == namespace {
        Ok(())
    } else {
        Err(GuestError::Invalid(format!(
            "the object's metadata.namespace is {} but the call names namespace {}: make them agree (or leave metadata.namespace out)",
            names::shown(own),
            names::shown(namespace)
        )))
    }
}

/// Sends a write and returns the server's object, recording the guest's RV floor for it.
///
/// The floor is recorded only if the answer falls inside the informer's scope (its namespaces
/// and label selector): an object the cache will never hold must not make reads wait for it.
async fn write(
    state: &mut HostState,
    ctx: &GuestContext,
    declared: &Declared,
    req: http::Request<Vec<u8>>,
) -> Result<String, GuestError> {
    Metrics::bump(&ctx.metrics.writes);
    let text = state.send(ctx, req).await?;
    state.note_bytes(text.len());
    let answer: Value = serde_json::from_str(&text)
        .map_err(|e| GuestError::Other(format!("unreadable answer from the API server: {e}")))?;
    let namespace = meta_str(&answer, "namespace");
    if in_scope(declared, namespace, &answer) {
        let key = object_key(Some(namespace), meta_str(&answer, "name"));
        declared
            .floors
            .wrote(&key, meta_str(&answer, "resourceVersion"));
    }
    Ok(text)
}

/// Whether the informer behind `declared` would hold `object` (in `namespace`).
fn in_scope(declared: &Declared, namespace: &str, object: &Value) -> bool {
    let scope = &declared.informer.key().scope;
    let namespace_ok = match &scope.namespaces {
        Namespaces::All => true,
        Namespaces::Only(set) => namespace.is_empty() || set.contains(namespace),
    };
    let labels = object.get("metadata").and_then(|m| m.get("labels"));
    namespace_ok
        && scope
            .labels
            .matches(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
}

/// The URL of the collection of `kind` in `namespace` and the resource, after authorizing the
/// write.
fn collection_url<'c>(
    ctx: &'c GuestContext,
    kind: &Gvk,
    namespace: &str,
) -> Result<(String, &'c Resource, &'c Declared), GuestError> {
    let (resource, declared) = ctx.authorize(kind, namespace, None, Access::Write)?;
    // Validated by `authorize`; encoded all the same, as every guest-made path segment is.
    let url = resource.url_path(Some(&names::segment(namespace)));
    Ok((url, resource, declared))
}

/// The URL of one object, after authorizing the write.
fn item_url<'c>(
    ctx: &'c GuestContext,
    kind: &Gvk,
    namespace: &str,
    name: &str,
) -> Result<(String, &'c Declared), GuestError> {
    let (resource, declared) = ctx.authorize(kind, namespace, Some(name), Access::Write)?;
    let url = format!(
        "{}/{}",
        resource.url_path(Some(&names::segment(namespace))),
        names::segment(name)
    );
    Ok((url, declared))
}

async fn create(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    namespace: String,
    object: String,
) -> Result<String, GuestError> {
    let v = parse(&object, "object", Shape::Object)?;
    same_namespace(&v, &namespace)?;
    let (url, resource, declared) = collection_url(ctx, &kind, &namespace)?;
    // The name travels in the body, not the URL, but is checked all the same: a name the
    // server must refuse is `invalid` here, without the round trip. (Without one, the server
    // requires `generateName`.)
    let name = meta_str(&v, "name");
    if !name.is_empty() {
        names::object_name(&resource.group, &resource.kind, name)
            .map_err(|e| GuestError::Invalid(e.to_string()))?;
    }
    let req = request(
        http::Method::POST,
        url,
        Some("application/json"),
        object.into_bytes(),
    )?;
    write(state, ctx, declared, req).await
}

async fn update(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    namespace: String,
    object: String,
    status: bool,
) -> Result<String, GuestError> {
    let v = parse(&object, "object", Shape::Object)?;
    same_namespace(&v, &namespace)?;
    let name = meta_str(&v, "name");
    if name.is_empty() {
        return Err(GuestError::Invalid(
            "the object has no metadata.name: an update replaces a named object".into(),
        ));
    }
    let (mut url, declared) = item_url(ctx, &kind, &namespace, name)?;
    if status {
        url.push_str("/status");
    }
    let req = request(
        http::Method::PUT,
        url,
        Some("application/json"),
        object.into_bytes(),
    )?;
    write(state, ctx, declared, req).await
}

/// The most a field manager may hold: apimachinery's `FieldManagerMaxLength`.
const MAX_FIELD_MANAGER: usize = 128;

/// A server-side apply field manager, as apimachinery's `ValidateFieldManager`: at most 128
/// bytes, printable characters only (approximated here as no control characters and no
/// whitespace but the space).
fn field_manager(manager: &str) -> Result<(), GuestError> {
    let printable = manager
        .chars()
        .all(|c| c == ' ' || !(c.is_control() || c.is_whitespace()));
    if manager.is_empty() || manager.len() > MAX_FIELD_MANAGER || !printable {
        return Err(GuestError::Invalid(format!(
            "field manager {} is not valid: server-side apply needs 1 to {MAX_FIELD_MANAGER} bytes of printable characters (e.g. my-controller)",
            names::shown(manager)
        )));
    }
    Ok(())
}

/// Which part of an object a patch changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The object (`patch`); a status in the body is ignored by kinds with a status subresource.
    Whole,
    /// The status subresource (`patch-status`): only `status` is changed, and an apply never
    /// creates the object.
    Status,
}

async fn patch(
    state: &mut HostState,
    ctx: &GuestContext,
    target: (Gvk, String, String),
    patch: Patch,
    part: Part,
) -> Result<String, GuestError> {
    let (kind, namespace, name) = target;
    let (mut url, declared) = item_url(ctx, &kind, &namespace, &name)?;
    if part == Part::Status {
        url.push_str("/status");
    }
    let (content_type, body) = match patch {
        Patch::Merge(b) => {
            parse(&b, "merge patch", Shape::Object)?;
            ("application/merge-patch+json", b)
        }
        Patch::Json(b) => {
            parse(&b, "JSON patch", Shape::Array)?;
            ("application/json-patch+json", b)
        }
        Patch::Apply(a) => {
            field_manager(&a.field_manager)?;
            let v = parse(&a.body, "applied object", Shape::Object)?;
            same_namespace(&v, &namespace)?;
            // Guest-controlled query values: encoded by the serializer.
            let q: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("fieldManager", &a.field_manager)
                .append_pair("force", if a.force { "true" } else { "false" })
                .finish();
            url = format!("{url}?{q}");
            ("application/apply-patch+yaml", a.body)
        }
    };
    let req = request(
        http::Method::PATCH,
        url,
        Some(content_type),
        body.into_bytes(),
    )?;
    write(state, ctx, declared, req).await
}

async fn delete(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    namespace: String,
    name: String,
) -> Result<(), GuestError> {
    let (url, declared) = item_url(ctx, &kind, &namespace, &name)?;
    // The uid the delete must be seen for: from the cache, or the server's answer below.
    let key = object_key(Some(&namespace), &name);
    let cached_uid = declared
        .informer
        .store()
        .get(&key)
        .map(|o| o.uid().to_string());
    Metrics::bump(&ctx.metrics.writes);
    let req = request(
        http::Method::DELETE,
        url,
        Some("application/json"),
        Vec::new(),
    )?;
    // The answer is not delivered to the guest (delete returns nothing), so it is not charged.
    let text = state.send(ctx, req).await?;
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let uid = match (answer.get("kind").and_then(Value::as_str), cached_uid) {
        (Some("Status"), cached) => answer["details"]["uid"]
            .as_str()
            .map(str::to_string)
            .or(cached),
        (_, cached) => Some(meta_str(&answer, "uid").to_string())
            .filter(|u| !u.is_empty())
            .or(cached),
    };
    if let Some(uid) = uid {
        // A delete with finalizers answers with the object, now carrying a deletionTimestamp at
        // a new resourceVersion; the cache must reach that or lose the object.
        let rv = if answer.get("kind").and_then(Value::as_str) == Some("Status") {
            ""
        } else {
            meta_str(&answer, "resourceVersion")
        };
        declared.floors.deleted(&key, &uid, rv);
    }
    Ok(())
}

/// Longest Event reason: `ReasonLengthLimit` in Kubernetes' pkg/apis/core/validation/events.go
/// (enforced there for events.k8s.io/v1 creations; core/v1 creations, which this host makes,
/// skip it for backwards compatibility, so the host enforces it itself).
const MAX_REASON: usize = 128;

/// An Event reason as Kubernetes expects one: client-go's `EventRecorder` documents it as
/// "short, unique, UpperCamelCase", used "to automate handling of events". Here: an upper-case
/// ASCII letter, then ASCII letters and digits, at most [`MAX_REASON`] bytes.
fn event_reason(reason: &str) -> Result<(), GuestError> {
    let b = reason.as_bytes();
    let ok = b.first().is_some_and(u8::is_ascii_uppercase)
        && b.len() <= MAX_REASON
        && b.iter().all(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(GuestError::Invalid(format!(
            "event reason {} is not valid: a reason is UpperCamelCase, an upper-case ASCII letter then ASCII letters and digits, at most {MAX_REASON} bytes (e.g. ScalingReplicaSet)",
            names::shown(reason)
        )))
    }
}

/// A `record-event` call's arguments.
struct EventArgs {
    regarding: Gvk,
    namespace: String,
    name: String,
    event_type: EventType,
    reason: String,
    message: String,
}

async fn record_event(
    state: &mut HostState,
    ctx: &GuestContext,
    e: EventArgs,
) -> Result<(), GuestError> {
    let EventArgs {
        regarding,
        namespace,
        name,
        event_type,
        reason,
        message,
    } = e;
    // Guest-controlled: the reason is validated, the message cut to the Event limit, and the
    // name and namespace checked by `authorize` for the regarding kind (the involved object).
    event_reason(&reason)?;
    // Events are about the guest's own declared objects, in a namespace it may write.
    let (resource, declared) = ctx.authorize(&regarding, &namespace, Some(&name), Access::Write)?;
    let uid = declared
        .informer
        .store()
        .get(&object_key(Some(&namespace), &name))
        .map(|o| o.uid().to_string());
    // The message is cut to the Event limit by the builder.
    let event = crate::events::Event {
        regarding: crate::events::Regarding {
            api_version: resource.api_version.clone(),
            kind: regarding.kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            uid,
        },
        type_: match event_type {
            EventType::Normal => crate::events::Type::Normal,
            EventType::Warning => crate::events::Type::Warning,
        },
        reason,
        message,
        component: format!("reconciled/{}", ctx.name),
    };
    Metrics::bump(&ctx.metrics.writes);
    let req = request(
        http::Method::POST,
        event.path(),
        Some("application/json"),
        event.body().to_string().into_bytes(),
    )?;
    // Not delivered to the guest (record-event returns nothing), so not charged.
    state.send(ctx, req).await?;
    Ok(())
}

impl Host for HostState {
    async fn create(
        &mut self,
        kind: Gvk,
        namespace: String,
        object: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let asked = || Asked::write("create", &kind, &namespace, &object, false);
        let (ctx, call) = self.enter_noted(asked)?;
        let answer = create(self, &ctx, kind, namespace, object).await;
        Ok(call.answered(self, answer))
    }

    async fn update(
        &mut self,
        kind: Gvk,
        namespace: String,
        object: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let asked = || Asked::write("update", &kind, &namespace, &object, false);
        let (ctx, call) = self.enter_noted(asked)?;
        let answer = update(self, &ctx, kind, namespace, object, false).await;
        Ok(call.answered(self, answer))
    }

    async fn patch(
        &mut self,
        kind: Gvk,
        namespace: String,
        name: String,
        p: Patch,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let asked = || Asked::patch(&kind, &namespace, &name, &p, false);
        let (ctx, call) = self.enter_noted(asked)?;
        let answer = patch(self, &ctx, (kind, namespace, name), p, Part::Whole).await;
        Ok(call.answered(self, answer))
    }

    async fn patch_status(
        &mut self,
        kind: Gvk,
        namespace: String,
        name: String,
        p: Patch,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let asked = || Asked::patch(&kind, &namespace, &name, &p, true);
        let (ctx, call) = self.enter_noted(asked)?;
        let answer = patch(self, &ctx, (kind, namespace, name), p, Part::Status).await;
        Ok(call.answered(self, answer))
    }

    async fn delete(
        &mut self,
        kind: Gvk,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<(), GuestError>> {
        let asked = || Asked::delete(&kind, &namespace, &name);
        let (ctx, call) = self.enter_noted(asked)?;
        let answer = delete(self, &ctx, kind, namespace, name).await;
        Ok(call.answered(self, answer))
    }

    async fn update_status(
        &mut self,
        kind: Gvk,
        namespace: String,
        object: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let asked = || Asked::write("update", &kind, &namespace, &object, true);
        let (ctx, call) = self.enter_noted(asked)?;
        let answer = update(self, &ctx, kind, namespace, object, true).await;
        Ok(call.answered(self, answer))
    }

    async fn record_event(
        &mut self,
        regarding: Gvk,
        namespace: String,
        name: String,
        event_type: EventType,
        reason: String,
        message: String,
    ) -> wasmtime::Result<Result<(), GuestError>> {
        let asked = || Asked::event(&regarding, &namespace, &name, event_type, &reason, &message);
        let (ctx, call) = self.enter_noted(asked)?;
        let args = EventArgs {
            regarding,
            namespace,
            name,
            event_type,
            reason,
            message,
        };
        let answer = record_event(self, &ctx, args).await;
        Ok(call.answered(self, answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(r: Result<Value, GuestError>) -> &'static str {
        match r {
            Ok(_) => "ok",
            Err(GuestError::Invalid(_)) => "invalid",
            Err(GuestError::TooLarge(_)) => "too-large",
            Err(_) => "other",
        }
    }

    #[test]
    fn bad_bodies_are_typed_errors() {
        let ten_mb = "x".repeat(10 << 20);
        for (body, shape, want) in [
            ("", Shape::Object, "invalid"),
            ("   ", Shape::Object, "invalid"),
            ("{", Shape::Object, "invalid"),
            ("{\"a\":\"\0\"}", Shape::Object, "invalid"),
            ("\0", Shape::Object, "invalid"),
            ("[]", Shape::Object, "invalid"),
            ("null", Shape::Object, "invalid"),
            ("{}", Shape::Array, "invalid"),
            (ten_mb.as_str(), Shape::Object, "too-large"),
            ("{}", Shape::Object, "ok"),
            ("[]", Shape::Array, "ok"),
        ] {
            assert_eq!(
                case(parse(body, "object", shape)),
                want,
                "{:?}",
                &body[..body.len().min(20)]
            );
        }
        let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            case(parse(&nested, "JSON patch", Shape::Array)),
            "invalid",
            "deep nesting is refused by the parser's depth limit, not a stack overflow"
        );
    }

    #[test]
    fn event_reasons_are_upper_camel_case_and_bounded() {
        for ok in [
            "Created",
            "ScalingReplicaSet",
            "Failed2",
            &format!("A{}", "b".repeat(127)),
        ] {
            assert!(event_reason(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            "created",
            "Created!",
            "Has Space",
            "New\nLine",
            "Nul\0",
            "Ünicode",
            "Snake_Case",
            &format!("A{}", "b".repeat(128)),
        ] {
            let err = event_reason(bad).unwrap_err();
            assert!(
                matches!(&err, GuestError::Invalid(m) if m.contains("UpperCamelCase")),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn field_managers_follow_the_api_servers_rule() {
        assert!(field_manager("my-controller").is_ok());
        assert!(field_manager("with space").is_ok());
        for bad in ["", "a\nb", "a\0b", "tab\there", &"m".repeat(129)] {
            assert!(field_manager(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_object_for_another_namespace_is_invalid() {
        let v: Value = serde_json::json!({"metadata": {"namespace": "team-b"}});
        assert!(same_namespace(&v, "team-a").is_err());
        assert!(same_namespace(&v, "team-b").is_ok());
        assert!(same_namespace(&serde_json::json!({}), "team-a").is_ok());
    }
}
