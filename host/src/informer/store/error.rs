//! What can go wrong declaring indexes and querying a store.

/// Errors from declaring indexes and querying the store.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A field match on a field that has no index.
    #[error(
        "no index for field {field:?}: declare the field index {field:?} for this kind (declared field indexes: {declared:?}); a full scan is never done silently"
    )]
    UnindexedField {
        /// The field asked for.
        field: String,
        /// The field indexes that exist.
        declared: Vec<String>,
    },
    /// An index with this name already exists.
    #[error("field index {0:?} is already declared")]
    DuplicateIndex(String),
    /// The index path is empty or malformed.
    #[error("field index path {0:?} is not a dotted JSON path like \"spec.nodeName\"")]
    BadIndexPath(String),
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
