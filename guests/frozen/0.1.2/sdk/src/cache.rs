//! Typed reads from the host's shared cache.
//!
//! Note that this is a cache and may be stale. With read-your-writes (the default consistency),
//! a read of an object this guest wrote (through [`client`](crate::client)) first waits, up to
//! the host's read-your-writes timeout (5 s unless the operator configures another), until the
//! cache holds that write or something newer; a [`list`] waits so for every such object of its
//! kind in the namespace it reads. What it does not promise:
//!
//! - if the cache does not catch up in time, that read fails with
//!   [`Error::Timeout`](crate::Error::Timeout) and the wait is given up: later reads of the
//!   object do not wait again, and may return it older than the write until the watch catches
//!   up;
//! - writes to objects the cache does not hold (another namespace, a label selector they do not
//!   match) and writes to API servers older than Kubernetes 1.35 (no comparable
//!   resourceVersions) are never waited for;
//! - other writers' changes show up only when their watch events arrive.
//!
//! A namespace or name that Kubernetes would refuse is [`Error::Invalid`](crate::Error::Invalid),
//! never a not-found.
//!
//! Only kinds declared in `describe` (`for`, `owns`, `watches`) can be read; anything else is
//! [`Error::NotDeclared`](crate::Error::NotDeclared), never a silent not-found.

use serde::de::DeserializeOwned;

use crate::bindings::reconciled::runtime::cache as raw;
use crate::object::{decode, decode_page, list_all};
use crate::{Gvk, Kind, ListOptions, ListPage, Result};

/// One object. A missing object is [`Error::NotFound`](crate::Error::NotFound); use
/// [`get_opt`] to treat that as `None`.
pub fn get<K: Kind + DeserializeOwned>(namespace: &str, name: &str) -> Result<K> {
    let gvk = K::gvk();
    decode(&gvk, &raw::get(&gvk, namespace, name)?)
}

/// One object, or `None` if it does not exist (other errors stay errors).
pub fn get_opt<K: Kind + DeserializeOwned>(namespace: &str, name: &str) -> Result<Option<K>> {
    match get(namespace, name) {
        Ok(obj) => Ok(Some(obj)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every object that matches `options`, sorted by namespace/name, following continue tokens
/// from `options.continue_token` to the last page.
///
/// Everything ends up in guest memory, and the host caps the bytes one reconcile may receive
/// ([`Error::TooLarge`](crate::Error::TooLarge)); for big kinds, narrow the query or use
/// [`list_page`].
pub fn list<K: Kind + DeserializeOwned>(options: ListOptions) -> Result<Vec<K>> {
    list_all(&K::gvk(), options, raw::list)
}

/// One page of objects that match `options`.
pub fn list_page<K: Kind + DeserializeOwned>(options: &ListOptions) -> Result<Page<K>> {
    let gvk = K::gvk();
    decode_page(&gvk, raw::list(&gvk, options)?)
}

/// One object as the host's JSON text, of any declared kind.
pub fn get_raw(kind: &Gvk, namespace: &str, name: &str) -> Result<String> {
    raw::get(kind, namespace, name)
}

/// One page of objects as the host's JSON text, of any declared kind.
pub fn list_raw(kind: &Gvk, options: &ListOptions) -> Result<ListPage> {
    raw::list(kind, options)
}

/// A page of typed objects.
#[derive(Clone, Debug)]
pub struct Page<K> {
    /// The objects, sorted by namespace/name.
    pub items: Vec<K>,
    /// Pass it as [`ListOptions::continue_token`] for the next page; empty on the last page.
    pub continue_token: String,
}

#[allow(clippy::derivable_impls)] // `ListOptions` is generated; it cannot derive here.
impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            namespace: String::new(),
            label_selector: String::new(),
            fields: Vec::new(),
            limit: 0,
            continue_token: String::new(),
        }
    }
}

impl ListOptions {
    /// All objects in all namespaces the guest may read, in pages of the host's default size.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only objects in `namespace` (empty: all namespaces the guest may read).
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Only objects whose labels match `selector` (Kubernetes label selector syntax).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = selector.into();
        self
    }

    /// Only objects whose `path` (dotted JSON path) equals `value`. The field must be declared
    /// as a field index in `describe` (`metadata.name` and `metadata.namespace` need none);
    /// otherwise the read fails with [`Error::UnindexedField`](crate::Error::UnindexedField).
    pub fn field(mut self, path: impl Into<String>, value: impl Into<String>) -> Self {
        self.fields.push((path.into(), value.into()));
        self
    }

    /// Page size; 0 means the host's default. The host caps it.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Start from this continue token (from a previous page).
    pub fn continue_from(mut self, token: impl Into<String>) -> Self {
        self.continue_token = token.into();
        self
    }
}
