//! Informer factory: one shared informer per (kind, scope), ref-counted, stopped when the last
//! subscriber leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::backoff::Connectivity;
use crate::informer::store;
use crate::informer::{Informer, InformerKey, Options, Subscription};

/// Hands out shared informers.
///
/// Where it may surprise: informers are shared by *exact* key. Two subscribers whose scopes
/// differ at all (another namespace set, another selector, another transform) get two
/// informers and two watches; the factory does not merge overlapping scopes.
///
/// Its informers share one [`Connectivity`]: when the API server answers again after an outage,
/// every one of them retries within about a second, whichever noticed first.
pub struct InformerFactory {
    client: kube::Client,
    options: Options,
    connectivity: Connectivity,
    informers: Mutex<HashMap<InformerKey, Weak<Informer>>>,
}

impl std::fmt::Debug for InformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerFactory")
            .field("informers", &self.active().len())
            .finish_non_exhaustive()
    }
}

impl InformerFactory {
    /// A factory whose informers use `client` and `options`.
    pub fn new(client: kube::Client, options: Options) -> Self {
        Self {
            connectivity: Connectivity::new(client.clone()),
            client,
            options,
            informers: Mutex::new(HashMap::new()),
        }
    }

    /// The informer for `key`, started if nobody holds one. Must be called inside a tokio
    /// runtime.
    ///
    /// Lookup and start happen under one lock with no `.await` in between, so two callers
    /// racing for the same key always share one informer.
    pub fn informer(&self, key: InformerKey) -> Arc<Informer> {
        let mut map = self.informers.lock().unwrap();
        if let Some(existing) = map.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let informer = Informer::start_with_connectivity(
            self.client.clone(),
            key.clone(),
            self.options.clone(),
            self.connectivity.clone(),
        );
        map.insert(key, Arc::downgrade(&informer));
        informer
    }

    /// Subscribes to the informer for `key`, declaring the field indexes this subscriber needs.
    ///
    /// Indexes are per informer: one subscriber's index serves every subscriber of that
    /// informer, and declaring an existing index is not an error here.
    pub fn subscribe(
        &self,
        key: InformerKey,
        field_indexes: &[&str],
    ) -> store::Result<Subscription> {
        let informer = self.informer(key);
        for idx in field_indexes {
            match informer.add_field_index(idx) {
                Ok(()) | Err(store::Error::DuplicateIndex(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(informer.subscribe(self.options.subscriber_buffer))
    }

    /// Connectivity to the API server, shared by this factory's informers.
    pub fn connectivity(&self) -> &Connectivity {
        &self.connectivity
    }

    /// Informers currently alive.
    pub fn active(&self) -> Vec<Arc<Informer>> {
        self.informers
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}
