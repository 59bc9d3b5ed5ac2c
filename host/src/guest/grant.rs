//! Grants: what the operator allows a guest, checked against what the guest declares when it is
//! loaded, not on first use.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::guest::bindings::{Description, Gvk, Mapping};
use crate::names;

/// A declaration that exceeds its grant, or that no grant could allow.
///
/// Where it may surprise: only some of these can be fixed by the operator. A namespace or a
/// kind outside the grant can ([`Error::operator_can_grant`]); an invalid value or a field index
/// on a kind the guest does not declare cannot, and the message says to fix `describe()`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A namespace outside the granted set.
    #[error(
        "guest {guest:?} declares namespace {namespace:?}, but its grant allows only {granted}; add {namespace:?} to `namespaces` in its grant"
    )]
    Namespace {
        /// The guest.
        guest: String,
        /// The namespace declared (a valid namespace name: invalid ones are [`Error::Invalid`]).
        namespace: String,
        /// What is granted.
        granted: String,
    },
    /// A kind outside the granted set.
    #[error(
        "guest {guest:?} declares kind {kind:?} (as {role}), but its grant does not list it; add {kind:?} to `kinds` in its grant"
    )]
    Kind {
        /// The guest.
        guest: String,
        /// `apiVersion/Kind` (a valid kind: invalid ones are [`Error::Invalid`]).
        kind: String,
        /// for, owns or watches.
        role: &'static str,
    },
    /// A kind a wildcard in the grant matches but may not allow: RBAC kinds, Secrets and Pods
    /// must be named (see [`named_only`]).
    #[error(
        "guest {guest:?} declares kind {kind:?} (as {role}); its grant's wildcard {pattern:?} never allows {kind:?}, since RBAC kinds, Secrets and Pods must be named: add {kind:?} itself to `kinds` in its grant if the guest is to have it"
    )]
    NamedOnly {
        /// The guest.
        guest: String,
        /// `apiVersion/Kind`.
        kind: String,
        /// for, owns or watches.
        role: &'static str,
        /// The wildcard that matched.
        pattern: String,
    },
    /// A field index on a kind the guest does not otherwise declare.
    #[error(
        "guest {guest:?} declares a field index on {kind:?}, which it neither reconciles, owns nor watches; declare {kind:?} under `for`, `owns` or `watches` in describe(), or drop the index (no grant can allow it)"
    )]
    IndexOnUndeclaredKind {
        /// The guest.
        guest: String,
        /// `apiVersion/Kind`.
        kind: String,
    },
    /// A value Kubernetes would refuse (a namespace, kind, label selector, label key or field
    /// path), named, with what a valid one looks like.
    #[error(
        "guest {guest:?} declares an invalid value: {problem}; fix describe() (no grant can allow it)"
    )]
    Invalid {
        /// The guest.
        guest: String,
        /// What is wrong, and where in the declaration.
        #[source]
        problem: names::Error,
    },
}

impl Error {
    /// Whether widening the operator's grant could ever make this declaration load: `true` for
    /// a valid namespace or kind outside the grant, `false` for what only the guest's author
    /// can fix (an invalid value, a field index on an undeclared kind). Callers that add
    /// "ask the operator" to the message should add it only when this is `true`.
    pub fn operator_can_grant(&self) -> bool {
        match self {
            Error::Namespace { .. } | Error::Kind { .. } | Error::NamedOnly { .. } => true,
            Error::IndexOnUndeclaredKind { .. } | Error::Invalid { .. } => false,
        }
    }
}

