//! `api` import: uncached reads from the API server, only for guests granted them, and counted.
//!
//! An uncached read costs the API server a request (and a quorum read from etcd); a reconciler
//! that needs one per reconcile at scale hurts the whole cluster, so it is opt-in per guest.

use serde_json::Value;

use crate::guest::bindings::reconciled::runtime::api::Host;
use crate::guest::bindings::reconciled::runtime::cache::{ListOptions, ListPage};
use crate::guest::bindings::{GuestError, Gvk};
use crate::guest::imports::notes::Asked;
use crate::guest::imports::{Access, GuestContext, HostState, Metrics, request};
use crate::names;
use crate::selector::LabelSelector;

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
    // Validated by `authorize`; encoded all the same, as every guest-made path segment is.
    let url = format!(
        "{}/{}",
        resource.url_path(Some(&names::segment(&namespace))),
        names::segment(&name)
    );
    let req = request(http::Method::GET, url, None, Vec::new())?;
    Metrics::bump(&ctx.metrics.uncached_reads);
    let text = state.send(ctx, req).await?;
    state.charge(text.len())?;
    Ok(text)
}

/// A field selector value escaped as apimachinery's `fields.EscapeValue` does (`\` becomes
/// `\\`, `,` becomes `\,`, `=` becomes `\=`), so that a guest's value cannot add terms to the
/// selector.
fn escape_field_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The query string of a list, from guest-controlled options: the page size clamped, the label
/// selector and field paths validated, field values escaped, everything URL-encoded.
fn list_query(options: &ListOptions, max_page: u32) -> Result<String, GuestError> {
    LabelSelector::parse(&options.label_selector).map_err(|e| {
        GuestError::Invalid(format!(
            "label selector {}: {e}",
            names::shown(&options.label_selector)
        ))
    })?;
    let limit = if options.limit == 0 {
        max_page
    } else {
        options.limit.min(max_page)
    };
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("limit", &limit.to_string());
    if !options.label_selector.is_empty() {
        q.append_pair("labelSelector", &options.label_selector);
    }
    if !options.fields.is_empty() {
        let mut terms = Vec::with_capacity(options.fields.len());
        for (path, value) in &options.fields {
            names::field_path(path).map_err(|e| GuestError::Invalid(e.to_string()))?;
            terms.push(format!("{path}={}", escape_field_value(value)));
        }
        q.append_pair("fieldSelector", &terms.join(","));
    }
    if !options.continue_token.is_empty() {
        q.append_pair("continue", &options.continue_token);
    }
    Ok(q.finish())
}

async fn list(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: Gvk,
    options: ListOptions,
) -> Result<ListPage, GuestError> {
    granted(ctx)?;
    let (resource, _) = ctx.authorize(&kind, &options.namespace, None, Access::ServerRead)?;
    let query = list_query(&options, state.call_limits().max_page)?;
    let ns = (!options.namespace.is_empty()).then(|| names::segment(&options.namespace));
    let req = request(
        http::Method::GET,
        format!("{}?{query}", resource.url_path(ns.as_deref())),
        None,
        Vec::new(),
    )?;
    Metrics::bump(&ctx.metrics.uncached_reads);
    let text = state.send(ctx, req).await?;
    let mut page: Value = serde_json::from_str(&text)
        .map_err(|e| GuestError::Other(format!("unreadable list from the API server: {e}")))?;
    let continue_token = page["metadata"]["continue"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let items: Vec<String> = match page.get_mut("items").map(Value::take) {
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
    // Charged once, for what is delivered: a page refused as too large spends nothing.
    let delivered = items.iter().map(String::len).sum::<usize>() + continue_token.len();
    state.charge(delivered)?;
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
        let (ctx, call) = self.enter_noted(|| Asked::get("api.get", &kind, &namespace, &name))?;
        let answer = get(self, &ctx, kind, namespace, name).await;
        Ok(call.answered(self, answer))
    }

    async fn list(
        &mut self,
        kind: Gvk,
        options: ListOptions,
    ) -> wasmtime::Result<Result<ListPage, GuestError>> {
        let (ctx, call) = self.enter_noted(|| Asked::list("api.list", &kind, &options))?;
        let answer = list(self, &ctx, kind, options).await;
        Ok(call.answered(self, answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(label_selector: &str, fields: &[(&str, &str)]) -> ListOptions {
        ListOptions {
            namespace: String::new(),
            label_selector: label_selector.into(),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            limit: 0,
            continue_token: String::new(),
        }
    }

    #[test]
    fn a_field_value_cannot_add_selector_terms() {
        let q = list_query(
            &options("", &[("metadata.name", "x,metadata.namespace=y\\")]),
            500,
        )
        .unwrap();
        let decoded: Vec<(String, String)> =
            form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        assert!(decoded.contains(&(
            "fieldSelector".into(),
            "metadata.name=x\\,metadata.namespace\\=y\\\\".into()
        )));
        let parsed = crate::selector::FieldSelector::parse(
            &decoded
                .iter()
                .find(|(k, _)| k == "fieldSelector")
                .unwrap()
                .1,
        )
        .unwrap();
        assert_eq!(
            parsed.requirements().len(),
            1,
            "one term, as the guest asked"
        );
    }

    #[test]
    fn bad_list_options_are_invalid() {
        for o in [
            options("a in (", &[]),
            options("a=b\0", &[]),
            options("", &[("a,b", "x")]),
            options("", &[("", "x")]),
            options("", &[("a=b", "x")]),
        ] {
            let err = list_query(&o, 500).unwrap_err();
            assert!(matches!(err, GuestError::Invalid(_)), "{o:?}: {err:?}");
        }
    }
}
