//! What can be wrong with a selector, and the helpers that keep its messages short.

use serde_json::Value;

/// Errors from parsing a selector, in either the string syntax or the API's structured form.
///
/// Offending keys, values and tokens are shortened to 64 characters, so a hostile megabyte-long
/// selector cannot turn into a megabyte-long log line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The selector string does not follow the grammar.
    #[error("at byte {offset}: found {found}, expected {expected}")]
    Syntax {
        /// Byte offset of the offending token in the input.
        offset: usize,
        /// The offending token, quoted, or `end of input`.
        found: String,
        /// What the grammar allows at that point.
        expected: &'static str,
    },
    /// A `>` or `<` requirement: Kubernetes accepts them in list queries, but
    /// [`Operator`](super::Operator) has no numeric comparisons, so matching against the cache
    /// could not agree with the server.
    #[error(
        "at byte {offset}: operator '{operator}' is not supported; expected =, ==, !=, in or notin"
    )]
    UnsupportedOperator {
        /// Byte offset of the operator in the input.
        offset: usize,
        /// The operator as written.
        operator: &'static str,
    },
    /// A label key that Kubernetes would reject.
    #[error("invalid label key {key:?} at {at}: {reason}")]
    InvalidKey {
        /// Where: `byte N` in a selector string, or a path such as `matchExpressions[0].key`.
        at: String,
        /// The offending key.
        key: String,
        /// What is wrong with it and what is expected instead.
        reason: String,
    },
    /// A label value that Kubernetes would reject.
    #[error("invalid value {value:?} for label key {key:?} at {at}: {reason}")]
    InvalidValue {
        /// Where: `byte N` in a selector string, or a path such as `matchLabels[app]`.
        at: String,
        /// The key the value belongs to.
        key: String,
        /// The offending value.
        value: String,
        /// What is wrong with it and what is expected instead.
        reason: String,
    },
    /// The structured (API) form of a label selector has the wrong JSON shape.
    #[error("invalid label selector at {at}: expected {expected}, found {found}")]
    Shape {
        /// A path such as `matchExpressions[1].operator`.
        at: String,
        /// What the API schema allows there.
        expected: &'static str,
        /// What was there instead.
        found: String,
    },
    /// A `matchExpressions` entry whose operator and values do not fit together.
    #[error("invalid label selector at {at}: {reason}")]
    Expression {
        /// A path such as `matchExpressions[0].values`.
        at: String,
        /// What is wrong and what is expected instead.
        reason: String,
    },
    /// A field selector term with no `=`, `==` or `!=` in it.
    #[error(
        "field selector term {term:?} at byte {offset} has no operator; expected <field>=<value>, <field>==<value> or <field>!=<value>"
    )]
    FieldTerm {
        /// Byte offset of the term in the input.
        offset: usize,
        /// The offending term.
        term: String,
    },
    /// A field name that no API server accepts.
    #[error("invalid field name {field:?} at byte {offset}: {reason}")]
    InvalidField {
        /// Byte offset of the field name in the input.
        offset: usize,
        /// The offending field name.
        field: String,
        /// What is wrong with it and what is expected instead.
        reason: String,
    },
    /// A backslash in a field selector value that does not escape `\`, `,` or `=`.
    #[error(
        "invalid escape {sequence:?} at byte {offset} in a field selector value; expected \\\\, \\, or \\="
    )]
    InvalidEscape {
        /// Byte offset of the backslash in the input.
        offset: usize,
        /// The sequence as written (a lone `\` when the input ends after it).
        sequence: String,
    },
    /// A bare `=` in a field selector value; the API server rejects it unless escaped.
    #[error(
        "unescaped {ch:?} at byte {offset} in a field selector value; expected it escaped as \\{ch}"
    )]
    UnescapedChar {
        /// Byte offset of the character in the input.
        offset: usize,
        /// The character.
        ch: char,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(super) fn shape(at: &str, expected: &'static str, found: &Value) -> Error {
    let found = crate::object::kind_of(found);
    Error::Shape {
        at: at.to_string(),
        expected,
        found: found.to_string(),
    }
}

/// The first 64 characters of `s`, so errors stay readable whatever the input.
pub(super) fn snippet(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}
