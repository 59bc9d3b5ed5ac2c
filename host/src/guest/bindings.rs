//! The one `bindgen!` for the whole host: Rust types and traits for `wit/runtime.wit`.
//!
//! Every import is `async` (writes and read-your-writes waits do I/O) and `trappable`: an outer
//! `Err` from a host function traps the guest (a broken limit, a host bug), while the inner WIT
//! `result` is an answer the guest can handle. Each host function chooses on purpose.

use crate::object::KindName;

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

/// Shown as [`KindName`] shows a kind: `v1/ConfigMap`, `apps/v1/Deployment`. Maps key by the
/// `Gvk` itself (it is `Hash` and `Eq`), never by this text.
impl std::fmt::Display for Gvk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.name().fmt(f)
    }
}

impl Gvk {
    /// The kind as shown to people.
    pub fn name(&self) -> KindName<'_> {
        KindName {
            group: &self.group,
            version: &self.version,
            kind: &self.kind,
        }
    }

    /// The kind `kind` of `group/version` (`""` for the core group).
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_shown_as_grants_spell_it() {
        assert_eq!(Gvk::new("", "v1", "ConfigMap").to_string(), "v1/ConfigMap");
        assert_eq!(
            Gvk::new("apps", "v1", "Deployment").to_string(),
            "apps/v1/Deployment"
        );
    }
}
