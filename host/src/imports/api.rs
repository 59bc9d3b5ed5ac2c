//! `api` import: uncached reads from the API server, only for guests granted them, and counted.
//!
//! An uncached read costs the API server a request (and a quorum read from etcd); a reconciler
//! that needs one per reconcile at scale hurts the whole cluster, so it is opt-in per guest.

use serde_json::Value;

use crate::bindings::reconciled::runtime::api::Host;
use crate::bindings::reconciled::runtime::cache::{ListOptions, ListPage};
use crate::bindings::{GuestError, Gvk};
use crate::imports::{Access, GuestContext, HostState, Metrics, api_error};

fn granted(ctx: &GuestContext) -> Result<(), GuestError> {
    if ctx.grant.uncached_reads {
        Ok(())
    } else {
        Err(GuestError::Forbidden(format!(
            "guest {:?} is not granted uncached reads; read from the cache, or set `uncached_reads = true` in its grant",
            ctx.name
        )))
    }
}

async fn get(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    namespace: String,
    name: String,
) -> Result<String, GuestError> {
    granted(ctx)?;
    let (resource, _) = ctx.authorize(&kind, &namespace, Some(&name), Access::ServerRead)?;
    Metrics::bump(&ctx.metrics.uncached_reads);
    let req = http::Request::get(format!("{}/{name}", resource.url_path(Some(&namespace))))
        .body(Vec::new())
        .expect("valid request");
    let text = ctx.client.request_text(req).await.map_err(api_error)?;
    state.charge(text.len())?;
    Ok(text)
}

async fn list(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    options: ListOptions,
) -> Result<ListPage, GuestError> {
    granted(ctx)?;
    let (resource, _) = ctx.authorize(&kind, &options.namespace, None, Access::ServerRead)?;
    // Guest-controlled: clamp the page size to the host's cap.
    let max = state.call_limits().max_page;
    let limit = if options.limit == 0 {
        max
    } else {
        options.limit.min(max)
    };
    // Built in a block: the serializer is not `Send` and must not live across the await.
    let query = {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", &limit.to_string());
        if !options.label_selector.is_empty() {
            q.append_pair("labelSelector", &options.label_selector);
        }
        if !options.fields.is_empty() {
            let fields: Vec<String> = options
                .fields
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            q.append_pair("fieldSelector", &fields.join(","));
        }
        if !options.continue_token.is_empty() {
            q.append_pair("continue", &options.continue_token);
        }
        q.finish()
    };
    let ns = (!options.namespace.is_empty()).then_some(options.namespace.as_str());
    Metrics::bump(&ctx.metrics.uncached_reads);
    let req = http::Request::get(format!("{}?{query}", resource.url_path(ns)))
        .body(Vec::new())
        .expect("valid request");
    let text = ctx.client.request_text(req).await.map_err(api_error)?;
    state.charge(text.len())?;
    let mut page: Value = serde_json::from_str(&text)
        .map_err(|e| GuestError::Other(format!("unreadable list: {e}")))?;
    let continue_token = page["metadata"]["continue"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let items = match page.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|mut item| {
                // LIST items lack their type; give it back so the guest sees whole objects.
                if let Some(o) = item.as_object_mut() {
                    o.entry("apiVersion")
                        .or_insert_with(|| resource.api_version.clone().into());
                    o.entry("kind")
                        .or_insert_with(|| resource.kind.clone().into());
                }
                item.to_string()
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(ListPage {
        items,
        continue_token,
    })
}

impl Host for HostState {
    async fn get(
        &mut self,
        kind: Gvk,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        let ctx = self.enter()?;
        Ok(get(self, &ctx, kind, namespace, name).await)
    }

    async fn list(
        &mut self,
        kind: Gvk,
        options: ListOptions,
    ) -> wasmtime::Result<Result<ListPage, GuestError>> {
        let ctx = self.enter()?;
        Ok(list(self, &ctx, kind, options).await)
    }
}
