//! Discovery: resolve any GroupVersionKind, CRDs included, to the resource the API serves.

use kube::core::GroupVersionKind;

use crate::backoff::Failure;

/// Errors from resolving a kind.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server does not serve this kind (yet): a missing CRD, a typo, a removed version.
    #[error(
        "kind {gvk} is not served by the API server ({detail}); install its CRD or fix the group/version/kind"
    )]
    KindNotFound {
        /// `group/version, Kind=...`.
        gvk: String,
        /// What discovery said.
        detail: String,
    },
    /// Discovery itself failed (connection, auth).
    #[error("discovery of {gvk} failed: {source}")]
    Request {
        /// `group/version, Kind=...`.
        gvk: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// What this error says about the API server: a kind it does not serve is an answer; a
    /// failed request may mean it could not be reached, and is then worth retrying as soon as
    /// it answers.
    pub fn failure(&self) -> Failure {
        match self {
            Error::KindNotFound { .. } => Failure::Refused,
            Error::Request { source, .. } => Failure::of(source),
        }
    }
}

/// A resolved, served resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// API group, empty for the core group.
    pub group: String,
    /// Version.
    pub version: String,
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// The plural resource name used in URLs and RBAC rules.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl Resource {
    /// The collection URL, for one namespace or (`None`) all of them.
    ///
    /// For a cluster-scoped resource the namespace is ignored.
    pub fn url_path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{base}/namespaces/{ns}/{}", self.plural),
            _ => format!("{base}/{}", self.plural),
        }
    }
}

/// Formats a GVK the way error messages show it.
pub fn gvk_string(gvk: &GroupVersionKind) -> String {
    crate::object::KindName {
        group: &gvk.group,
        version: &gvk.version,
        kind: &gvk.kind,
    }
    .to_string()
}

/// Asks the API server which resource serves `gvk`.
pub async fn resolve(client: &kube::Client, gvk: &GroupVersionKind) -> Result<Resource> {
    match kube::discovery::pinned_kind(client, gvk).await {
        Ok((ar, caps)) => Ok(Resource {
            group: ar.group,
            version: ar.version,
            api_version: ar.api_version,
            kind: ar.kind,
            plural: ar.plural,
            namespaced: matches!(caps.scope, kube::discovery::Scope::Namespaced),
        }),
        Err(kube::Error::Discovery(e)) => Err(Error::KindNotFound {
            gvk: gvk_string(gvk),
            detail: e.to_string(),
        }),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(Error::KindNotFound {
            gvk: gvk_string(gvk),
            detail: s.message.clone(),
        }),
        Err(source) => Err(Error::Request {
            gvk: gvk_string(gvk),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, namespaced: bool) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            kind: "Thing".into(),
            plural: "things".into(),
            namespaced,
        }
    }

    #[test]
    fn url_paths() {
        assert_eq!(
            res("", true).url_path(Some("a")),
            "/api/v1/namespaces/a/things"
        );
        assert_eq!(res("", true).url_path(None), "/api/v1/things");
        assert_eq!(
            res("x.io", true).url_path(Some("a")),
            "/apis/x.io/v1/namespaces/a/things"
        );
        assert_eq!(
            res("x.io", false).url_path(Some("a")),
            "/apis/x.io/v1/things"
        );
    }
}
