//! An informer with no API server behind it: synced at once, its kind resolved from what the
//! caller says, its store filled by the caller. `reconciled test` and `reconciled replay` run
//! guests against these, so that what a guest reads offline goes through the very store,
//! indexes and selectors it reads live.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{Notify, watch};

use crate::backoff::Connectivity;
use crate::informer::discovery::Resource;
use crate::informer::store::Writer;
use crate::informer::{Informer, InformerKey, Shared, State, Status, Tasks};

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
        let (status, _) = watch::channel(Status {
            state: State::Synced,
            message: None,
        });
        let writer = Writer::new();
        let shared = Arc::new(Shared {
            key,
            store: writer.reader(),
            indexes: writer.indexes(),
            connectivity: Connectivity::new(client),
            fifo: OnceLock::new(),
            resource: OnceLock::from(resource),
            status,
            subscribers: Mutex::new(Vec::new()),
            reflector_stats: Mutex::new(Vec::new()),
            conditions: Mutex::new(Vec::new()),
            health_changed: Notify::new(),
        });
        let driver = tokio::spawn(async {}).abort_handle();
        let informer = Arc::new(Self {
            shared,
            driver,
            tasks: Arc::new(Tasks::default()),
        });
        (informer, writer)
    }
}
