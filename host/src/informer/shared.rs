//! The state an informer shares with its tasks, live or offline, and the tasks themselves.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;

use super::delta_fifo::DeltaFifo;
use super::discovery::Resource;
use super::key::InformerKey;
use super::reflector::{self, Condition};
use super::status::{State, Status};
use super::store::{Indexes, Store, Writer};
use super::subscription::SubscriberQueue;
use crate::backoff::Connectivity;

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) key: InformerKey,
    pub(super) store: Store,
    pub(super) indexes: Indexes,
    pub(super) connectivity: Connectivity,
    pub(super) fifo: OnceLock<Arc<DeltaFifo>>,
    pub(super) resource: OnceLock<Resource>,
    pub(super) status: watch::Sender<Status>,
    pub(super) subscribers: Mutex<Vec<Weak<SubscriberQueue>>>,
    pub(super) reflector_stats: Mutex<Vec<Arc<reflector::Stats>>>,
    pub(super) conditions: Mutex<Vec<watch::Receiver<Condition>>>,
    pub(super) health_changed: Notify,
}

/// The informer's background tasks. Once closed, a task registered late (the driver may still
/// be between two `.await`s when the informer drops) is aborted on the spot.
#[derive(Debug, Default)]
pub(super) struct Tasks {
    handles: Mutex<(bool, Vec<AbortHandle>)>,
}

impl Tasks {
    pub(super) fn push(&self, handle: AbortHandle) {
        let mut h = self.handles.lock().unwrap();
        if h.0 {
            handle.abort();
        } else {
            h.1.push(handle);
        }
    }

    pub(super) fn close(&self) {
        let mut h = self.handles.lock().unwrap();
        h.0 = true;
        for t in h.1.drain(..) {
            t.abort();
        }
    }
}

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
