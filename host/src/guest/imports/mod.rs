//! Host imports: what a guest may call, one file per WIT interface, and the state they share,
//! in wasmtime-wasi's shape: [`ctx`] is what every call of one guest version shares (its
//! client, grant, declared kinds, limits), built once; [`view`] is the store data each call
//! borrows ([`HostState`]: WASI, budgets, time accounting); [`access`] is the check every call
//! makes before it touches a kind, a namespace or a name.
//!
//! Decided per failure: a broken *limit* (too many host calls) traps the guest, because it is
//! abuse and the reconcile must stop; everything the guest can reasonably handle (not found,
//! conflict, forbidden, too large, undeclared kind, timeout) is a WIT `error` it receives.
//!
//! Every argument is guest-controlled and the guest is hostile: names and namespaces are checked
//! as Kubernetes checks them ([`crate::names`]), path segments are percent-encoded, and nothing
//! built from guest data is unwrapped. Bad input is `invalid` or `too-large`, never `other`, never a
//! panic. Every API request goes through [`HostState::send`], which measures it.

pub mod access;
pub mod api;
pub mod cache;
pub mod client;
pub mod ctx;
pub mod errors;
mod limiter;
pub mod limits;
pub mod log;
pub mod metrics;
mod notes;
pub mod settings;
pub mod trace;
pub mod view;

pub use access::{Access, check_access};
pub use ctx::{Declared, GuestContext};
pub use errors::api_error;
pub use limiter::Limiter;
pub use limits::Limits;
pub use metrics::Metrics;
pub use view::{HostState, request};
