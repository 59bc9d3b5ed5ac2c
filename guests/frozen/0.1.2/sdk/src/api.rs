//! Typed uncached reads, straight from the API server.
//!
//! Allowed only when the operator grants it, and counted in the host's metrics: prefer
//! [`cache`](crate::cache). Without the grant every call is
//! [`Error::Forbidden`](crate::Error::Forbidden).

use serde::de::DeserializeOwned;

use crate::bindings::reconciled::runtime::api as raw;
use crate::cache::Page;
use crate::object::{decode, decode_page, list_all};
use crate::{Kind, ListOptions, Result};

/// One object, read from the API server.
pub fn get<K: Kind + DeserializeOwned>(namespace: &str, name: &str) -> Result<K> {
    let gvk = K::gvk();
    decode(&gvk, &raw::get(&gvk, namespace, name)?)
}

/// Every object that matches `options`, read from the API server page by page.
pub fn list<K: Kind + DeserializeOwned>(options: ListOptions) -> Result<Vec<K>> {
    list_all(&K::gvk(), options, raw::list)
}

/// One page of objects, read from the API server.
pub fn list_page<K: Kind + DeserializeOwned>(options: &ListOptions) -> Result<Page<K>> {
    let gvk = K::gvk();
    decode_page(&gvk, raw::list(&gvk, options)?)
}
