//! reconciled: a WebAssembly-hosted reconciler runtime for Kubernetes.
//!
//! The modules follow the data path:
//! reflector → delta FIFO → store/indexes → handlers → work queue → worker → guest → host imports.

pub mod object;
pub mod delta_fifo;
pub mod selector;
