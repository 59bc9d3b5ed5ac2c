//! What the offline server records of a guest's requests (its writes and Events, the same
//! records a live recording keeps, and how many times each object came and went), the faults a
//! fixture imposes on them, a user's changes, and what `--chaos` imposes on a call.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::guest::tape::{Event, Write, shown};

use crate::offline::kinds::Kind;
use crate::offline::semantics::{Refusal, meta};

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

/// An object named by kind and key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectName {
    /// `v1`, `apps/v1`…
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Empty for cluster-scoped kinds.
    #[serde(default)]
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// What `--chaos` imposes on one call: the host crashing after a write, an answer in place of
/// the modelled one, the watch holding back the call's own writes. Writes are counted from 1
/// per call, Events aside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interference {
    /// Everything after this write (reads, writes, Events) is refused, as if the host had died.
    pub crash_after: Option<u32>,
    /// This write gets this answer (a [`Fault`] answer: `conflict`, `forbidden`…).
    pub answer: Option<(u32, String)>,
    /// The caches see none of the call's writes until the call ends.
    pub hold_feed: bool,
}

/// What the interference of one call came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfered {
    /// The writes the call made (answered or refused).
    pub writes: u32,
    /// Whether the host "died" during the call: its outcome is not the guest's to give.
    pub crashed: bool,
    /// The write that got the injected answer, and the answer's error case.
    pub injected: Option<(u32, String)>,
}

/// How many times an object was created and deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Lifecycle {
    /// Times it came into being (a create, or an apply of an absent object).
    pub created: u32,
    /// Times it went (a delete, or its last finalizer removed while being deleted).
    pub deleted: u32,
}

/// A change made by someone other than the guest: a user's edit or delete.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Change {
    /// Merged onto the stored object (a merge patch of everything given), or created.
    Apply(Value),
    /// Deleted (marked for deletion if it has finalizers).
    Delete(ObjectName),
}

/// How [`Server::objects`](crate::offline::server::Server::objects) names an object: `apiVersion/Kind namespace/name`, or
/// `apiVersion/Kind name` when it has no namespace.
pub fn object_name(v: &Value) -> String {
    let (namespace, name) = (meta(v, "namespace"), meta(v, "name"));
    let at = if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    };
    format!(
        "{}/{} {at}",
        v["apiVersion"].as_str().unwrap_or(""),
        v["kind"].as_str().unwrap_or("")
    )
}

/// The apiVersion, kind, namespace and name of an [`object_name`].
pub fn split_key(key: &str) -> Option<(&str, &str, &str, &str)> {
    let (kind, at) = key.split_once(' ')?;
    let (api_version, kind) = kind.rsplit_once('/')?;
    let (namespace, name) = at.split_once('/').unwrap_or(("", at));
    Some((api_version, kind, namespace, name))
}
