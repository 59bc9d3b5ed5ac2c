//! From a guest's declaration to what it needs: each kind it reads once, with its informer's
//! scope, its field indexes and the roles it plays (for, owns, watches by label or by `map`).
//!
//! [`plan`] is pure: the declaration and the operator's settings in, the plan out, so that what
//! a guest may watch is decided in one place that a unit test can read.

use std::collections::BTreeSet;
use std::time::Duration;

use super::error::Error;
use super::settings::Settings;
use crate::guest::Module;
use crate::guest::bindings::{Consistency, Description, Gvk, Mapping};
use crate::guest::grant;
use crate::informer::factory::InformerFactory;
use crate::informer::shard::ShardSet;
use crate::informer::{Informer, InformerKey, Namespaces, Scope, Subscription};
use crate::selector::LabelSelector;

/// How a subscription's objects relate to the primaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The reconciled kind itself.
    For,
    /// Through the controller ownerReference to the `for` kind.
    Owner,
    /// Through the value of this label.
    Label(String),
    /// Through the guest's `map` export.
    GuestMap,
}

/// What a declaration needs: each kind once, with its informer key, indexes and roles.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) kinds: Vec<PlannedKind>,
    pub(crate) for_kind: Gvk,
    pub(crate) read_your_writes: bool,
}

impl Plan {
    /// Confines the reconciled kind's informer to `shard`: the shards held here, for a guest
    /// whose keys are split across replicas.
    pub(crate) fn shard_for_kind(&mut self, shard: Option<ShardSet>) {
        for k in &mut self.kinds {
            if k.kind == self.for_kind {
                k.key.scope.shard.clone_from(&shard);
            }
        }
    }
}

/// One kind the guest reads, and how.
#[derive(Debug)]
pub(crate) struct PlannedKind {
    pub(crate) kind: Gvk,
    pub(crate) key: InformerKey,
    pub(crate) indexes: Vec<String>,
    pub(super) roles: Vec<Role>,
}

/// Describes `module`, checks the declaration against the grant and plans its informers.
pub(super) async fn describe(module: &Module, settings: &Settings) -> Result<Plan, Error> {
    let desc = module
        .describe(settings.limits)
        .await
        .map_err(|source| Error::Describe {
            guest: settings.name.clone(),
            source,
        })?;
    plan(&desc, settings)
}

/// The plan for `desc` under `settings`: the declaration validated and checked against the
/// grant, then each kind once, with its scope (declared namespaces, else the granted ones, else
/// all; the label selector applies to the `for` kind only), indexes and roles.
pub(crate) fn plan(desc: &Description, settings: &Settings) -> Result<Plan, Error> {
    let name = &settings.name;
    // The declaration is guest-controlled: a value Kubernetes would refuse is rejected here,
    // named, before the grant check advises granting it or an informer is built from it.
    grant::validate(desc).map_err(|e| Error::Invalid {
        guest: name.clone(),
        reason: format!("describe() declares an invalid value: {e}"),
    })?;
    settings.grant.check(name, desc)?;
    let invalid = |reason: String| Error::Invalid {
        guest: name.clone(),
        reason,
    };

    // Declared namespaces, else the granted ones, else all.
    let namespaces = if !desc.namespaces.is_empty() {
        Namespaces::Only(desc.namespaces.iter().cloned().collect())
    } else if let Some(set) = &settings.grant.namespaces {
        Namespaces::Only(set.iter().cloned().collect::<BTreeSet<_>>())
    } else {
        Namespaces::All
    };
    let for_labels = LabelSelector::parse(&desc.label_selector)
        .map_err(|e| invalid(format!("label selector {:?}: {e}", desc.label_selector)))?;

    // Each kind once, with every role it plays.
    let mut roles: Vec<(Gvk, Role)> = vec![(desc.for_.clone(), Role::For)];
    roles.extend(desc.owns.iter().map(|k| (k.clone(), Role::Owner)));
    for w in &desc.watches {
        let role = match &w.mapping {
            Mapping::Owner => Role::Owner,
            Mapping::Label(l) => Role::Label(l.clone()),
            Mapping::GuestMap => Role::GuestMap,
        };
        roles.push((w.kind.clone(), role));
    }
    let mut kinds: Vec<PlannedKind> = Vec::new();
    for (kind, _) in &roles {
        if kinds.iter().any(|k| k.kind == *kind) {
            continue;
        }
        let scope = Scope {
            namespaces: namespaces.clone(),
            labels: if *kind == desc.for_ {
                for_labels.clone()
            } else {
                LabelSelector::default()
            },
            ..Scope::default()
        };
        kinds.push(PlannedKind {
            kind: kind.clone(),
            key: InformerKey::new(&kind.group, &kind.version, &kind.kind, scope),
            indexes: desc
                .field_indexes
                .iter()
                .filter(|i| i.kind == *kind)
                .map(|i| i.path.clone())
                .collect(),
            roles: roles
                .iter()
                .filter(|(k, _)| k == kind)
                .map(|(_, r)| r.clone())
                .collect(),
        });
    }
    Ok(Plan {
        kinds,
        for_kind: desc.for_.clone(),
        read_your_writes: settings.read_your_writes.unwrap_or(true)
            && desc.consistency == Consistency::ReadYourWrites,
    })
}

