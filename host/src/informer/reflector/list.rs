//! Listing: a paged LIST (JSON or protobuf pages) that replaces the delta FIFO's content.

use std::sync::atomic::Ordering;

use http_body_util::BodyExt;
use serde_json::Value;

use super::{Error, Reflector, Result, WatchEnd};
use crate::informer::protobuf;
use crate::object::ObjectRef;

impl Reflector {
    /// A paged LIST, then `replace`.
    pub(super) async fn list_sync(&mut self, rv_hint: &str) -> Result<WatchEnd> {
        let (items, rv) = self.list_all(rv_hint).await?;
        self.last_rv = rv;
        self.complete_sync(items);
        Ok(WatchEnd::Listed)
    }

    /// A paged LIST. `rv_hint` non-empty: at least that fresh (`NotOlderThan`), else a quorum
    /// read. An expired continue token restarts the whole list as a quorum read.
    async fn list_all(&self, rv_hint: &str) -> Result<(Vec<ObjectRef>, String)> {
        let limit = self.cfg.page_size.to_string();
        let mut rv_hint = rv_hint.to_string();
        'restart: loop {
            let mut items = Vec::new();
            let mut token = String::new();
            loop {
                let mut extra = vec![("limit", limit.as_str())];
                if !token.is_empty() {
                    extra.push(("continue", token.as_str()));
                } else if !rv_hint.is_empty() {
                    extra.push(("resourceVersion", rv_hint.as_str()));
                    extra.push(("resourceVersionMatch", "NotOlderThan"));
                }
                self.stats.lists.fetch_add(1, Ordering::Relaxed);
                let (list_rv, next) = match self.list_page(self.query(&extra), &mut items).await {
                    Ok(p) => p,
                    Err(Error::Gone(msg)) if !token.is_empty() => {
                        tracing::info!(scope = %self.scope(), %msg, "continue token expired; restarting the list");
                        rv_hint.clear();
                        continue 'restart;
                    }
                    Err(e) => return Err(e),
                };
                self.connectivity.reached();
                token = next;
                if token.is_empty() {
                    return Ok((items, list_rv));
                }
            }
        }
    }

    /// One LIST page at `uri`: its items are appended to `items`; returns the list's
    /// resourceVersion and continue token.
    async fn list_page(&self, uri: String, items: &mut Vec<ObjectRef>) -> Result<(String, String)> {
        // A guest-declared namespace could make an invalid URI: an error, never a panic.
        let mut req = http::Request::get(uri);
        if self.protobuf.is_some() {
            req = req.header(http::header::ACCEPT, protobuf::ACCEPT_LIST);
        }
        let req = req.body(Vec::new()).map_err(|source| Error::Build {
            what: "LIST",
            source,
        })?;
        let page: Value = match self.protobuf {
            None => self.client.request::<Value>(req).await?,
            Some(kind) => {
                let res = self.send(req).await?;
                let is_protobuf =
                    protobuf::is_protobuf(res.headers().get(http::header::CONTENT_TYPE));
                let body = res.into_body().collect().await?.to_bytes();
                if is_protobuf {
                    self.stats.protobuf_reads.fetch_add(1, Ordering::Relaxed);
                    let page = protobuf::list_page(&body).map_err(Error::Protobuf)?;
                    items.reserve(page.items.len());
                    for item in page.items {
                        if let Some(o) = self.protobuf_object(kind, item)? {
                            items.push(o);
                        }
                    }
                    return Ok((
                        page.resource_version.to_string(),
                        page.continue_token.to_string(),
                    ));
                }
                serde_json::from_slice(&body)
                    .map_err(|e| Error::Request(kube::Error::SerdeError(e)))?
            }
        };
        let Value::Object(mut page) = page else {
            return Err(Error::NotAList);
        };
        let meta_str = |key: &str| {
            page.get("metadata")
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (list_rv, token) = (meta_str("resourceVersion"), meta_str("continue"));
        if let Some(Value::Array(page_items)) = page.remove("items") {
            let type_meta = (
                self.cfg.resource.api_version.as_str(),
                self.cfg.resource.kind.as_str(),
            );
            items.reserve(page_items.len());
            items.extend(
                page_items
                    .into_iter()
                    .filter_map(|i| self.to_object(i, Some(type_meta))),
            );
        }
        Ok((list_rv, token))
    }
}
