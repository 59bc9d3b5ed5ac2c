//! Whether the host may act as the ServiceAccount a Reconciler names, asked of the API server
//! before anything loads: a ServiceAccount outside the host's impersonation rule is a spec the
//! host cannot serve, said in `Accepted`, not a load that fails later with `forbidden`.
//!
//! Where it may surprise:
//! - Either rule will do: constrained impersonation (`impersonate:serviceaccount` on
//!   `authentication.k8s.io` `serviceaccounts`, Kubernetes 1.35+) or the legacy `impersonate`
//!   on `serviceaccounts`; the per-request `impersonate-on:` rules are not checked here.
//! - An answer is kept for [`TTL`]: a rule added to the host's ClusterRole is seen at the
//!   Reconciler's next change after that. A review that fails or takes over 10 s (the API
//!   server unreachable) is taken as allowed for a short while: the loads that follow then say
//!   what is wrong.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use super::spec::Refusal;

/// How long an answer is kept.
pub(crate) const TTL: Duration = Duration::from_secs(60);

/// How long one review may take before it counts as failed.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a failed review counts as allowed.
const FAILED_TTL: Duration = Duration::from_secs(5);

/// The answers so far, by (namespace, ServiceAccount name).
#[derive(Debug, Default)]
pub(crate) struct Checks {
    known: HashMap<(String, String), (Instant, Result<(), Refusal>)>,
    asking: HashSet<(String, String)>,
}

/// What is known of one ServiceAccount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Known {
    /// The answer, still fresh.
    Answer(Result<(), Refusal>),
    /// Not known (or stale): ask, unless already asking.
    Ask,
    /// Being asked.
    Asking,
}

impl Checks {
    /// What is known of `namespace/name` at `now`; an `Ask` marks it as being asked.
    pub(crate) fn look(&mut self, namespace: &str, name: &str, now: Instant) -> Known {
        let id = (namespace.to_string(), name.to_string());
        if let Some((until, answer)) = self.known.get(&id)
            && *until > now
        {
            return Known::Answer(answer.clone());
        }
        if self.asking.insert(id) {
            Known::Ask
        } else {
            Known::Asking
        }
    }

    /// Records the answer for `namespace/name`, got at `now`.
    pub(crate) fn answer(&mut self, namespace: &str, name: &str, answer: Answer, now: Instant) {
        let id = (namespace.to_string(), name.to_string());
        self.asking.remove(&id);
        // Tenants pick the names: what is stale goes, so the map holds only what is in use.
        self.known.retain(|_, (until, _)| *until > now);
        let (ttl, verdict) = match answer {
            Answer::Allowed => (TTL, Ok(())),
            Answer::Denied => (TTL, Err(refusal(namespace, name))),
            Answer::Failed => (FAILED_TTL, Ok(())),
        };
        self.known.insert(id, (now + ttl, verdict));
    }
}

/// What the API server said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Allowed,
    Denied,
    Failed,
}

/// The refusal for a ServiceAccount the host may not act as.
fn refusal(namespace: &str, name: &str) -> Refusal {
    Refusal {
        reason: "ServiceAccountNotAllowed",
        message: format!(
            "the host may not act as ServiceAccount {namespace}/{name} (spec.serviceAccountName): the host's operator adds {name:?} to resourceNames of the impersonate:serviceaccount rule of ClusterRole reconciled-host (deploy/reconciled.yaml); or name a ServiceAccount the host may act as, such as reconciled-guest"
        ),
    }
}

/// Asks whether the host (`client`'s identity) may impersonate `namespace/name`, by either
/// rule.
pub(crate) async fn ask(client: &kube::Client, namespace: &str, name: &str) -> Answer {
    let review = |group: &str, verb: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_string()),
                resource: Some("serviceaccounts".into()),
                verb: Some(verb.to_string()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api = Api::<SelfSubjectAccessReview>::all(client.clone());
    let mut failed = false;
    for (group, verb) in [
        ("authentication.k8s.io", "impersonate:serviceaccount"),
        ("", "impersonate"),
    ] {
        let asked = tokio::time::timeout(
            REVIEW_TIMEOUT,
            api.create(&PostParams::default(), &review(group, verb)),
        )
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(
                format!("no answer within {REVIEW_TIMEOUT:?}").into(),
            ))
        });
        match asked {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => return Answer::Allowed,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(serviceaccount = %format!("{namespace}/{name}"), "cannot review whether the host may act as the ServiceAccount; taken as allowed for now: {e}");
                failed = true;
            }
        }
    }
    if failed {
        Answer::Failed
    } else {
        Answer::Denied
    }
}

/// Checks shared by the loop and the tasks that ask.
pub(crate) type Shared = Arc<Mutex<Checks>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_question_per_serviceaccount_and_the_answer_is_kept_for_a_while() {
        let mut checks = Checks::default();
        let t0 = Instant::now();
        assert_eq!(checks.look("team-a", "sa", t0), Known::Ask);
        assert_eq!(checks.look("team-a", "sa", t0), Known::Asking, "asked once");
        checks.answer("team-a", "sa", Answer::Denied, t0);
        let Known::Answer(Err(r)) = checks.look("team-a", "sa", t0 + Duration::from_secs(1)) else {
            panic!("denied")
        };
        assert_eq!(r.reason, "ServiceAccountNotAllowed");
        assert!(
            r.message.contains("ServiceAccount team-a/sa")
                && r.message
                    .contains("impersonate:serviceaccount rule of ClusterRole reconciled-host"),
            "{}",
            r.message
        );
        assert_eq!(
            checks.look("team-a", "sa", t0 + TTL),
            Known::Ask,
            "asked again once stale"
        );
    }

    #[test]
    fn a_failed_review_allows_for_a_short_while_only() {
        let mut checks = Checks::default();
        let t0 = Instant::now();
        checks.look("team-a", "sa", t0);
        checks.answer("team-a", "sa", Answer::Failed, t0);
        assert_eq!(checks.look("team-a", "sa", t0), Known::Answer(Ok(())));
        assert_eq!(checks.look("team-a", "sa", t0 + FAILED_TTL), Known::Ask);
    }
}
