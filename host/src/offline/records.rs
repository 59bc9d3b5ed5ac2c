//! What the offline server records of a guest's requests (its writes and Events, the same
//! records a live recording keeps) and the faults a fixture imposes on them.

use serde::{Deserialize, Serialize};

pub use crate::guest::tape::{Event, Write, shown};

use crate::offline::kinds::Kind;
use crate::offline::semantics::Refusal;

/// An answer a fixture imposes on matching requests instead of the modelled one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The verb (as in [`Write::verb`], or `get`, `list`, `event`); absent: every write.
    #[serde(default)]
    pub verb: Option<String>,
    /// The kind (`ConfigMap`, or `v1/ConfigMap`); absent: any.
    #[serde(default)]
    pub kind: Option<String>,
    /// The namespace; absent: any.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The name; absent: any.
    #[serde(default)]
    pub name: Option<String>,
    /// `status` to match only writes to the status subresource; absent: either.
    #[serde(default)]
    pub subresource: Option<String>,
    /// What the server answers: `conflict`, `forbidden`, `not-found`, `already-exists`,
    /// `invalid`, `too-many-requests`, `unavailable` or `timeout`.
    pub answer: String,
    /// How many matching requests get it; absent: all of them.
    #[serde(default)]
    pub times: Option<u32>,
    /// How many matching requests are answered as modelled before this fault starts \[0\].
    #[serde(default)]
    pub after: u32,
}

/// A fixture's fault `answer` that names no refusal the server models.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "fault answer {0:?} is not one of conflict, already-exists, forbidden, not-found, invalid, too-many-requests, unavailable, timeout"
)]
pub struct UnknownAnswer(String);

impl Fault {
    /// The refusal it answers with, or why the fixture's `answer` is not one.
    pub fn refusal(&self, what: &str) -> Result<Refusal, UnknownAnswer> {
        let (code, reason) = match self.answer.as_str() {
            "conflict" => (409, "Conflict"),
            "already-exists" => (409, "AlreadyExists"),
            "forbidden" => (403, "Forbidden"),
            "not-found" => (404, "NotFound"),
            "invalid" => (422, "Invalid"),
            "too-many-requests" => (429, "TooManyRequests"),
            "unavailable" => (503, "ServiceUnavailable"),
            "timeout" => (504, "Timeout"),
            other => return Err(UnknownAnswer(other.to_string())),
        };
        Ok(Refusal::new(
            code,
            reason,
            format!("{what}: {} (injected by the fixture)", reason),
        ))
    }

    pub(crate) fn matches(
        &self,
        verb: &str,
        kind: &Kind,
        namespace: &str,
        name: &str,
        subresource: Option<&str>,
    ) -> bool {
        let r = &kind.resource;
        let write = !matches!(verb, "get" | "list" | "event");
        self.verb.as_deref().map_or(write, |v| v == verb)
            && self
                .kind
                .as_deref()
                .is_none_or(|k| k == r.kind || k == format!("{}/{}", r.api_version, r.kind))
            && self.namespace.as_deref().is_none_or(|n| n == namespace)
            && self.name.as_deref().is_none_or(|n| n == name)
            && self
                .subresource
                .as_deref()
                .is_none_or(|s| Some(s) == subresource)
            && self.times != Some(0)
    }
}

/// The WIT error case a refusal becomes for the guest (see `guest::imports::errors`).
pub fn error_case(code: u16, reason: &str) -> &'static str {
    match (code, reason) {
        (404, _) => "not-found",
        (409, _) => "conflict",
        (403, _) => "forbidden",
        (400 | 422, _) => "invalid",
        (413 | 414 | 431, _) => "too-large",
        (504, _) => "timeout",
        _ => "other",
    }
}