/// Checks every value of a declaration that reaches an informer, a URL or a key, whatever the
/// grant: namespaces, kinds (with their group and version), the label selector, label
/// mappings' keys and field-index paths. The error names the first bad value and where it is.
///
/// The whole declaration is guest-controlled, and a value that passes here but not the API
/// server would otherwise become an informer that never syncs, or advice to grant a name that
/// cannot exist.
pub fn validate(d: &Description) -> Result<(), names::Error> {
    for (i, ns) in d.namespaces.iter().enumerate() {
        names::namespace(ns).map_err(|e| e.at(&format!("namespaces[{i}]")))?;
    }
    gvk(&d.for_).map_err(|e| e.at("for"))?;
    for (i, k) in d.owns.iter().enumerate() {
        gvk(k).map_err(|e| e.at(&format!("owns[{i}]")))?;
    }
    for (i, w) in d.watches.iter().enumerate() {
        let place = format!("watches[{i}]");
        gvk(&w.kind).map_err(|e| e.at(&place))?;
        if let Mapping::Label(key) = &w.mapping {
            names::label_key(key).map_err(|e| e.at(&place))?;
        }
    }
    names::label_selector(&d.label_selector).map_err(|e| e.at("label-selector"))?;
    for (i, idx) in d.field_indexes.iter().enumerate() {
        let place = format!("field-indexes[{i}]");
        gvk(&idx.kind).map_err(|e| e.at(&place))?;
        names::field_path(&idx.path).map_err(|e| e.at(&place))?;
    }
    Ok(())
}

/// A declared kind, checked by [`names::gvk`].
fn gvk(g: &Gvk) -> Result<(), names::Error> {
    names::gvk(&g.group, &g.version, &g.kind)
}

/// What a guest may do. The default grants everything but uncached reads: appropriate for a
/// guest the operator loads by hand, not for a tenant's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Grant {
    /// Namespaces it may read and write; `None` = all, and cluster-scoped objects.
    pub namespaces: Option<BTreeSet<String>>,
    /// Kinds it may declare, as `apiVersion/Kind` (`v1/ConfigMap`, `apps/v1/Deployment`: a
    /// [`Gvk`] as it is shown), `apiVersion/*` (every kind of one API version) or `*` (every
    /// kind); `None` = any, named or not.
    ///
    /// Where it may surprise: a wildcard never matches a kind for which [`named_only`] holds
    /// (RBAC kinds, Secrets, Pods); those must be listed by name. `None` is the operator's own
    /// full grant and does include them.
    pub kinds: Option<BTreeSet<String>>,
    /// Whether it may use the uncached `api` import.
    pub uncached_reads: bool,
}

