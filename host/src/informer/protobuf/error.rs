//! Why a protobuf answer could not be read.

use super::wire::WireError;

/// Why a protobuf answer could not be read. Each one makes the reflector read its informer as
/// JSON instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bytes that are not a readable message, or a string that is not UTF-8.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A field the tables do not know, as a newer server's new field would be.
    #[error("field {number} of {message} is not known to this host (a newer API server?)")]
    UnknownField {
        /// The message's Go type.
        message: &'static str,
        /// The field number.
        number: u32,
    },
    /// A singular field sent twice, which the server never does.
    #[error("field {field} of {message} appears twice")]
    Repeated {
        /// The message's Go type.
        message: &'static str,
        /// The field's JSON name.
        field: &'static str,
    },
    /// A field whose wire type does not fit its type.
    #[error("field {field} of {message} has the wrong wire type")]
    WireType {
        /// The message's Go type.
        message: &'static str,
        /// The field's JSON name.
        field: &'static str,
    },
    /// A time out of the range RFC 3339 can show.
    #[error("time {0} s since 1970 is out of range")]
    BadTime(i64),
    /// A `fieldsV1` that is not JSON.
    #[error("fieldsV1 is not JSON: {0}")]
    BadJson(#[source] serde_json::Error),
    /// An object without `metadata`.
    #[error("an object has no metadata")]
    NoMetadata,
    /// A body without the `k8s\0` prefix.
    #[error("the body does not start with the Kubernetes protobuf magic")]
    NoMagic,
    /// A body compressed or otherwise encoded inside its envelope.
    #[error("unsupported content encoding {0:?}")]
    ContentEncoding(String),
    /// A LIST that answered with something other than a list.
    #[error("LIST returned a {0}, not a list")]
    NotAList(String),
    /// A watch event without an object.
    #[error("a watch event has no object")]
    NoObject,
    /// A watch event whose object is not the informer's kind.
    #[error("a watch event carries a {got}, not a {want}")]
    OtherKind {
        /// The informer's kind.
        want: String,
        /// What came.
        got: String,
    },
    /// The object is not one the store can key.
    #[error(transparent)]
    Object(#[from] crate::object::Error),
}
