//! An informer's identity: a kind plus the slice of it cached (namespaces, selectors,
//! transform). Subscribers with equal keys share one informer, one watch and one store.

use std::collections::BTreeSet;

use kube::core::GroupVersionKind;

use crate::informer::shard::ShardSet;
use crate::object::{KindName, Transform};
use crate::selector::{FieldSelector, LabelSelector};

/// Which namespaces an informer covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Namespaces {
    /// Every namespace (one watch), or a cluster-scoped kind.
    All,
    /// Exactly these namespaces (one watch each).
    Only(BTreeSet<String>),
}

/// What slice of a kind an informer caches. Part of the informer's identity: subscribers with
/// equal scopes share one informer, one watch and one store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The namespaces.
    pub namespaces: Namespaces,
    /// Server-side label selector.
    pub labels: LabelSelector,
    /// Server-side field selector.
    pub fields: FieldSelector,
    /// How objects are trimmed before caching (`metadata_only` included).
    pub transform: Transform,
    /// Only the objects whose uid (or namespace) hashes into these ranges, selected by the API
    /// server; see [`ShardSet`]. An empty set holds nothing and never asks the server.
    pub shard: Option<ShardSet>,
}

impl Default for Scope {
    fn default() -> Self {
        Self {
            namespaces: Namespaces::All,
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
            transform: Transform::default(),
            shard: None,
        }
    }
}

/// Compact, for logs and metric labels: `ns=a,b labels=app=x fields=… transformed`. Two scopes
/// differing only in the details of their transform print alike.
impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespaces {
            Namespaces::All => write!(f, "ns=*")?,
            Namespaces::Only(set) => {
                write!(f, "ns=")?;
                for (i, ns) in set.iter().enumerate() {
                    write!(f, "{}{ns}", if i > 0 { "," } else { "" })?;
                }
            }
        }
        let labels = self.labels.to_string();
        if !labels.is_empty() {
            write!(f, " labels={labels}")?;
        }
        let fields = self.fields.to_string();
        if !fields.is_empty() {
            write!(f, " fields={fields}")?;
        }
        if let Some(shard) = &self.shard {
            write!(f, " shard={shard}")?;
        }
        if self.transform != Transform::default() {
            write!(f, " transformed")?;
        }
        Ok(())
    }
}

impl Scope {
    /// All objects in one namespace, default transform.
    pub fn namespace(ns: &str) -> Self {
        Self {
            namespaces: Namespaces::Only([ns.to_string()].into()),
            ..Self::default()
        }
    }
}

/// An informer's identity: a kind plus a scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerKey {
    /// Group, version, kind.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// The slice of that kind.
    pub scope: Scope,
}

impl InformerKey {
    /// A key for `group/version/kind` (empty group for core) with `scope`.
    pub fn new(group: &str, version: &str, kind: &str, scope: Scope) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            scope,
        }
    }

    /// The kind, as people see it (see [`KindName`]); the scope shows through [`Scope`]'s
    /// `Display`.
    pub fn name(&self) -> KindName<'_> {
        KindName {
            group: &self.group,
            version: &self.version,
            kind: &self.kind,
        }
    }

    pub(super) fn kube_gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }
}
