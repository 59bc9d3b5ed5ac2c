//! Building the [`Description`] that `describe` returns.

use crate::{Consistency, Description, FieldIndex, Gvk, Kind, Mapping, Watch};

/// Starts a description of a guest that reconciles `Primary` (the `for` kind).
///
/// Defaults: no owned or watched kinds, every namespace the guest is granted, no label
/// selector, no field indexes, read-your-writes consistency.
///
/// ```ignore
/// describe::<ConfigMapGenerator>()
///     .owns::<ConfigMap>()
///     .watches_label::<Secret>("example.com/generator")
///     .namespaces(["team-a"])
///     .field_index::<Pod>("spec.nodeName")
///     .build()
/// ```
pub fn describe<Primary: Kind>() -> DescriptionBuilder {
    DescriptionBuilder {
        description: Description {
            for_: Primary::gvk(),
            owns: Vec::new(),
            watches: Vec::new(),
            namespaces: Vec::new(),
            label_selector: String::new(),
            field_indexes: Vec::new(),
            consistency: Consistency::ReadYourWrites,
        },
    }
}

/// A [`Description`] under construction; see [`describe`].
#[derive(Clone, Debug)]
#[must_use = "call .build() and return the description"]
pub struct DescriptionBuilder {
    description: Description,
}

impl DescriptionBuilder {
    /// Also reconcile the controller owner (of the `for` kind) when a `K` changes, through its
    /// controller ownerReference; and make `K` readable from the cache.
    pub fn owns<K: Kind>(mut self) -> Self {
        self.description.owns.push(K::gvk());
        self
    }

    /// Watch `K`, mapping each changed object to primaries through `mapping`; and make `K`
    /// readable from the cache.
    pub fn watches<K: Kind>(mut self, mapping: Mapping) -> Self {
        self.description.watches.push(Watch {
            kind: K::gvk(),
            mapping,
        });
        self
    }

    /// Watch `K`, reconciling the `for` object that controls it (through its controller
    /// ownerReference), like [`owns`](Self::owns); for a kind the primary controls but that
    /// reads better as watched.
    pub fn watches_owner<K: Kind>(self) -> Self {
        self.watches::<K>(Mapping::Owner)
    }

    /// Watch `K`: the value of label `key` on a changed object names the primary to reconcile,
    /// in the object's namespace. Objects without the label trigger nothing.
    pub fn watches_label<K: Kind>(self, key: impl Into<String>) -> Self {
        self.watches::<K>(Mapping::Label(key.into()))
    }

    /// Watch `K`: the guest's [`Reconciler::map`](crate::Reconciler::map) says which primaries
    /// a changed object maps to.
    pub fn watches_guest_map<K: Kind>(self) -> Self {
        self.watches::<K>(Mapping::GuestMap)
    }

    /// Watch only these namespaces (each must be granted, or the guest is refused at load
    /// time). Not calling it means every namespace the guest is granted.
    pub fn namespaces<I>(mut self, namespaces: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.description
            .namespaces
            .extend(namespaces.into_iter().map(Into::into));
        self
    }

    /// Reconcile only primaries whose labels match `selector` (Kubernetes label selector
    /// syntax).
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.description.label_selector = selector.into();
        self
    }

    /// Index `K` by the value at `path` (dotted JSON path, e.g. `spec.nodeName`), so that
    /// [`ListOptions::field`](crate::ListOptions::field) can match on it. `K` must also be
    /// declared as `for`, owned or watched.
    pub fn field_index<K: Kind>(mut self, path: impl Into<String>) -> Self {
        self.description.field_indexes.push(FieldIndex {
            kind: K::gvk(),
            path: path.into(),
        });
        self
    }

    /// Plain cache reads, possibly stale even after this guest's own writes; cheaper than the
    /// default read-your-writes, which may wait (bounded) for the cache to catch up.
    pub fn eventual(self) -> Self {
        self.consistency(Consistency::Eventual)
    }

    /// Sets the consistency of cache reads.
    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.description.consistency = consistency;
        self
    }

    /// Adds an owned kind given as a [`Gvk`], for kinds without a Rust type.
    pub fn owns_gvk(mut self, kind: Gvk) -> Self {
        self.description.owns.push(kind);
        self
    }

    /// The finished description.
    pub fn build(self) -> Description {
        self.description
    }
}

impl From<DescriptionBuilder> for Description {
    fn from(builder: DescriptionBuilder) -> Self {
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

    use super::*;

    #[test]
    fn defaults_are_all_namespaces_and_read_your_writes() {
        let d = describe::<ConfigMap>().build();
        assert_eq!(d.for_, ConfigMap::gvk());
        assert!(d.owns.is_empty() && d.watches.is_empty() && d.namespaces.is_empty());
        assert_eq!(d.consistency, Consistency::ReadYourWrites);
    }

    #[test]
    fn builder_collects_everything() {
        let d = describe::<ConfigMap>()
            .owns::<Secret>()
            .watches_label::<Pod>("app")
            .watches_guest_map::<Secret>()
            .namespaces(["a", "b"])
            .label_selector("x=y")
            .field_index::<Pod>("spec.nodeName")
            .eventual()
            .build();
        assert_eq!(d.owns, [Secret::gvk()]);
        assert_eq!(
            d.watches[0],
            Watch {
                kind: Pod::gvk(),
                mapping: Mapping::Label("app".into())
            }
        );
        assert_eq!(d.watches[1].mapping, Mapping::GuestMap);
        assert_eq!(d.namespaces, ["a", "b"]);
        assert_eq!(d.label_selector, "x=y");
        assert_eq!(d.field_indexes[0].path, "spec.nodeName");
        assert_eq!(d.consistency, Consistency::Eventual);
    }
}
