//! Write reconciled reconcilers in Rust: typed cache, client and `describe` helpers over the
//! `reconciled:runtime` WIT world.
//!
//! A guest is a `cdylib` crate built for `wasm32-wasip2`. It implements [`Reconciler`] on a unit
//! struct and exports it with [`export_reconciler!`]:
//!
//! ```ignore
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use reconciled_guest::{Description, Outcome, Reconciler, Request, Result, cache, describe};
//!
//! struct Hello;
//!
//! impl Reconciler for Hello {
//!     fn describe() -> Description {
//!         describe::<ConfigMap>().build()
//!     }
//!
//!     fn reconcile(req: Request) -> Result<Outcome> {
//!         let Some(cm) = cache::get_opt::<ConfigMap>(&req.namespace, &req.name)? else {
//!             return Ok(Outcome::Done);
//!         };
//!         reconciled_guest::info!("saw {} keys", cm.data.map_or(0, |d| d.len()));
//!         Ok(Outcome::Done)
//!     }
//! }
//!
//! reconciled_guest::export_reconciler!(Hello);
//! ```
//!
//! Objects cross the boundary as JSON; the helpers (de)serialize them with serde, so any
//! `k8s_openapi` type works, and so does a hand-written CRD type that implements [`Kind`].
#![warn(missing_docs)]

pub mod api;
pub mod cache;
pub mod client;
mod conditions;
mod describe;
mod error;
pub mod events;
mod finalizer;
mod kind;
pub mod log;
mod meta;
mod object;
mod owner;
mod settings;
pub mod trace;

/// The raw bindings generated from `wit/` (world `reconciler`).
///
/// Prefer the typed helpers in [`cache`], [`client`] and [`api`]; these are here for what they
/// do not cover, and for [`export_reconciler!`].
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all
)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "reconciler",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "reconciled_guest::bindings",
        // Our own `Error`, with a useful `Display`; same shape as the WIT variant.
        with: {
            "reconciled:runtime/types@0.1.3/error": crate::error::Error,
        },
        generate_all,
        additional_derives: [PartialEq, Eq],
        additional_type_attributes: {
            "reconciled:runtime/types@0.1.3/gvk": [#[derive(Hash, PartialOrd, Ord)]],
            "reconciled:runtime/types@0.1.3/request": [#[derive(Hash, PartialOrd, Ord)]],
        },
    });
}

pub use bindings::reconciled::runtime::cache::{ListOptions, ListPage};
pub use bindings::reconciled::runtime::client::EventType;
pub use bindings::reconciled::runtime::declaration::{Consistency, FieldIndex, Mapping, Watch};
pub use bindings::{Description, Gvk, Outcome, Request};
pub use client::Changed;
pub use conditions::{
    condition, find_condition, is_condition_true, remove_condition, set_condition,
};
pub use describe::{DescriptionBuilder, describe};
pub use error::{Error, Result};
pub use finalizer::{has_finalizer, with_finalizer};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
pub use kind::Kind;
pub use meta::Object;
pub use owner::{controller_of, controller_reference, is_controlled_by, set_controller_reference};
pub use settings::{settings, settings_json};
pub use trace::{Span, in_span};

// Re-exported so that guests use the same versions as the SDK.
pub use k8s_openapi;
pub use serde;
pub use serde_json;

/// A reconciler: what [`export_reconciler!`] exports as the component.
///
/// Each call may run in a fresh instance: keep no state in statics between calls (it may or may
/// not be there), and read everything from the cache.
pub trait Reconciler {
    /// What this guest reconciles, reads and needs. Called once at load time; build it with
    /// [`describe`]. A description that exceeds the operator's grant is refused at load time.
    fn describe() -> Description;

    /// Brings `req`'s object to its desired state. An `Err` is retried with backoff; a panic
    /// traps and fails this call only (it is retried with backoff too).
    ///
    /// The object may be gone: a reconcile also runs after a deletion, so treat not-found as
    /// "nothing to do" (see [`cache::get_opt`]).
    fn reconcile(req: Request) -> Result<Outcome>;

    /// For kinds watched with [`Mapping::GuestMap`]: the primaries that `object` (JSON, of kind
    /// `kind`) maps to. The default maps nothing.
    fn map(kind: Gvk, object: String) -> Vec<Request> {
        let _ = (kind, object);
        Vec::new()
    }
}

impl<T: Reconciler> bindings::Guest for T {
    fn describe() -> Description {
        T::describe()
    }

    fn reconcile(request: Request) -> Result<Outcome> {
        T::reconcile(request)
    }

    fn map(kind: Gvk, object: String) -> Vec<Request> {
        T::map(kind, object)
    }
}

/// Exports a [`Reconciler`] as this component's `describe`, `reconcile` and `map`.
///
/// Use it once, at the root of a `cdylib` crate, with the name of a type (not a path):
/// `reconciled_guest::export_reconciler!(MyReconciler);`
#[macro_export]
macro_rules! export_reconciler {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
    };
}

impl Request {
    /// A request for `namespace`/`name` (namespace empty for cluster-scoped kinds).
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Request {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl Outcome {
    /// Reconcile again after `after` (rounded down to whole milliseconds), even with no change.
    pub fn requeue_after(after: std::time::Duration) -> Self {
        Outcome::RequeueAfter(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
    }
}
