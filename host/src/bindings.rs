//! The one `bindgen!` for the whole host: Rust types and traits for `wit/runtime.wit`.
//!
//! Every import is `async` (writes and read-your-writes waits do I/O) and `trappable`: an outer
//! `Err` from a host function traps the guest (a broken limit, a host bug), while the inner WIT
//! `result` is an answer the guest can handle. Each host function chooses on purpose.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "reconciler",
    imports: { default: async | trappable },
    exports: { default: async },
    additional_derives: [PartialEq, Eq, Hash],
});

// `self::`: in doc-tests this crate is also `reconciled`, which would make the path ambiguous.
pub use self::reconciled::runtime::declaration::{Consistency, Mapping};

/// The WIT `error` variant, named for what it is on the host side: an answer for the guest.
pub type GuestError = Error;

// `types` and `declaration` hold only types, but bindgen still generates a `Host` trait for
// every imported interface.
impl self::reconciled::runtime::types::Host for crate::imports::HostState {}
impl self::reconciled::runtime::declaration::Host for crate::imports::HostState {}