pub(super) fn subscribe(
    factory: &InformerFactory,
    guest: &str,
    k: &PlannedKind,
) -> Result<Subscription, Error> {
    let indexes: Vec<&str> = k.indexes.iter().map(String::as_str).collect();
    factory
        .subscribe(k.key.clone(), &indexes)
        .map_err(|e| Error::Invalid {
            guest: guest.to_string(),
            reason: e.to_string(),
        })
}

pub(super) async fn wait_synced(
    guest: &str,
    k: &PlannedKind,
    informer: &Informer,
    timeout: Duration,
) -> Result<(), Error> {
    informer
        .wait_synced(timeout)
        .await
        .map_err(|e| Error::Informer {
            guest: guest.to_string(),
            kind: k.kind.to_string(),
            reason: e.to_string(),
        })
}

/// Adds the indexes a new version declares to an informer it keeps.
pub(super) fn add_indexes(informer: &Informer, guest: &str, k: &PlannedKind) -> Result<(), Error> {
    for idx in &k.indexes {
        match informer.add_field_index(idx) {
            Ok(()) | Err(crate::informer::store::Error::DuplicateIndex(_)) => {}
            Err(e) => {
                return Err(Error::Invalid {
                    guest: guest.to_string(),
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::bindings::reconciled::runtime::declaration::{FieldIndex, Watch};
    use crate::guest::grant::Grant;

    fn cm() -> Gvk {
        Gvk::new("", "v1", "ConfigMap")
    }

    fn secret() -> Gvk {
        Gvk::new("", "v1", "Secret")
    }

    fn desc() -> Description {
        Description {
            for_: cm(),
            owns: vec![secret()],
            watches: vec![Watch {
                kind: secret(),
                mapping: Mapping::Label("app".into()),
            }],
            namespaces: vec![],
            label_selector: "tier=web".into(),
            field_indexes: vec![FieldIndex {
                kind: secret(),
                path: "type".into(),
            }],
            consistency: Consistency::ReadYourWrites,
        }
    }

    #[test]
    fn each_kind_is_planned_once_with_every_role_it_plays() {
        let plan = plan(&desc(), &Settings::new("g")).unwrap();
        assert_eq!(plan.kinds.len(), 2);
        let secret = &plan.kinds[1];
        assert_eq!(secret.kind, self::secret());
        assert_eq!(
            secret.roles,
            [Role::Owner, Role::Label("app".into())],
            "owned and watched by label, one informer"
        );
        assert_eq!(secret.indexes, ["type"]);
        assert!(plan.read_your_writes);
    }

    #[test]
    fn the_label_selector_scopes_only_the_for_kind() {
        let plan = plan(&desc(), &Settings::new("g")).unwrap();
        assert_eq!(plan.kinds[0].key.scope.labels.to_string(), "tier=web");
        assert!(plan.kinds[1].key.scope.labels.is_empty());
    }

    #[test]
    fn namespaces_come_from_the_declaration_else_the_grant_else_all() {
        let all = plan(&desc(), &Settings::new("g")).unwrap();
        assert_eq!(all.kinds[0].key.scope.namespaces, Namespaces::All);
        let granted = Settings {
            grant: Grant::namespaces(["a", "b"]),
            ..Settings::new("g")
        };
        let p = plan(&desc(), &granted).unwrap();
        assert_eq!(
            p.kinds[0].key.scope.namespaces,
            Namespaces::Only(["a".to_string(), "b".to_string()].into())
        );
        let mut declared = desc();
        declared.namespaces = vec!["b".into()];
        let p = plan(&declared, &granted).unwrap();
        assert_eq!(
            p.kinds[1].key.scope.namespaces,
            Namespaces::Only(["b".to_string()].into())
        );
    }

    #[test]
    fn a_declaration_beyond_the_grant_or_invalid_is_refused_before_anything_is_planned() {
        let mut outside = desc();
        outside.namespaces = vec!["c".into()];
        let granted = Settings {
            grant: Grant::namespaces(["a"]),
            ..Settings::new("g")
        };
        assert!(matches!(plan(&outside, &granted), Err(Error::Grant(_))));
        let mut invalid = desc();
        invalid.namespaces = vec!["..".into()];
        assert!(matches!(
            plan(&invalid, &Settings::new("g")),
            Err(Error::Invalid { .. })
        ));
    }

    #[test]
    fn read_your_writes_is_what_the_guest_asks_unless_the_operator_turns_it_off() {
        let mut eventual = desc();
        eventual.consistency = Consistency::Eventual;
        assert!(
            !plan(&eventual, &Settings::new("g"))
                .unwrap()
                .read_your_writes
        );
        let off = Settings {
            read_your_writes: Some(false),
            ..Settings::new("g")
        };
        assert!(!plan(&desc(), &off).unwrap().read_your_writes);
    }
}
