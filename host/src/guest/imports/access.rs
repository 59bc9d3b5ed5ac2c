//! Whether one call may touch a kind, a namespace and a name: the grant, the kind's scope, and
//! names checked as Kubernetes checks them.

use crate::guest::bindings::GuestError;
use crate::guest::grant::Grant;
use crate::informer::discovery::Resource;
use crate::names;

/// What a call does, for [`check_access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A cache read: namespace "" (a list) means every namespace the informers cover.
    CacheRead,
    /// An uncached read: namespace "" (a list) would be cluster-wide on the server, so only an
    /// unconfined guest may pass it.
    ServerRead,
    /// A write: a namespaced kind always needs its namespace.
    Write,
}

/// The grant and well-formedness checks of [`GuestContext::authorize`](super::ctx::GuestContext::authorize), without the context.
///
/// `namespace` and `name` are guest-controlled and end up in URLs and keys: both are validated
/// here as Kubernetes validates them (see [`names`]), so that no guest string can change which
/// resource a request addresses, and a name that can never exist is `invalid`, not not-found.
pub fn check_access(
    guest: &str,
    grant: &Grant,
    resource: &Resource,
    namespace: &str,
    name: Option<&str>,
    access: Access,
) -> Result<(), GuestError> {
    if let Some(name) = name {
        names::object_name(&resource.group, &resource.kind, name)
            .map_err(|e| GuestError::Invalid(e.to_string()))?;
    }
    if !resource.namespaced {
        // A cluster-scoped kind has no namespace to confine it: only an unconfined guest may
        // touch it, and a namespace argument would be silently ignored by the URL.
        if !namespace.is_empty() {
            return Err(GuestError::Invalid(format!(
                "{} is cluster-scoped: pass namespace \"\"",
                resource.kind
            )));
        }
        if grant.namespaces.is_some() {
            return Err(GuestError::Forbidden(format!(
                "guest {guest:?} is confined to namespaces {} and may not use cluster-scoped {}; grant it all namespaces in the host config",
                grant.describe_namespaces(),
                resource.plural
            )));
        }
        return Ok(());
    }
    if namespace.is_empty() {
        // Only a list may span namespaces: from the cache (limited to the informers' scope), or
        // from the server for an unconfined guest.
        return match (access, &grant.namespaces) {
            (Access::CacheRead, _) | (Access::ServerRead, None) if name.is_none() => Ok(()),
            _ => Err(GuestError::Invalid(format!(
                "{} is namespaced: name a namespace",
                resource.kind
            ))),
        };
    }
    names::namespace(namespace).map_err(|e| GuestError::Invalid(e.to_string()))?;
    if !grant.allows_namespace(namespace) {
        return Err(GuestError::Forbidden(format!(
            "guest {guest:?} is not granted namespace {namespace:?} (granted: {}); widen its grant in the host config",
            grant.describe_namespaces()
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A kind `Thing` of the core group, namespaced or not.
    pub(crate) fn res(namespaced: bool) -> Resource {
        Resource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Thing".into(),
            plural: "things".into(),
            namespaced,
        }
    }

    fn check(
        grant: &Grant,
        namespaced: bool,
        ns: &str,
        name: Option<&str>,
        access: Access,
    ) -> Result<(), GuestError> {
        check_access("g", grant, &res(namespaced), ns, name, access)
    }

    #[test]
    fn a_confined_guest_may_not_touch_cluster_scoped_kinds() {
        let confined = Grant::namespaces(["team-a"]);
        let err = check(&confined, false, "", Some("x"), Access::Write).unwrap_err();
        assert!(matches!(err, GuestError::Forbidden(_)), "{err:?}");
        // Passing a namespace for a cluster-scoped kind is refused, not silently ignored.
        let err = check(&confined, false, "team-a", Some("x"), Access::Write).unwrap_err();
        assert!(matches!(err, GuestError::Invalid(_)), "{err:?}");
        assert!(check(&Grant::default(), false, "", Some("x"), Access::Write).is_ok());
    }

    #[test]
    fn guest_strings_cannot_change_the_url() {
        let all = Grant::default();
        for ns in [
            "x/secrets/y?",
            "../kube-system",
            "A",
            "has space",
            "a%2Fb",
            "",
        ] {
            assert!(
                check(&all, true, ns, Some("z"), Access::Write).is_err(),
                "namespace {ns:?} accepted"
            );
        }
        for name in [
            "a/b", "..", ".", "a?b", "a#b", "a%2Fb", "", "a\\b", "a b", "a<b", "a>b", "a`b",
            "a\"b", "a\0b", "a\nb",
        ] {
            let err = check(&all, true, "ok", Some(name), Access::Write).unwrap_err();
            assert!(
                matches!(err, GuestError::Invalid(_)),
                "name {name:?}: {err:?}"
            );
        }
        let mut role = res(false);
        role.group = "rbac.authorization.k8s.io".into();
        role.kind = "ClusterRole".into();
        assert!(
            check_access("g", &all, &role, "", Some("system:node"), Access::Write).is_ok(),
            "RBAC names may hold ':'"
        );
    }

    #[test]
    fn an_invalid_name_says_what_a_valid_one_looks_like() {
        let all = Grant::default();
        let err = check(&all, true, "team-a/../team-b", Some("x"), Access::Write).unwrap_err();
        assert!(
            matches!(&err, GuestError::Invalid(m) if m.contains("DNS-1123 label") && m.contains("team-a")),
            "{err:?}"
        );
        let err = check(&all, true, "ok", Some("a<b"), Access::Write).unwrap_err();
        assert!(
            matches!(&err, GuestError::Invalid(m) if m.contains("DNS-1123 subdomain") && m.contains("\"a<b\"")),
            "{err:?}"
        );
    }

    #[test]
    fn only_lists_span_namespaces_and_only_unconfined_guests_on_the_server() {
        let confined = Grant::namespaces(["team-a"]);
        assert!(
            check(&confined, true, "", None, Access::CacheRead).is_ok(),
            "the informers' scope bounds a cache list"
        );
        assert!(
            check(&confined, true, "", None, Access::ServerRead).is_err(),
            "a server list would be cluster-wide"
        );
        assert!(check(&Grant::default(), true, "", None, Access::ServerRead).is_ok());
        assert!(
            check(&Grant::default(), true, "", None, Access::Write).is_err(),
            "a write names its namespace"
        );
        assert!(
            check(&confined, true, "", Some("x"), Access::CacheRead).is_err(),
            "a get names its namespace"
        );
        let err = check(&confined, true, "team-b", Some("x"), Access::CacheRead).unwrap_err();
        assert!(
            matches!(&err, GuestError::Forbidden(m) if m.contains("team-b")),
            "{err:?}"
        );
    }
}