impl Grant {
    /// Confined to exactly these namespaces.
    pub fn namespaces<I: IntoIterator<Item = S>, S: Into<String>>(namespaces: I) -> Self {
        Self {
            namespaces: Some(namespaces.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// Whether `namespace` is granted.
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|set| set.contains(namespace))
    }

    /// The granted namespaces, for messages.
    pub fn describe_namespaces(&self) -> String {
        match &self.namespaces {
            None => "all namespaces".to_string(),
            Some(set) => format!("{:?}", set.iter().collect::<Vec<_>>()),
        }
    }

    /// Refuses a declaration that is invalid ([`validate`]) or exceeds this grant, naming the
    /// grant to add where adding one would help.
    pub fn check(&self, guest: &str, d: &Description) -> Result<(), Error> {
        validate(d).map_err(|problem| Error::Invalid {
            guest: guest.into(),
            problem,
        })?;
        if let Some(set) = &self.namespaces {
            for ns in &d.namespaces {
                if !set.contains(ns) {
                    return Err(Error::Namespace {
                        guest: guest.into(),
                        namespace: ns.clone(),
                        granted: self.describe_namespaces(),
                    });
                }
            }
        }
        let mut kinds: Vec<(&Gvk, &'static str)> = vec![(&d.for_, "for")];
        kinds.extend(d.owns.iter().map(|k| (k, "owns")));
        kinds.extend(d.watches.iter().map(|w| (&w.kind, "watches")));
        if let Some(set) = &self.kinds {
            for (k, role) in &kinds {
                let kind = k.to_string();
                match kind_match(set, k) {
                    KindMatch::Named => {}
                    KindMatch::Wildcard(pattern) if named_only(k) => {
                        return Err(Error::NamedOnly {
                            guest: guest.into(),
                            kind,
                            role,
                            pattern,
                        });
                    }
                    KindMatch::Wildcard(_) => {}
                    KindMatch::None => {
                        return Err(Error::Kind {
                            guest: guest.into(),
                            kind,
                            role,
                        });
                    }
                }
            }
        }
        for idx in &d.field_indexes {
            if !kinds.iter().any(|(k, _)| *k == &idx.kind) {
                return Err(Error::IndexOnUndeclaredKind {
                    guest: guest.into(),
                    kind: idx.kind.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Kinds a wildcard (`*`, `apiVersion/*`) never grants: every kind of
/// `rbac.authorization.k8s.io` (a guest that may write a RoleBinding may bind any role to
/// anyone), Secrets (credentials, and ServiceAccount tokens on request) and Pods (code running
/// with the namespace's ServiceAccounts and mounts). A grant must name them.
///
/// Where it may surprise: kinds that create Pods through a controller (Deployments, Jobs) are
/// not on this list; the API server's admission (Pod Security) governs what those Pods may do.
pub fn named_only(k: &Gvk) -> bool {
    k.group == "rbac.authorization.k8s.io"
        || (k.group.is_empty() && matches!(k.kind.as_str(), "Secret" | "Pod"))
}

enum KindMatch {
    /// Listed by name.
    Named,
    /// Matched by this wildcard only.
    Wildcard(String),
    None,
}

fn kind_match(set: &BTreeSet<String>, k: &Gvk) -> KindMatch {
    let name = k.to_string();
    if set.contains(&name) {
        return KindMatch::Named;
    }
    let version_wide = match name.rsplit_once('/') {
        Some((api_version, _)) => format!("{api_version}/*"),
        None => return KindMatch::None,
    };
    for pattern in [version_wide.as_str(), "*"] {
        if set.contains(pattern) {
            return KindMatch::Wildcard(pattern.to_string());
        }
    }
    KindMatch::None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::bindings::Consistency;
    use crate::guest::bindings::reconciled::runtime::declaration::{FieldIndex, Watch};

    fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk::new(group, version, kind)
    }

    fn configmaps() -> Description {
        Description {
            for_: gvk("", "v1", "ConfigMap"),
            owns: Vec::new(),
            watches: Vec::new(),
            namespaces: Vec::new(),
            label_selector: String::new(),
            field_indexes: Vec::new(),
            consistency: Consistency::ReadYourWrites,
        }
    }

    fn team_a() -> Grant {
        Grant {
            kinds: Some(["v1/ConfigMap".to_string()].into()),
            ..Grant::namespaces(["team-a"])
        }
    }

    #[test]
    fn invalid_namespaces_are_refused_as_invalid_with_no_advice_to_grant_them() {
        let long = "n".repeat(300);
        for ns in ["", "..", "a/b", "a\0b", "team-a/../team-b", long.as_str()] {
            let mut d = configmaps();
            d.namespaces = vec!["team-a".into(), ns.into()];
            let err = team_a().check("g", &d).unwrap_err();
            assert!(matches!(&err, Error::Invalid { .. }), "{ns:?}: {err:?}");
            assert!(!err.operator_can_grant());
            let message = err.to_string();
            assert!(message.contains("namespaces[1]"), "{message}");
            assert!(message.contains("DNS-1123 label"), "{message}");
            assert!(
                !message.contains("add "),
                "no advice to grant it: {message}"
            );
        }
    }

    #[test]
    fn a_valid_namespace_outside_the_grant_is_advice_the_operator_can_follow() {
        let mut d = configmaps();
        d.namespaces = vec!["team-b".into()];
        let err = team_a().check("g", &d).unwrap_err();
        assert!(matches!(err, Error::Namespace { .. }), "{err:?}");
        assert!(err.operator_can_grant());
        assert!(err.to_string().contains(r#"add "team-b" to `namespaces`"#));
        // Following the advice works.
        let wider = Grant {
            namespaces: Some(["team-a".into(), "team-b".into()].into()),
            ..team_a()
        };
        assert_eq!(wider.check("g", &d), Ok(()));
    }

    #[test]
    fn invalid_kinds_selectors_and_paths_are_refused_as_invalid() {
        let mut cases = Vec::new();
        let mut d = configmaps();
        d.owns = vec![gvk("", "v1", "a/b")];
        cases.push((d, "owns[0]"));
        let mut d = configmaps();
        d.for_ = gvk("", "v1", "");
        cases.push((d, "for"));
        let mut d = configmaps();
        d.watches = vec![Watch {
            kind: gvk("a/b", "v1", "Thing"),
            mapping: Mapping::Owner,
        }];
        cases.push((d, "watches[0]"));
        let mut d = configmaps();
        d.watches = vec![Watch {
            kind: gvk("", "v1", "Secret"),
            mapping: Mapping::Label("a=b".into()),
        }];
        cases.push((d, "watches[0]"));
        let mut d = configmaps();
        d.label_selector = "a in (".into();
        cases.push((d, "label-selector"));
        for path in ["", "a..b", "a b", "a\0"] {
            let mut d = configmaps();
            d.field_indexes = vec![FieldIndex {
                kind: gvk("", "v1", "ConfigMap"),
                path: path.into(),
            }];
            cases.push((d, "field-indexes[0]"));
        }
        for (d, place) in cases {
            let err = Grant::default().check("g", &d).unwrap_err();
            assert!(matches!(&err, Error::Invalid { .. }), "{place}: {err:?}");
            assert!(err.to_string().contains(place), "{err}");
            assert!(!err.operator_can_grant());
            assert!(validate(&d).is_err());
        }
    }

    #[test]
    fn an_index_on_an_undeclared_kind_is_not_the_operators_to_grant() {
        let mut d = configmaps();
        d.field_indexes = vec![FieldIndex {
            kind: gvk("", "v1", "Secret"),
            path: "type".into(),
        }];
        let err = Grant::default().check("g", &d).unwrap_err();
        assert!(
            matches!(err, Error::IndexOnUndeclaredKind { .. }),
            "{err:?}"
        );
        assert!(!err.operator_can_grant());
        assert!(err.to_string().contains("no grant can allow it"));
    }

    #[test]
    fn a_kind_outside_the_grant_is_advice_the_operator_can_follow() {
        let mut d = configmaps();
        d.owns = vec![gvk("", "v1", "Secret")];
        let err = team_a().check("g", &d).unwrap_err();
        assert!(matches!(err, Error::Kind { .. }), "{err:?}");
        assert!(err.operator_can_grant());
        assert!(err.to_string().contains(r#"add "v1/Secret" to `kinds`"#));
    }
    #[test]
    fn wildcards_grant_kinds_but_never_rbac_kinds_secrets_or_pods() {
        let grant = |kinds: &[&str]| Grant {
            kinds: Some(kinds.iter().map(|k| k.to_string()).collect()),
            ..Grant::namespaces(["team-a"])
        };
        let declaring = |k: Gvk| {
            let mut d = configmaps();
            d.owns = vec![k];
            d
        };
        let deployment = declaring(gvk("apps", "v1", "Deployment"));
        assert_eq!(grant(&["*"]).check("g", &deployment), Ok(()));
        assert_eq!(
            grant(&["apps/v1/*", "v1/*"]).check("g", &deployment),
            Ok(())
        );
        assert!(matches!(
            grant(&["apps/v2/*", "v1/*"]).check("g", &deployment),
            Err(Error::Kind { .. })
        ));
        for k in [
            gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            gvk("rbac.authorization.k8s.io", "v1", "Role"),
            gvk("", "v1", "Secret"),
            gvk("", "v1", "Pod"),
        ] {
            let d = declaring(k.clone());
            let name = k.to_string();
            let version_wide = format!("{}/*", name.rsplit_once('/').unwrap().0);
            for pattern in ["*", version_wide.as_str()] {
                let err = grant(&["v1/ConfigMap", pattern])
                    .check("g", &d)
                    .unwrap_err();
                assert!(matches!(err, Error::NamedOnly { .. }), "{name}: {err:?}");
                assert!(err.operator_can_grant());
                assert!(
                    err.to_string().contains(&format!("add {name:?} itself")),
                    "{err}"
                );
            }
            // Named, it is granted; the operator's full grant (`None`) includes it too.
            assert_eq!(grant(&["v1/ConfigMap", &name]).check("g", &d), Ok(()));
            assert_eq!(Grant::default().check("g", &d), Ok(()));
        }
    }

    #[test]
    fn an_empty_kinds_list_grants_nothing() {
        let none = Grant {
            kinds: Some(BTreeSet::new()),
            ..Grant::namespaces(["team-a"])
        };
        let err = none.check("g", &configmaps()).unwrap_err();
        assert!(matches!(err, Error::Kind { .. }), "{err:?}");
        assert!(err.to_string().contains(r#"add "v1/ConfigMap" to `kinds`"#));
    }
}
