//! Owner references, as controller-runtime's `controllerutil` gives them: the controller
//! reference to an owner, making an owner an object's controller, and asking who controls it.
//!
//! Ownership is by uid: an owner deleted and created again under the same name is another
//! owner.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::meta::shown;
use crate::{Error, Object, Result};

/// The controller owner reference to `owner`: `controller` and `blockOwnerDeletion` true, so
/// that deleting the owner deletes the object and a change to the object reconciles the owner
/// (through `owns`).
///
/// An owner with no name or uid (one not read from the cluster) is [`Error::Invalid`].
pub fn controller_reference<O: Object>(owner: &O) -> Result<OwnerReference> {
    let meta = owner.meta();
    let missing = |field: &str| {
        Error::Invalid(format!(
            "{} {} has no metadata.{field}: an owner must be an object read from the cluster",
            O::gvk().kind,
            shown(owner)
        ))
    };
    let name = meta.name.clone().filter(|n| !n.is_empty());
    let uid = meta.uid.clone().filter(|u| !u.is_empty());
    let gvk = O::gvk();
    Ok(OwnerReference {
        api_version: gvk.api_version(),
        kind: gvk.kind,
        name: name.ok_or_else(|| missing("name"))?,
        uid: uid.ok_or_else(|| missing("uid"))?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Makes `owner` the controller of `obj`, as controller-runtime's `SetControllerReference`.
///
/// A reference to the same owner (by uid) is replaced; other, non-controller references are
/// kept. [`Error::Invalid`] when another owner already controls `obj` (an object has at most
/// one controller), or when `owner` is namespaced and `obj` is in another namespace (the
/// garbage collector ignores such references).
pub fn set_controller_reference<O: Object, T: Object>(owner: &O, obj: &mut T) -> Result<()> {
    let reference = controller_reference(owner)?;
    let owner_ns = owner.meta().namespace.as_deref().unwrap_or_default();
    let obj_ns = obj.meta().namespace.as_deref().unwrap_or_default();
    if !owner_ns.is_empty() && owner_ns != obj_ns {
        return Err(Error::Invalid(format!(
            "{} {} cannot control {} {}: an owner in a namespace can only own objects in that namespace",
            O::gvk().kind,
            shown(owner),
            T::gvk().kind,
            shown(obj)
        )));
    }
    if let Some(other) = controller_of(obj).filter(|r| r.uid != reference.uid) {
        return Err(Error::Invalid(format!(
            "{} {} is already controlled by {} {}; it cannot also be controlled by {} {}",
            T::gvk().kind,
            shown(obj),
            other.kind,
            other.name,
            O::gvk().kind,
            shown(owner)
        )));
    }
    let refs = obj.meta_mut().owner_references.get_or_insert_with(Vec::new);
    refs.retain(|r| r.uid != reference.uid);
    refs.push(reference);
    Ok(())
}

/// Whether `owner` (by uid) is the controller of `obj`.
pub fn is_controlled_by<T: Object, O: Object>(obj: &T, owner: &O) -> bool {
    match (controller_of(obj), owner.meta().uid.as_deref()) {
        (Some(r), Some(uid)) => !uid.is_empty() && r.uid == uid,
        _ => false,
    }
}

/// `obj`'s controller reference (`controller: true`), if it has one.
pub fn controller_of<T: Object>(obj: &T) -> Option<&OwnerReference> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn deployment(name: &str, uid: &str) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..Deployment::default()
        }
    }

    fn configmap(namespace: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_controller_reference_names_the_owner_by_kind_name_and_uid() {
        let r = controller_reference(&deployment("web", "u1")).unwrap();
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str(), r.name.as_str()),
            ("apps/v1", "Deployment", "web")
        );
        assert_eq!(r.uid, "u1");
        assert_eq!(
            (r.controller, r.block_owner_deletion),
            (Some(true), Some(true))
        );
        let err = controller_reference(&deployment("web", "")).unwrap_err();
        assert!(err.message().contains("metadata.uid"), "{err}");
    }

    #[test]
    fn setting_the_controller_replaces_the_same_owner_keeps_others_and_refuses_a_second_controller()
    {
        let (web, api) = (deployment("web", "u1"), deployment("api", "u2"));
        let mut cm = configmap("ns");
        let plain = OwnerReference {
            controller: None,
            ..controller_reference(&api).unwrap()
        };
        cm.metadata.owner_references = Some(vec![plain]);
        set_controller_reference(&web, &mut cm).unwrap();
        set_controller_reference(&web, &mut cm).unwrap();
        assert_eq!(cm.metadata.owner_references.as_ref().unwrap().len(), 2);
        assert!(is_controlled_by(&cm, &web));
        assert!(
            !is_controlled_by(&cm, &api),
            "a plain owner is not the controller"
        );
        assert_eq!(controller_of(&cm).unwrap().name, "web");

        let err = set_controller_reference(&api, &mut cm).unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("already controlled by Deployment web"))
        );
    }

    #[test]
    fn an_owner_cannot_control_an_object_in_another_namespace() {
        let err = set_controller_reference(&deployment("web", "u1"), &mut configmap("other"))
            .unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("only own objects in that namespace"))
        );
    }

    #[test]
    fn nothing_is_controlled_by_an_owner_without_a_uid() {
        let mut cm = configmap("ns");
        set_controller_reference(&deployment("web", "u1"), &mut cm).unwrap();
        assert!(!is_controlled_by(&cm, &deployment("web", "")));
        assert!(controller_of(&configmap("ns")).is_none());
    }
}
