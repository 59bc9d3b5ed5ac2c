//! Identity: whom a guest's writes and uncached reads act as, and what a denial tells the guest.
//!
//! A tenant's guest acts as a ServiceAccount of its own namespace: the host sends its requests
//! impersonating `system:serviceaccount:<namespace>:<name>`, so the API server's RBAC, not the
//! host's ClusterRole, decides what it may do. An operator's guest acts as the host unless its
//! config names a ServiceAccount.
//!
//! Where it may surprise:
//! - Only the user name is impersonated, never groups: constrained impersonation (KEP-5284)
//!   refuses groups for a ServiceAccount, and the API server then gives it the groups every
//!   ServiceAccount has (`system:serviceaccounts`, `system:serviceaccounts:<namespace>`).
//! - The ServiceAccount need not exist for impersonation to work; RBAC matches bindings by name.
//!   A missing one only shows as every request being forbidden.
//! - One client (and connection pool) per distinct identity, kept for the host's lifetime.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::names;

/// The ServiceAccount a tenant's guest acts as unless the host config or its ConfigMap says
/// otherwise.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "reconciled-guest";

/// The ConfigMap annotation naming another ServiceAccount of the same namespace for its guests.
pub const ANNOTATION: &str = "reconciled.dev/service-account";

/// Why an identity could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not `namespace/name`, or a part Kubernetes would refuse.
    #[error("service account {value} is not valid: {reason}")]
    Invalid {
        /// The value, quoted and shortened.
        value: String,
        /// What a valid one looks like.
        reason: String,
    },
    /// The client acting as it could not be built (TLS setup, for example).
    #[error("cannot build a client acting as ServiceAccount {account}: {source}")]
    Client {
        /// The identity.
        account: ServiceAccount,
        /// What kube said.
        #[source]
        source: Box<kube::Error>,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A ServiceAccount, by namespace and name; shown as `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct ServiceAccount {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceAccount {
    /// `name` in `namespace`, both checked as the API server checks them (a DNS-1123 label and
    /// subdomain), since the name ends up in an HTTP header and in RBAC rules shown to people.
    pub fn new(namespace: &str, name: &str) -> Result<Self> {
        let invalid = |e: names::Error| Error::Invalid {
            value: names::shown(&format!("{namespace}/{name}")),
            reason: e.to_string(),
        };
        names::namespace(namespace).map_err(invalid)?;
        names::object_name("", "ServiceAccount", name).map_err(invalid)?;
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Parses `namespace/name`, as the host config writes it.
    pub fn parse(s: &str) -> Result<Self> {
        match s.split_once('/') {
            Some((namespace, name)) => Self::new(namespace, name),
            None => Err(Error::Invalid {
                value: names::shown(s),
                reason: "write it as namespace/name (e.g. team-a/reconciled-guest)".into(),
            }),
        }
    }

    /// The user name the API server knows it by: `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups the API server gives it (asked about in access reviews).
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".into(),
        ]
    }
}

impl TryFrom<String> for ServiceAccount {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        Self::parse(&s)
    }
}

impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One RBAC permission: a verb on a resource of an API group, in a namespace (or cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// API group, empty for core.
    pub group: String,
    /// Plural resource, with its subresource if any (`deployments/status`).
    pub resource: String,
    /// The verb (`get`, `list`, `create`, ...).
    pub verb: String,
    /// The namespace, or `None` for a cluster-scoped resource or an all-namespaces list.
    pub namespace: Option<String>,
}

impl Rule {
    /// The permission an API request needs, read from its method and path as the API server's
    /// request-info resolver does (`/api/v1/...`, `/apis/<group>/<version>/...`). `None` for a
    /// path that addresses no resource.
    pub fn of_request(method: &http::Method, path: &str) -> Option<Self> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let rest = match parts.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (group, rest) = rest;
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            _ => (None, rest),
        };
        let (resource, name, sub) = match rest {
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
            _ => return None,
        };
        let verb = match (method.as_str(), name.is_some()) {
            ("GET", true) => "get",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => return None,
        };
        Some(Self {
            group: group.to_string(),
            resource: match sub {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_string(),
            },
            verb: verb.to_string(),
            namespace,
        })
    }

    /// The rule as a Role spells it: `{apiGroups:["apps"], resources:["deployments"],
    /// verbs:["delete"]}`.
    pub fn role_rule(&self) -> String {
        format!(
            "{{apiGroups:[{:?}], resources:[{:?}], verbs:[{:?}]}}",
            self.group, self.resource, self.verb
        )
    }

    fn place(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("in namespace {ns:?}"),
            None => "cluster-wide".into(),
        }
    }
}

