//! reconciled: a WebAssembly-hosted reconciler runtime for Kubernetes.
//!
//! The modules follow the data path:
//! reflector → delta FIFO → store/indexes → handlers → work queue → worker → guest → host imports.

pub mod backoff;
pub mod delta_fifo;
pub mod discovery;
pub mod factory;
pub mod informer;
pub mod object;
pub mod preflight;
pub mod reflector;
pub mod selector;
pub mod store;
