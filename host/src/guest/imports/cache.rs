//! `cache` import: read-only `get` and paged `list` from the shared informer store.
//!
//! A `get` is a hash lookup and one copy of the stored JSON into guest memory. Lists are sorted
//! by key and paged by key: the continue token is the last key returned, so a page never
//! repeats or skips an object that stayed put between pages.

use crate::guest::bindings::reconciled::runtime::cache::{Host, ListOptions, ListPage};
use crate::guest::bindings::{GuestError, Gvk};
use crate::guest::imports::notes::Asked;
use crate::guest::imports::{Access, Declared, GuestContext, HostState};
use crate::informer::State;
use crate::informer::store::{self, Query};
use crate::names;
use crate::object::object_key;
use crate::selector::LabelSelector;
use tracing::Instrument as _;

fn check_synced(d: &Declared) -> Result<(), GuestError> {
    let st = d.informer.status();
    match st.state {
        State::Synced | State::Degraded => Ok(()),
        _ => Err(GuestError::Other(format!("cache not synced: {st}"))),
    }
}

/// Builds a store query from guest-controlled options, validating each part: the label
/// selector, and each field path (a path no index could have is `invalid`, not
/// `unindexed-field`).
pub(crate) fn query(options: &ListOptions) -> Result<Query, GuestError> {
    let labels = LabelSelector::parse(&options.label_selector).map_err(|e| {
        GuestError::Invalid(format!(
            "label selector {}: {e}",
            names::shown(&options.label_selector)
        ))
    })?;
    for (path, _) in &options.fields {
        names::field_path(path).map_err(|e| GuestError::Invalid(e.to_string()))?;
    }
    Ok(Query {
        namespace: (!options.namespace.is_empty()).then(|| options.namespace.clone()),
        labels,
        fields: options.fields.clone(),
        owner_uid: None,
    })
}

/// One page of `items` (sorted by key) after `continue_token`, at most `limit` long.
///
/// `limit` and `continue_token` are guest-controlled: the limit is clamped to the host's page
/// cap, and a token that names no key simply starts after it in key order.
pub(crate) fn page<T>(
    items: &[T],
    key: impl Fn(&T) -> &str,
    token: &str,
    limit: u32,
    max_page: u32,
) -> (std::ops::Range<usize>, String) {
    // A configured cap of 0 would make every list look empty; a page holds at least one.
    let max_page = max_page.max(1);
    let limit = if limit == 0 {
        max_page
    } else {
        limit.min(max_page)
    } as usize;
    let start = if token.is_empty() {
        0
    } else {
        items.partition_point(|o| key(o) <= token)
    };
    let end = (start + limit).min(items.len());
    let next = if end < items.len() && end > start {
        key(&items[end - 1]).to_string()
    } else {
        String::new()
    };
    (start..end, next)
}

async fn cached_get(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: &Gvk,
    namespace: &str,
    name: &str,
) -> Result<String, GuestError> {
    let (_, d) = ctx.authorize(kind, namespace, Some(name), Access::CacheRead)?;
    check_synced(d)?;
    let key = object_key(Some(namespace), name);
    let store = d.informer.store();
    if ctx.read_your_writes {
        state
            .wait_on_host(
                d.floors
                    .wait_key(store, &key, ctx.limits.read_your_writes_timeout),
            )
            .await
            .map_err(|e| GuestError::Timeout(e.to_string()))?;
    }
    let obj = store
        .get(&key)
        .ok_or_else(|| GuestError::NotFound(format!("{} {key} is not in the cache", kind.kind)))?;
    state.charge(obj.json().len())?;
    Ok(String::from_utf8_lossy(obj.json()).into_owned())
}

async fn cached_list(
    state: &mut HostState,
    ctx: &GuestContext,
    kind: &Gvk,
    options: &ListOptions,
) -> Result<ListPage, GuestError> {
    let (_, d) = ctx.authorize(kind, &options.namespace, None, Access::CacheRead)?;
    check_synced(d)?;
    let q = query(options)?;
    if let Some((field, _)) = q.fields.iter().find(|(f, _)| {
        !matches!(f.as_str(), "metadata.name" | "metadata.namespace") && !d.indexes.contains(f)
    }) {
        return Err(GuestError::UnindexedField(format!(
            "no field index {field:?} declared by this guest for {}: declare it with field_index in describe() (declared: {:?})",
            kind.kind, d.indexes
        )));
    }
    let store = d.informer.store();
    if ctx.read_your_writes {
        state
            .wait_on_host(d.floors.wait_all(
                store,
                q.namespace.as_deref(),
                ctx.limits.read_your_writes_timeout,
            ))
            .await
            .map_err(|e| GuestError::Timeout(e.to_string()))?;
    }
    let all = store.list(&q).map_err(|e| match e {
        store::Error::UnindexedField { .. } => GuestError::UnindexedField(e.to_string()),
        other => GuestError::Invalid(other.to_string()),
    })?;
    let (range, continue_token) = page(
        &all,
        |o| o.key(),
        &options.continue_token,
        options.limit,
        state.call_limits().max_page,
    );
    let page = &all[range];
    // Charged once, for the whole page, before anything is copied: a page refused as too large
    // spends none of the budget, so a smaller read after it still fits.
    let delivered = page.iter().map(|o| o.json().len()).sum::<usize>() + continue_token.len();
    state.charge(delivered)?;
    let items = page
        .iter()
        .map(|o| String::from_utf8_lossy(o.json()).into_owned())
        .collect();
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
        let (ctx, call) = self.enter_noted(|| Asked::get("cache.get", &kind, &namespace, &name))?;
        let span = tracing::info_span!("cache", call = "get", kind = %kind.kind, %namespace, %name);
        let answer = cached_get(self, &ctx, &kind, &namespace, &name)
            .instrument(span)
            .await;
        Ok(call.answered(self, answer))
    }

    async fn list(
        &mut self,
        kind: Gvk,
        options: ListOptions,
    ) -> wasmtime::Result<Result<ListPage, GuestError>> {
        let (ctx, call) = self.enter_noted(|| Asked::list("cache.list", &kind, &options))?;
        let span = tracing::info_span!("cache", call = "list", kind = %kind.kind);
        let answer = cached_list(self, &ctx, &kind, &options)
            .instrument(span)
            .await;
        Ok(call.answered(self, answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_keys_and_clamp_the_limit() {
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        fn k(s: &String) -> &str {
            s
        }
        let (r, next) = page(&keys, k, "", 4, 500);
        assert_eq!((r.clone(), next.as_str()), (0..4, "k3"));
        let (r, next) = page(&keys, k, &next, 4, 500);
        assert_eq!((r, next.as_str()), (4..8, "k7"));
        let (r, next) = page(&keys, k, "k7", 4, 500);
        assert_eq!((r, next.as_str()), (8..10, ""));
        let (r, _) = page(&keys, k, "", 0, 3);
        assert_eq!(r, 0..3, "0 means the host default");
        let (r, _) = page(&keys, k, "", 1_000_000, 3);
        assert_eq!(r, 0..3, "the host caps the page");
        let (r, next) = page(&keys, k, "zzz", 4, 500);
        assert_eq!(
            (r, next.as_str()),
            (10..10, ""),
            "a token past the end is an empty last page"
        );
    }
}
