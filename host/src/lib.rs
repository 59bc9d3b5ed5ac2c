//! reconciled: a WebAssembly-hosted reconciler runtime for Kubernetes.
//!
//! The data path, and the folder each stage lives in:
//!
//! ```text
//! kube-apiserver
//!   │  informer/discovery, informer/preflight   resolve the kind, check list/watch RBAC
//!   ▼
//! informer/reflector     list (or WatchList), then watch from that resourceVersion
//! informer/protobuf      built-in kinds read as protobuf, written once as the store's JSON
//!   ▼
//! informer/delta_fifo    per-key ordered deltas; Replace tombstones what vanished
//!   ▼
//! informer/store         compact JSON shared by Arc, with namespace/label/owner/field indexes
//!   ▼
//! controller/handlers    for / owns / watches → primary keys
//!   ▼
//! controller/work_queue  dedupe, never two runs of one key, backoff, priority
//!   ▼
//! controller/worker      a supervised worker per slot: one reconcile at a time
//!   ▼
//! guest                  a fresh wasm store per call, bounded by limits
//!   ▼
//! guest/imports          cache get/list, client writes, api reads, log
//! ```
//!
//! Around it: `sources/` offer modules (a dev folder, tenants' ConfigMaps), `offline/` runs
//! guests against fixtures and recordings with no cluster, `replicas/` shares
//! guests between hosts through Leases, `supervisor/` loads,
//! swaps and unloads them, `ops/` serves the endpoints, and `config` reads the host config.
//! Each stage uses only itself and the stages above it in the list of modules below
//! (`tests/layout.rs` checks it).

// A function over 100 lines of code hides more than one job: each exception carries its reason
// (`#[expect(clippy::too_many_lines, reason = "…")]`), and `tests/layout.rs` checks it does.
#![warn(clippy::too_many_lines)]

// Shared nouns and helpers, used by every stage.
pub mod backoff;
pub mod events;
pub mod fnv;
pub mod names;
pub mod object;
pub mod selector;
pub mod text;

// The informer: discovery and preflight, reflector, delta FIFO, store, shared informers.
pub mod informer;

// The guest: runtime, bindings, grant, read-your-writes, and the imports it may call.
pub mod guest;

// Rollouts: what a progressive rollout asks for, which keys a share takes, and its step machine.
pub mod rollout;

// The controller: handlers, work queue, workers; one per loaded guest.
pub mod controller;

// Offline: guests run against fixtures and an in-memory API server (`reconciled test`).
pub mod offline;

// Replicas: guests sharded over several hosts through Leases; a guest runs where its shard is held.
pub mod replicas;

// Operating the host: endpoints, metrics exposition, the typed status document.
pub mod ops;

// The supervisor: loading, swapping and unloading guests; what it reports.
pub mod supervisor;

// Where modules come from.
pub mod sources;

// The host config file.
pub mod config;