/// The message a guest receives when the API server forbade a request it sent as `account`:
/// whom it acted as, the rule that would allow it and where, then the server's own words.
///
/// A denial of the impersonation itself (the host may not act as `account`, or not for this
/// verb) is the host operator's to fix, and says so.
pub fn forbidden(account: &ServiceAccount, rule: Option<&Rule>, server: &str) -> String {
    let server = crate::text::one_line(server);
    if server.contains("cannot impersonate") {
        return format!(
            "the host may not act as ServiceAccount {account} for this request: add the rule the API server names to the host's ClusterRole (see deploy/reconciled.yaml) ({server})"
        );
    }
    match rule {
        Some(rule) => format!(
            "ServiceAccount {account}, which this guest acts as, may not {} {} {}: add rule {} to a Role bound to it {} if the guest should ({server})",
            rule.verb,
            rule.resource,
            rule.place(),
            rule.role_rule(),
            match &rule.namespace {
                Some(ns) => format!("in namespace {ns:?}"),
                None => "(a ClusterRole and ClusterRoleBinding, for a cluster-wide request)".into(),
            },
        ),
        None => {
            format!("ServiceAccount {account}, which this guest acts as, was refused ({server})")
        }
    }
}

/// Clients by identity: the host's own, and one impersonating each ServiceAccount a guest acts
/// as, built on first use from the host's `kube::Config` and then reused.
///
/// Where it may surprise: the API server takes one impersonation per request, so if the host's
/// own config impersonates someone, a guest's client replaces that: its requests come from the
/// config's real credentials, which must then be allowed to impersonate the ServiceAccount.
pub struct Identities {
    config: kube::Config,
    host: kube::Client,
    clients: Mutex<HashMap<ServiceAccount, kube::Client>>,
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identities")
            .field("cluster", &self.config.cluster_url)
            .finish_non_exhaustive()
    }
}

