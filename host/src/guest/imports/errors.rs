//! How the API server's answers reach a guest: which WIT error each failure is, whose fault it
//! is, and what a denial says to a guest acting as a ServiceAccount.

use crate::guest::bindings::GuestError;
use crate::guest::identity::{self, Rule, ServiceAccount};

/// Whether an API request failed because of the cluster rather than because of what was asked:
/// the connection (transport errors), the server (5xx) or its flow control (429).
pub(super) fn is_cluster_failure(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Maps an API server error to the WIT variant the guest matches on.
pub fn api_error(e: kube::Error) -> GuestError {
    match e {
        kube::Error::Api(s) => {
            let msg = format!("{} ({})", s.message, s.reason);
            match s.code {
                404 => GuestError::NotFound(msg),
                409 => GuestError::Conflict(msg),
                403 => GuestError::Forbidden(msg),
                400 | 422 => GuestError::Invalid(msg),
                // A body, URL or headers the server would not read.
                413 | 414 | 431 => GuestError::TooLarge(msg),
                504 => GuestError::Timeout(msg),
                _ => GuestError::Other(format!("HTTP {}: {msg}", s.code)),
            }
        }
        other => GuestError::Other(other.to_string()),
    }
}

/// The error a guest sees for a failed request. Acting as `account`, a 403 names it and
/// `needed`, the rule to add (see [`identity::forbidden`]); anything else is [`api_error`].
pub fn guest_error(
    account: Option<&ServiceAccount>,
    needed: Option<&Rule>,
    e: kube::Error,
) -> GuestError {
    match (account, e) {
        (Some(account), kube::Error::Api(s)) if s.code == 403 => {
            GuestError::Forbidden(identity::forbidden(account, needed, &s.message))
        }
        (_, e) => api_error(e),
    }
}

/// The message a [`GuestError`] carries.
pub fn message(e: &GuestError) -> &str {
    match e {
        GuestError::NotFound(m)
        | GuestError::Conflict(m)
        | GuestError::Forbidden(m)
        | GuestError::Invalid(m)
        | GuestError::TooLarge(m)
        | GuestError::NotDeclared(m)
        | GuestError::UnindexedField(m)
        | GuestError::Timeout(m)
        | GuestError::Other(m) => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("deployments.apps \"web\" is forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        )
    }

    #[test]
    fn a_denial_names_the_service_account_only_when_the_guest_acts_as_one() {
        let sa = ServiceAccount::parse("team-a/reconciled-guest").unwrap();
        let rule = Rule::of_request(
            &http::Method::DELETE,
            "/apis/apps/v1/namespaces/team-a/deployments/web",
        );
        let GuestError::Forbidden(m) = guest_error(Some(&sa), rule.as_ref(), forbidden()) else {
            panic!("not forbidden");
        };
        assert!(
            m.contains("team-a/reconciled-guest") && m.contains(r#"verbs:["delete"]"#),
            "{m}"
        );
        let GuestError::Forbidden(plain) = guest_error(None, rule.as_ref(), forbidden()) else {
            panic!("not forbidden");
        };
        assert!(!plain.contains("ServiceAccount"), "{plain}");
    }
}
