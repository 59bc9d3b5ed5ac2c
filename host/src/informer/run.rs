//! The tasks an informer runs: the driver (resolve the kind, start the reflectors, then apply
//! the FIFO's deltas to the store and fan them out to subscribers) and the health watch.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::key::Namespaces;
use super::options::Options;
use super::shared::{Shared, Tasks};
use super::status::{State, Status};
use super::subscription::{Event, Notification};
use super::{discovery, reflector};
use crate::backoff::Backoff;
use crate::informer::delta_fifo::{DeltaFifo, DeltaType, KnownObjects};
use crate::informer::reflector::{Condition, Reflector};
use crate::informer::store::Writer;

/// The informer's main task: resolve the kind, start reflectors, then process the FIFO.
pub(super) async fn drive(
    client: kube::Client,
    shared: Arc<Shared>,
    options: Options,
    tasks: Arc<Tasks>,
    writer: Writer,
) {
    let gvk = shared.key.kube_gvk();
    let mut backoff = Backoff::new(
        Duration::from_millis(500),
        Duration::from_secs(10),
        Duration::from_secs(120),
        0.5,
    );
    let resource = loop {
        match discovery::resolve(&client, &gvk).await {
            Ok(r) => {
                shared.connectivity.reached();
                break r;
            }
            Err(e) => {
                let state = match e {
                    discovery::Error::KindNotFound { .. } => State::KindNotFound,
                    discovery::Error::Request { .. } => State::Syncing,
                };
                tracing::warn!(kind = %shared.key.name(), error = %e, "discovery failed");
                shared.status.send_replace(Status {
                    state,
                    message: Some(e.to_string()),
                });
                // A kind not found may be a CRD about to be installed: keep asking, on the
                // backoff; an unreachable server is asked again as soon as it answers.
                let ticket = shared.connectivity.failed(e.failure());
                shared.connectivity.wait(ticket, backoff.failure()).await;
            }
        }
    };
    let _ = shared.resource.set(resource.clone());

    let scope = &shared.key.scope;
    if let (Namespaces::Only(set), false) = (&scope.namespaces, resource.namespaced) {
        // A scope of namespaces never holds objects that have none. Watching the whole kind
        // instead would hand a guest confined to namespaces (a tenant's) every object of a
        // cluster-scoped kind through its handlers and `map`.
        let message = format!(
            "{} is cluster-scoped, but this informer is confined to namespaces {:?}; a guest confined to namespaces cannot watch cluster-scoped kinds: remove the kind from describe(), or (for an operator's guest) declare no namespaces and grant none",
            shared.key.name(),
            set
        );
        tracing::warn!(kind = %shared.key.name(), "{message}");
        shared.status.send_replace(Status {
            state: State::Forbidden,
            message: Some(message),
        });
        return;
    }
    let namespaces: Vec<Option<String>> = match (&scope.namespaces, resource.namespaced) {
        // No range at all: no reflector, and a FIFO that waits for no list is synced at once.
        _ if scope.shard.as_ref().is_some_and(|s| s.is_empty()) => Vec::new(),
        (Namespaces::Only(set), true) => set.iter().cloned().map(Some).collect(),
        _ => vec![None],
    };
    let known: Arc<dyn KnownObjects> = Arc::new(shared.store.clone());
    let fifo = Arc::new(DeltaFifo::new(known.clone(), namespaces.len()));
    let _ = shared.fifo.set(fifo.clone());

    for ns in namespaces {
        let mut cfg = reflector::Config::new(resource.clone(), ns);
        cfg.label_selector = (!scope.labels.is_empty()).then(|| scope.labels.to_string());
        cfg.field_selector = (!scope.fields.is_empty()).then(|| scope.fields.to_string());
        cfg.transform = scope.transform.clone();
        cfg.page_size = options.page_size;
        cfg.watch_list = options.watch_list;
        cfg.protobuf = options.protobuf;
        cfg.shard_selector = scope.shard.as_ref().and_then(|s| s.selector());
        let stats = Arc::new(reflector::Stats::default());
        let (cond_tx, cond_rx) = watch::channel(Condition::Syncing);
        shared.reflector_stats.lock().unwrap().push(stats.clone());
        shared.conditions.lock().unwrap().push(cond_rx);
        let r = Reflector::new(
            client.clone(),
            cfg,
            fifo.clone(),
            known.clone(),
            stats,
            cond_tx,
            shared.connectivity.clone(),
        );
        tasks.push(tokio::spawn(r.run()).abort_handle());
    }
    tasks.push(tokio::spawn(health(shared.clone())).abort_handle());
    if let Some(period) = options.resync {
        let fifo = fifo.clone();
        tasks.push(
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    fifo.resync();
                }
            })
            .abort_handle(),
        );
    }
    process(shared, fifo, writer).await;
}