impl Identities {
    /// The host's identity is `config`'s; guests' identities impersonate from it.
    pub fn new(config: kube::Config) -> Result<Self, kube::Error> {
        let host = kube::Client::try_from(config.clone())?;
        Ok(Self {
            config,
            host,
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// The host's own client: informers, Events, access reviews.
    pub fn host(&self) -> &kube::Client {
        &self.host
    }

    /// The client acting as `account`, or the host's for `None`.
    pub fn client(&self, account: Option<&ServiceAccount>) -> Result<kube::Client> {
        let Some(account) = account else {
            return Ok(self.host.clone());
        };
        let mut clients = self.clients.lock().unwrap();
        if let Some(c) = clients.get(account) {
            return Ok(c.clone());
        }
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(account.username());
        // Constrained impersonation refuses groups for a ServiceAccount; the server fills
        // them in.
        config.auth_info.impersonate_groups = None;
        config.auth_info.impersonate_uid = None;
        config.auth_info.impersonate_user_extra = None;
        let client = kube::Client::try_from(config).map_err(|source| Error::Client {
            account: account.clone(),
            source: Box::new(source),
        })?;
        clients.insert(account.clone(), client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_is_checked_and_named_as_the_api_server_names_it() {
        let sa = ServiceAccount::parse("team-a/reconciled-guest").unwrap();
        assert_eq!(
            sa.username(),
            "system:serviceaccount:team-a:reconciled-guest"
        );
        assert_eq!(sa.to_string(), "team-a/reconciled-guest");
        for bad in [
            "team-a",
            "team-a/",
            "/x",
            "Team-A/x",
            "team-a/x y",
            "team-a/a:b",
            "a/b/c",
        ] {
            let err = ServiceAccount::parse(bad).unwrap_err().to_string();
            assert!(err.contains("is not valid"), "{bad}: {err}");
        }
        let sa: ServiceAccount = serde_json::from_str("\"ops/deployer.v1\"").unwrap();
        assert_eq!(sa.name, "deployer.v1");
    }

    #[test]
    fn the_rule_a_request_needs_is_read_from_its_method_and_path() {
        let rule = |m: http::Method, p: &str| Rule::of_request(&m, p).map(|r| r.role_rule());
        let del = Rule::of_request(
            &http::Method::DELETE,
            "/apis/apps/v1/namespaces/team-a/deployments/web",
        )
        .unwrap();
        assert_eq!(del.namespace.as_deref(), Some("team-a"));
        assert_eq!(
            del.role_rule(),
            r#"{apiGroups:["apps"], resources:["deployments"], verbs:["delete"]}"#
        );
        assert_eq!(
            rule(http::Method::GET, "/api/v1/namespaces/team-a/secrets/token").unwrap(),
            r#"{apiGroups:[""], resources:["secrets"], verbs:["get"]}"#
        );
        assert_eq!(
            rule(http::Method::GET, "/api/v1/namespaces/team-a/configmaps").unwrap(),
            r#"{apiGroups:[""], resources:["configmaps"], verbs:["list"]}"#
        );
        assert_eq!(
            rule(
                http::Method::POST,
                "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings"
            )
            .unwrap(),
            r#"{apiGroups:["rbac.authorization.k8s.io"], resources:["rolebindings"], verbs:["create"]}"#
        );
        assert_eq!(
            rule(
                http::Method::PUT,
                "/api/v1/namespaces/a/configmaps/x/status"
            )
            .unwrap(),
            r#"{apiGroups:[""], resources:["configmaps/status"], verbs:["update"]}"#
        );
        let all = Rule::of_request(&http::Method::GET, "/api/v1/configmaps").unwrap();
        assert_eq!((all.verb.as_str(), all.namespace), ("list", None));
        // A namespace itself is a cluster-scoped object named like the segment.
        let ns = Rule::of_request(&http::Method::GET, "/api/v1/namespaces/team-a").unwrap();
        assert_eq!(
            (ns.resource.as_str(), ns.verb.as_str()),
            ("namespaces", "get")
        );
        assert_eq!(rule(http::Method::GET, "/version"), None);
    }

    #[test]
    fn a_denial_names_the_service_account_the_rule_and_where_to_add_it() {
        let sa = ServiceAccount::parse("team-a/reconciled-guest").unwrap();
        let rule = Rule::of_request(
            &http::Method::DELETE,
            "/apis/apps/v1/namespaces/team-a/deployments/web",
        );
        let m = forbidden(&sa, rule.as_ref(), "deployments.apps \"web\" is forbidden");
        assert!(
            m.starts_with("ServiceAccount team-a/reconciled-guest"),
            "{m}"
        );
        assert!(
            m.contains(r#"add rule {apiGroups:["apps"], resources:["deployments"], verbs:["delete"]} to a Role bound to it in namespace "team-a""#),
            "{m}"
        );
        let host = forbidden(
            &sa,
            rule.as_ref(),
            "User \"system:serviceaccount:reconciled-system:reconciled\" cannot impersonate-on:serviceaccount:delete resource \"deployments\"",
        );
        assert!(host.contains("the host's ClusterRole"), "{host}");
    }

    #[tokio::test]
    async fn one_client_per_identity_is_built_and_reused() {
        let ids =
            Identities::new(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let a = ServiceAccount::parse("team-a/reconciled-guest").unwrap();
        ids.client(Some(&a)).unwrap();
        ids.client(Some(&a)).unwrap();
        ids.client(None).unwrap();
        assert_eq!(ids.clients.lock().unwrap().len(), 1);
        ids.client(Some(
            &ServiceAccount::parse("team-b/reconciled-guest").unwrap(),
        ))
        .unwrap();
        assert_eq!(ids.clients.lock().unwrap().len(), 2);
    }
}
