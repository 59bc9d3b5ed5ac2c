//! Operating the host: the endpoints (`/healthz`, `/readyz`, `/metrics`, `/status`) and the
//! client `reconciled status` reads them with, the metrics exposition, and the typed status
//! document.
//!
//! These are the plumbing and the schemas; the supervisor fills them in, which is why this
//! stage comes before it.

pub mod http;
pub mod metrics;
pub mod status;
