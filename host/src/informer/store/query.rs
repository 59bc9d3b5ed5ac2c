//! What to list from a store.

use crate::selector::LabelSelector;

/// What to list. Every condition narrows the result (they are ANDed).
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Only objects in this namespace.
    pub namespace: Option<String>,
    /// Only objects whose labels match.
    pub labels: LabelSelector,
    /// Only objects whose field (a declared field index, or `metadata.name` /
    /// `metadata.namespace`) has exactly this value.
    pub fields: Vec<(String, String)>,
    /// Only objects with an owner reference to this UID.
    pub owner_uid: Option<String>,
}
