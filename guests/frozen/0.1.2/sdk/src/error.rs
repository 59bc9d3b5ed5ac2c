//! The error every host call can return, and the crate's `Result`.

use std::fmt;

/// What went wrong in a host call: the WIT `error` variant.
///
/// Each case carries a human-readable message; match on the case, not the text. The `Display`
/// form is `<case>: <message>`, with the case spelled as in the WIT (`not-found`, ...).
///
/// The layout must stay identical to the WIT variant: the generated bindings lift and lower
/// this type directly.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The object does not exist (in the cache, or on the API server for writes).
    NotFound(String),
    /// The write lost a race: the object changed since it was read (HTTP 409). Also what
    /// creating an object that already exists answers.
    Conflict(String),
    /// RBAC (the host's own, or the guest's grant) denies this.
    Forbidden(String),
    /// The API server rejected the object (HTTP 422), or the arguments are malformed. The SDK
    /// also uses it when an object cannot be serialized.
    Invalid(String),
    /// The answer would exceed this reconcile's byte budget, or the object is too big.
    TooLarge(String),
    /// The kind was not declared in `describe`; declare it under `for`, `owns` or `watches`.
    NotDeclared(String),
    /// A field match names a field without an index; declare the index in `describe`.
    UnindexedField(String),
    /// A bounded wait ran out, e.g. read-your-writes waiting for the cache to catch up.
    Timeout(String),
    /// Anything else. The SDK also uses it when the host's JSON does not deserialize into the
    /// requested Rust type.
    Other(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The case name as the WIT spells it, e.g. `"not-found"` or `"unindexed-field"`.
    pub fn case(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "not-found",
            Error::Conflict(_) => "conflict",
            Error::Forbidden(_) => "forbidden",
            Error::Invalid(_) => "invalid",
            Error::TooLarge(_) => "too-large",
            Error::NotDeclared(_) => "not-declared",
            Error::UnindexedField(_) => "unindexed-field",
            Error::Timeout(_) => "timeout",
            Error::Other(_) => "other",
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound(m)
            | Error::Conflict(m)
            | Error::Forbidden(m)
            | Error::Invalid(m)
            | Error::TooLarge(m)
            | Error::NotDeclared(m)
            | Error::UnindexedField(m)
            | Error::Timeout(m)
            | Error::Other(m) => m,
        }
    }

    /// Whether this is [`Error::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }

    /// Whether this is [`Error::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.case(), self.message())
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_wit_case_then_message() {
        let e = Error::UnindexedField("declare field index data.x on v1/ConfigMap".into());
        assert_eq!(e.case(), "unindexed-field");
        assert_eq!(
            e.to_string(),
            "unindexed-field: declare field index data.x on v1/ConfigMap"
        );
        assert!(Error::NotFound(String::new()).is_not_found());
        assert!(!Error::Conflict(String::new()).is_not_found());
    }
}
