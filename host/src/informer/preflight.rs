//! RBAC preflight: ask SelfSubjectAccessReview for `list` and `watch` before opening a watch, so
//! missing permissions surface as a named rule instead of a silent, forever-syncing cache.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::backoff::Failure;
use crate::informer::discovery::Resource;

/// Errors from the preflight check.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host's identity lacks a verb; the message is the fix.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The review itself could not be made.
    #[error("cannot check RBAC for {resource}: {source}")]
    Request {
        /// The resource being checked.
        resource: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// What this error says about the API server: a denial is an answer; a failed review may
    /// mean the server could not be reached, and is then worth retrying as soon as it answers.
    pub fn failure(&self) -> Failure {
        match self {
            Error::Denied(_) => Failure::Refused,
            Error::Request { source, .. } => Failure::of(source),
        }
    }
}

/// A denied preflight: which verbs are missing, where, and the rule that would grant them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Denied {
    /// The verbs the host may not use (a subset of `list`, `watch`).
    pub verbs: Vec<String>,
    /// API group of the resource, empty for core.
    pub group: String,
    /// The plural resource name.
    pub resource: String,
    /// The namespace, or `None` for a cluster-wide watch.
    pub namespace: Option<String>,
    /// The authorizer's reason, if it gave one.
    pub reason: String,
}

impl Denied {
    /// `forbidden: cannot watch configmaps in namespace "a"; add rule {...} to ...`.
    pub fn message(&self) -> String {
        let verbs = self.verbs.join(", ");
        let quoted: Vec<String> = ["list", "watch"].iter().map(|v| format!("{v:?}")).collect();
        let rule = format!(
            "{{apiGroups:[{:?}], resources:[{:?}], verbs:[{}]}}",
            self.group,
            self.resource,
            quoted.join(",")
        );
        let (place, holder) = match &self.namespace {
            Some(ns) => (
                format!("in namespace {ns:?}"),
                format!(
                    "a Role in namespace {ns:?} (or the ClusterRole) bound to the host's identity"
                ),
            ),
            None => (
                "cluster-wide".to_string(),
                "the host's ClusterRole".to_string(),
            ),
        };
        let reason = if self.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.reason)
        };
        format!(
            "forbidden: cannot {verbs} {} {place}{reason}; add rule {rule} to {holder}",
            self.resource
        )
    }
}

/// Checks that the client may `list` and `watch` `resource` in `namespace` (`None`: all
/// namespaces, or a cluster-scoped resource).
pub async fn check_list_watch(
    client: &kube::Client,
    resource: &Resource,
    namespace: Option<&str>,
) -> Result<()> {
    let namespace = namespace.filter(|_| resource.namespaced);
    let api = Api::<SelfSubjectAccessReview>::all(client.clone());
    let mut missing = Vec::new();
    let mut reason = String::new();
    for verb in ["list", "watch"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(resource.group.clone()),
                    resource: Some(resource.plural.clone()),
                    namespace: namespace.map(str::to_string),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| Error::Request {
                resource: resource.plural.clone(),
                source,
            })?;
        let status = answer.status.unwrap_or_default();
        if !status.allowed {
            missing.push(verb.to_string());
            if let Some(r) = status.reason.filter(|r| !r.is_empty()) {
                reason = r;
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Denied {
        verbs: missing,
        group: resource.group.clone(),
        resource: resource.plural.clone(),
        namespace: namespace.map(str::to_string),
        reason,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_names_the_verb_the_place_and_the_rule() {
        let d = Denied {
            verbs: vec!["watch".into()],
            group: String::new(),
            resource: "configmaps".into(),
            namespace: Some("team-a".into()),
            reason: String::new(),
        };
        assert_eq!(
            d.to_string(),
            r#"forbidden: cannot watch configmaps in namespace "team-a"; add rule {apiGroups:[""], resources:["configmaps"], verbs:["list","watch"]} to a Role in namespace "team-a" (or the ClusterRole) bound to the host's identity"#
        );
    }
}
