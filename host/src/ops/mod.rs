//! Operating the host: the endpoints (`/healthz`, `/readyz`, `/metrics`, `/status`) and the
//! client `reconciled status` reads them with, the metrics exposition, the typed status
//! document, and the export of traces.
//!
//! These are the plumbing and the schemas; the supervisor fills them in, which is why this
//! stage comes before it.

pub mod http;
pub mod metrics;
pub mod status;
pub mod traces;
