//! Grants: what the operator allows a guest, checked against what the guest declares when it is
//! loaded, not on first use.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::bindings::{Description, Gvk};

/// A declaration that exceeds its grant. Each message names the grant to add.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A namespace outside the granted set.
    #[error(
        "guest {guest:?} declares namespace {namespace:?}, but its grant allows only {granted}; add {namespace:?} to `namespaces` in its grant"
    )]
    Namespace {
        /// The guest.
        guest: String,
        /// The namespace declared.
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
        /// `apiVersion/Kind`.
        kind: String,
        /// for, owns, watches or field-index.
        role: &'static str,
    },
    /// A field index on a kind the guest does not otherwise declare.
    #[error(
        "guest {guest:?} declares a field index on {kind:?}, which it neither reconciles, owns nor watches"
    )]
    IndexOnUndeclaredKind {
        /// The guest.
        guest: String,
        /// `apiVersion/Kind`.
        kind: String,
    },
}

/// What a guest may do. The default grants everything but uncached reads: appropriate for a
/// guest the operator loads by hand, not for a tenant's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Grant {
    /// Namespaces it may read and write; `None` = all, and cluster-scoped objects.
    pub namespaces: Option<BTreeSet<String>>,
    /// Kinds it may declare, as `apiVersion/Kind` (`v1/ConfigMap`, `apps/v1/Deployment`);
    /// `None` = any.
    pub kinds: Option<BTreeSet<String>>,
    /// Whether it may use the uncached `api` import.
    pub uncached_reads: bool,
}

/// `apiVersion/Kind` of a WIT gvk: `v1/ConfigMap`, `apps/v1/Deployment`.
pub fn kind_name(g: &Gvk) -> String {
    if g.group.is_empty() {
        format!("{}/{}", g.version, g.kind)
    } else {
        format!("{}/{}/{}", g.group, g.version, g.kind)
    }
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

    /// Refuses a declaration that exceeds this grant, naming the grant to add.
    pub fn check(&self, guest: &str, d: &Description) -> Result<(), Error> {
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
                if !set.contains(&kind_name(k)) {
                    return Err(Error::Kind {
                        guest: guest.into(),
                        kind: kind_name(k),
                        role,
                    });
                }
            }
        }
        for idx in &d.field_indexes {
            if !kinds.iter().any(|(k, _)| *k == &idx.kind) {
                return Err(Error::IndexOnUndeclaredKind {
                    guest: guest.into(),
                    kind: kind_name(&idx.kind),
                });
            }
        }
        Ok(())
    }
}
