//! [`Object`]: a kind with standard object metadata, which the helpers read and change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Kind;

/// A kind with standard object metadata: what the owner-reference, finalizer, event and
/// create-or-update helpers need.
///
/// Every `k8s_openapi` type has it. A hand-written custom resource type implements it in two
/// lines (or implements `k8s_openapi::Resource` and `Metadata`, and gets it with [`Kind`]):
///
/// ```ignore
/// impl Object for MyResource {
///     fn meta(&self) -> &ObjectMeta { &self.metadata }
///     fn meta_mut(&mut self) -> &mut ObjectMeta { &mut self.metadata }
/// }
/// ```
pub trait Object: Kind {
    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// The object's metadata, to change.
    fn meta_mut(&mut self) -> &mut ObjectMeta;
}

impl<K: k8s_openapi::Metadata<Ty = ObjectMeta>> Object for K {
    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.metadata_mut()
    }
}

/// `namespace/name` of an object, for messages (just `name` when cluster-scoped).
pub(crate) fn shown<K: Object>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or("<unnamed>");
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}
