//! An informer with no API server behind it: synced at once, its kind resolved from what the
//! caller says, its store filled by the caller. `reconciled test` and `reconciled replay` run
//! guests against these, so that what a guest reads offline goes through the very store,
//! indexes and selectors it reads live.

use std::sync::Arc;

use super::Informer;
use super::key::InformerKey;
use super::shared::{Shared, Tasks};
use super::status::State;
use crate::backoff::Connectivity;
use crate::informer::discovery::Resource;
use crate::informer::store::Writer;

impl Informer {
    /// An informer for `key`, already synced and resolved to `resource`, and the writer that
    /// fills its store. Nothing is listed or watched: the store holds what the caller upserts
    /// (call [`Writer::publish_watermarks`] after each change, as the live informer does when
    /// its FIFO drains, or read-your-writes waits for it).
    ///
    /// Where it may surprise: `client` is only held for the connectivity handle every informer
    /// carries; it is never called. Must be called inside a tokio runtime.
    pub fn offline(
        client: kube::Client,
        key: InformerKey,
        resource: Resource,
    ) -> (Arc<Self>, Writer) {
        let writer = Writer::new();
        let connectivity = Connectivity::new(client);
        let shared = Shared::new(key, &writer, connectivity, State::Synced, Some(resource));
        let shared = Arc::new(shared);
        let driver = tokio::spawn(async {}).abort_handle();
        let informer = Arc::new(Self {
            shared,
            driver,
            tasks: Arc::new(Tasks::default()),
        });
        (informer, writer)
    }
}