/// Pops deltas into the store and fans them out to subscribers. The one place that holds the
/// store's writer.
async fn process(shared: Arc<Shared>, fifo: Arc<DeltaFifo>, writer: Writer) {
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut synced = false;
    loop {
        let popped = fifo
            .pop(|_key, deltas| {
                // The dispatch lock is held across store update and fan-out, so a concurrent
                // `subscribe` sees either both or neither.
                let mut subs = shared.subscribers.lock().unwrap();
                subs.retain(|w| w.strong_count() > 0);
                for delta in deltas {
                    let obj = delta.object.object().clone();
                    let n = match delta.kind {
                        DeltaType::Deleted => {
                            writer.observe(&obj);
                            writer.remove(obj.key());
                            Notification {
                                event: Event::Deleted {
                                    last_known: obj,
                                    final_state_unknown: delta.object.is_tombstone(),
                                },
                                background: false,
                            }
                        }
                        kind => {
                            let relisted = matches!(kind, DeltaType::Replaced | DeltaType::Sync);
                            match writer.upsert(obj.clone()) {
                                None => Notification {
                                    event: Event::Added(obj),
                                    background: relisted && !synced,
                                },
                                Some(old) => {
                                    let unchanged =
                                        old.resource_version() == obj.resource_version();
                                    Notification {
                                        event: Event::Updated { old, new: obj },
                                        background: relisted && unchanged,
                                    }
                                }
                            }
                        }
                    };
                    for q in subs.iter().filter_map(Weak::upgrade) {
                        q.push(n.clone());
                    }
                }
            })
            .await;
        if popped.is_none() {
            return;
        }
        // Drained: every event received so far is applied, so read-your-writes may trust it.
        if fifo.is_empty() {
            writer.publish_watermarks();
        }
        if !synced {
            if fifo.has_synced() {
                synced = true;
                // The health task reports it: an empty initial list syncs with nothing to pop.
                shared.health_changed.notify_one();
            } else if last_progress.elapsed() > Duration::from_secs(5) {
                last_progress = Instant::now();
                tracing::info!(kind = %shared.key.name(), objects = shared.store.len(), elapsed = ?started.elapsed(), "informer syncing");
            }
        }
    }
}

/// Recomputes the informer's status whenever a reflector's condition or the sync state changes.
async fn health(shared: Arc<Shared>) {
    let started = Instant::now();
    let mut reported_sync = false;
    loop {
        let mut conds: Vec<watch::Receiver<Condition>> = shared.conditions.lock().unwrap().clone();
        let synced = shared.fifo.get().is_some_and(|f| f.has_synced());
        let current: Vec<Condition> = conds
            .iter_mut()
            .map(|c| c.borrow_and_update().clone())
            .collect();
        let forbidden = current.iter().find_map(|c| match c {
            Condition::Forbidden(m) => Some(m.clone()),
            _ => None,
        });
        let failing = current.iter().find_map(|c| match c {
            Condition::Failing(m) => Some(m.clone()),
            _ => None,
        });
        let status = match (forbidden, failing, synced) {
            (Some(m), _, _) => Status {
                state: State::Forbidden,
                message: Some(m),
            },
            (None, Some(m), true) => Status {
                state: State::Degraded,
                message: Some(m),
            },
            (None, None, true) => Status {
                state: State::Synced,
                message: None,
            },
            (None, last, false) => Status {
                state: State::Syncing,
                message: last,
            },
        };
        if status.state == State::Synced && !reported_sync {
            reported_sync = true;
            tracing::info!(kind = %shared.key.name(), objects = shared.store.len(), elapsed = ?started.elapsed(), "informer synced");
        }
        shared.status.send_if_modified(|cur| {
            let changed = *cur != status;
            *cur = status;
            changed
        });
        // A reflector that ended (it should not) closes its channel; waiting on a closed
        // channel returns at once, which would spin.
        conds.retain(|c| c.has_changed().is_ok());
        if conds.is_empty() {
            shared.health_changed.notified().await;
            continue;
        }
        let changes = conds
            .iter_mut()
            .map(|c| Box::pin(c.changed()))
            .collect::<Vec<_>>();
        tokio::select! {
            _ = futures::future::select_all(changes) => {}
            _ = shared.health_changed.notified() => {}
        }
    }
}
