//! `client` import: writes straight to the API server, returning its answer, and recording the
//! read-your-writes floor of what was written.

use serde_json::Value;

use crate::bindings::reconciled::runtime::client::{EventType, Host, PatchBody as Patch};
use crate::bindings::{GuestError, Gvk};
use crate::imports::{Access, Declared, GuestContext, HostState, Metrics, api_error};
use crate::informer::Namespaces;
use crate::object::object_key;

/// The API server refuses request bodies above about 3 MiB; refuse them here with a clearer
/// message and without the round trip.
const MAX_BODY: usize = 3 << 20;

fn parse(object: &str) -> Result<Value, GuestError> {
    if object.len() > MAX_BODY {
        return Err(GuestError::TooLarge(format!(
            "the object is {} bytes; the API server accepts at most about {MAX_BODY}",
            object.len()
        )));
    }
    serde_json::from_str(object)
        .map_err(|e| GuestError::Invalid(format!("the object is not valid JSON: {e}")))
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
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
    let text = ctx.client.request_text(req).await.map_err(api_error)?;
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

fn request(method: &str, url: String, content_type: &str, body: Vec<u8>) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(body)
        .expect("method, URI and header are valid")
}

/// The URL of one object, after authorizing the write.
fn item_url<'c>(
    ctx: &'c GuestContext,
    kind: &Gvk,
    namespace: &str,
    name: &str,
) -> Result<(String, &'c Declared), GuestError> {
    let (resource, declared) = ctx.authorize(kind, namespace, Some(name), Access::Write)?;
    Ok((
        format!("{}/{name}", resource.url_path(Some(namespace))),
        declared,
    ))
}

async fn create(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    namespace: String,
    object: String,
) -> Result<String, GuestError> {
    parse(&object)?;
    let (resource, declared) = ctx.authorize(&kind, &namespace, None, Access::Write)?;
    let req = request(
        "POST",
        resource.url_path(Some(&namespace)),
        "application/json",
        object.into_bytes(),
    );
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
    let v = parse(&object)?;
    let (mut url, declared) = item_url(ctx, &kind, &namespace, meta_str(&v, "name"))?;
    if status {
        url.push_str("/status");
    }
    let req = request("PUT", url, "application/json", object.into_bytes());
    write(state, ctx, declared, req).await
}

async fn patch(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    namespace: String,
    name: String,
    patch: Patch,
) -> Result<String, GuestError> {
    let (mut url, declared) = item_url(ctx, &kind, &namespace, &name)?;
    let (content_type, body) = match patch {
        Patch::Merge(b) => ("application/merge-patch+json", b),
        Patch::Json(b) => ("application/json-patch+json", b),
        Patch::Apply(a) => {
            if a.field_manager.is_empty() {
                return Err(GuestError::Invalid(
                    "server-side apply needs a field manager".into(),
                ));
            }
            let q: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("fieldManager", &a.field_manager)
                .append_pair("force", if a.force { "true" } else { "false" })
                .finish();
            url = format!("{url}?{q}");
            ("application/apply-patch+yaml", a.body)
        }
    };
    parse(&body)?;
    let req = request("PATCH", url, content_type, body.into_bytes());
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
    let req = request("DELETE", url, "application/json", Vec::new());
    let text = ctx.client.request_text(req).await.map_err(api_error)?;
    state.note_bytes(text.len());
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
    // Events are about the guest's own declared objects, in a namespace it may write.
    ctx.authorize(&regarding, &namespace, Some(&name), Access::Write)?;
    let uid = ctx
        .declared(&regarding)
        .ok()
        .and_then(|d| d.informer.store().get(&object_key(Some(&namespace), &name)))
        .map(|o| o.uid().to_string());
    let api_version = if regarding.group.is_empty() {
        regarding.version.clone()
    } else {
        format!("{}/{}", regarding.group, regarding.version)
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ns = if namespace.is_empty() {
        "default".to_string()
    } else {
        namespace.clone()
    };
    let event = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}."), "namespace": ns},
        "involvedObject": {"apiVersion": api_version, "kind": regarding.kind, "name": name, "namespace": namespace, "uid": uid},
        "type": match event_type { EventType::Normal => "Normal", EventType::Warning => "Warning" },
        "reason": reason,
        "message": message,
        "source": {"component": format!("reconciled/{}", ctx.name)},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    Metrics::bump(&ctx.metrics.writes);
    let req = request(
        "POST",
        format!("/api/v1/namespaces/{ns}/events"),
        "application/json",
        event.to_string().into_bytes(),
    );
    let text = ctx.client.request_text(req).await.map_err(api_error)?;
    state.note_bytes(text.len());
    Ok(())
}

impl Host for HostState {
    async fn create(
        &mut self,
        kind: Gvk,
        namespace: String,
        object: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let ctx = self.enter()?;
        Ok(create(self, &ctx, kind, namespace, object).await)
    }

    async fn update(
        &mut self,
        kind: Gvk,
        namespace: String,
        object: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let ctx = self.enter()?;
        Ok(update(self, &ctx, kind, namespace, object, false).await)
    }

    async fn patch(
        &mut self,
        kind: Gvk,
        namespace: String,
        name: String,
        p: Patch,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let ctx = self.enter()?;
        Ok(patch(self, &ctx, kind, namespace, name, p).await)
    }

    async fn delete(
        &mut self,
        kind: Gvk,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<(), GuestError>> {
        let ctx = self.enter()?;
        Ok(delete(self, &ctx, kind, namespace, name).await)
    }

    async fn update_status(
        &mut self,
        kind: Gvk,
        namespace: String,
        object: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let ctx = self.enter()?;
        Ok(update(self, &ctx, kind, namespace, object, true).await)
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
        let ctx = self.enter()?;
        let args = EventArgs {
            regarding,
            namespace,
            name,
            event_type,
            reason,
            message,
        };
        Ok(record_event(self, &ctx, args).await)
    }
}
