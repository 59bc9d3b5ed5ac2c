//! Building the state an informer shares with its tasks, live or offline.

use std::sync::{Mutex, OnceLock};

use tokio::sync::{Notify, watch};

use crate::backoff::Connectivity;
use crate::informer::discovery::Resource;
use crate::informer::store::Writer;
use crate::informer::{InformerKey, Shared, State, Status};

impl Shared {
    /// The state of an informer over `writer`'s store, in `state`, resolved if `resource` is.
    pub(super) fn new(
        key: InformerKey,
        writer: &Writer,
        connectivity: Connectivity,
        state: State,
        resource: Option<Resource>,
    ) -> Self {
        let (status, _) = watch::channel(Status {
            state,
            message: None,
        });
        let resolved = OnceLock::new();
        if let Some(r) = resource {
            let _ = resolved.set(r);
        }
        Self {
            key,
            store: writer.reader(),
            indexes: writer.indexes(),
            connectivity,
            fifo: OnceLock::new(),
            resource: resolved,
            status,
            subscribers: Mutex::new(Vec::new()),
            reflector_stats: Mutex::new(Vec::new()),
            conditions: Mutex::new(Vec::new()),
            health_changed: Notify::new(),
        }
    }
}
