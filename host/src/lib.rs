//! reconciled: a WebAssembly-hosted reconciler runtime for Kubernetes.
//!
//! The modules follow the data path:
//! reflector → delta FIFO → store/indexes → handlers → work queue → worker → guest → host imports.

// Resolving kinds and checking access, before anything is watched.
pub mod discovery;
pub mod preflight;

// Informer core.
pub mod backoff;
pub mod delta_fifo;
pub mod events;
pub mod factory;
pub mod informer;
pub mod object;
pub mod reflector;
pub mod selector;
pub mod store;

// Controller: events to keys to reconciles.
pub mod controller;
pub mod handlers;
pub mod work_queue;

// The guest: runtime, bindings, what it may call, and under which rules.
pub mod bindings;
pub mod grant;
pub mod guest;
pub mod imports;
pub mod read_your_writes;

// Where modules come from, and the supervisor that loads, swaps and unloads them.
pub mod artifact_cache;
pub mod sources;
pub mod supervisor;

// Operating the host: the config file, status, metrics and probes.
pub mod config;
pub mod http;
pub mod metrics;
pub mod status;
