//! Which resource serves a kind, without discovery: Kubernetes' built-in kinds from
//! k8s-openapi, custom kinds from their CustomResourceDefinitions.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::guest::bindings::Gvk;
use crate::informer::discovery::Resource;

/// A kind this offline server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// Its resource: plural and scope, as discovery would say.
    pub resource: Resource,
    /// Whether it has a status subresource: then a replace of the object leaves its status as it
    /// was, and `/status` replaces only the status.
    pub status: bool,
}

/// The kinds an offline server serves.
#[derive(Debug, Clone, Default)]
pub struct Kinds {
    /// By `(group, version, kind)`.
    by_kind: BTreeMap<(String, String, String), Kind>,
}

/// Why a kind cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither built in nor defined by a CustomResourceDefinition given.
    #[error(
        "kind {kind} is neither built into Kubernetes nor defined by a CustomResourceDefinition given: put its CRD in the fixtures folder (a .yaml file beside the cases) or pass --crd <file>"
    )]
    Unknown {
        /// The kind, as `group/version/Kind`.
        kind: String,
    },
    /// A CustomResourceDefinition without what a resource needs.
    #[error("CustomResourceDefinition {name}: {reason}")]
    BadDefinition {
        /// Its name (or `(unnamed)`).
        name: String,
        /// What is missing.
        reason: String,
    },
}

macro_rules! builtins {
    ($kinds:ident, $( $ty:ty => $status:expr ),* $(,)?) => {
        $(
            $kinds.insert_resource(
                Resource {
                    group: <$ty as k8s_openapi::Resource>::GROUP.to_string(),
                    version: <$ty as k8s_openapi::Resource>::VERSION.to_string(),
                    api_version: <$ty as k8s_openapi::Resource>::API_VERSION.to_string(),
                    kind: <$ty as k8s_openapi::Resource>::KIND.to_string(),
                    plural: <$ty as k8s_openapi::Resource>::URL_PATH_SEGMENT.to_string(),
                    namespaced: std::any::TypeId::of::<<$ty as k8s_openapi::Resource>::Scope>()
                        == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>(),
                },
                $status,
            );
        )*
    };
}

impl Kinds {
    /// Kubernetes' common built-in kinds: core, apps, batch, networking, policy, RBAC,
    /// coordination, autoscaling, events and CustomResourceDefinitions.
    pub fn builtin() -> Self {
        use k8s_openapi::api::{
            apps, autoscaling, batch, coordination, core, events, networking, policy, rbac,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
        let mut kinds = Self::default();
        builtins!(kinds,
            core::v1::ConfigMap => false,
            core::v1::Secret => false,
            core::v1::Service => true,
            core::v1::ServiceAccount => false,
            core::v1::Pod => true,
            core::v1::Namespace => true,
            core::v1::Node => true,
            core::v1::Event => false,
            core::v1::Endpoints => false,
            core::v1::PersistentVolume => true,
            core::v1::PersistentVolumeClaim => true,
            core::v1::ResourceQuota => true,
            core::v1::LimitRange => false,
            apps::v1::Deployment => true,
            apps::v1::StatefulSet => true,
            apps::v1::DaemonSet => true,
            apps::v1::ReplicaSet => true,
            batch::v1::Job => true,
            batch::v1::CronJob => true,
            networking::v1::Ingress => true,
            networking::v1::NetworkPolicy => false,
            policy::v1::PodDisruptionBudget => true,
            rbac::v1::Role => false,
            rbac::v1::RoleBinding => false,
            rbac::v1::ClusterRole => false,
            rbac::v1::ClusterRoleBinding => false,
            coordination::v1::Lease => false,
            autoscaling::v2::HorizontalPodAutoscaler => true,
            events::v1::Event => false,
            apiextensions::v1::CustomResourceDefinition => true,
        );
        kinds
    }

    fn insert_resource(&mut self, resource: Resource, status: bool) {
        let key = (
            resource.group.clone(),
            resource.version.clone(),
            resource.kind.clone(),
        );
        self.by_kind.insert(key, Kind { resource, status });
    }

    /// Adds the kinds a CustomResourceDefinition (as JSON) defines: one per served version.
    pub fn add_definition(&mut self, crd: &Value) -> Result<(), Error> {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or("(unnamed)")
            .to_string();
        let bad = |reason: &str| Error::BadDefinition {
            name: name.clone(),
            reason: reason.to_string(),
        };
        let spec = &crd["spec"];
        let group = spec["group"].as_str().ok_or_else(|| bad("no spec.group"))?;
        let kind = spec["names"]["kind"]
            .as_str()
            .ok_or_else(|| bad("no spec.names.kind"))?;
        let plural = spec["names"]["plural"]
            .as_str()
            .ok_or_else(|| bad("no spec.names.plural"))?;
        let namespaced = match spec["scope"].as_str() {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            _ => return Err(bad("spec.scope is neither Namespaced nor Cluster")),
        };
        let versions = spec["versions"]
            .as_array()
            .ok_or_else(|| bad("no spec.versions"))?;
        for v in versions {
            if v["served"].as_bool() == Some(false) {
                continue;
            }
            let version = v["name"]
                .as_str()
                .ok_or_else(|| bad("a version without a name"))?;
            let status = v["subresources"].get("status").is_some();
            self.insert_resource(
                Resource {
                    group: group.to_string(),
                    version: version.to_string(),
                    api_version: format!("{group}/{version}"),
                    kind: kind.to_string(),
                    plural: plural.to_string(),
                    namespaced,
                },
                status,
            );
        }
        Ok(())
    }

    /// The kind `gvk`.
    pub fn get(&self, gvk: &Gvk) -> Result<&Kind, Error> {
        self.by_kind
            .get(&(gvk.group.clone(), gvk.version.clone(), gvk.kind.clone()))
            .ok_or_else(|| Error::Unknown {
                kind: gvk.to_string(),
            })
    }

    /// The kind of an object's `apiVersion` and `kind`.
    pub fn of_object(&self, api_version: &str, kind: &str) -> Result<&Kind, Error> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.get(&Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        })
    }

    /// The kind served at `/api[s]/<group>/<version>/…/<plural>`.
    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<&Kind> {
        self.by_kind.values().find(|k| {
            k.resource.group == group
                && k.resource.version == version
                && k.resource.plural == plural
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_know_their_plural_scope_and_status() {
        let kinds = Kinds::builtin();
        let cm = kinds.of_object("v1", "ConfigMap").unwrap();
        assert_eq!(cm.resource.plural, "configmaps");
        assert!(cm.resource.namespaced && !cm.status);
        let ns = kinds.of_object("v1", "Namespace").unwrap();
        assert!(!ns.resource.namespaced && ns.status);
        let d = kinds.by_plural("apps", "v1", "deployments").unwrap();
        assert_eq!(d.resource.kind, "Deployment");
    }

    #[test]
    fn a_definition_adds_each_served_version_and_an_unknown_kind_says_how_to_add_it() {
        let mut kinds = Kinds::builtin();
        let crd = serde_json::json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": true, "subresources": {"status": {}}},
                    {"name": "v0", "served": false},
                ],
            },
        });
        kinds.add_definition(&crd).unwrap();
        let w = kinds.of_object("example.com/v1", "Widget").unwrap();
        assert!(w.status && w.resource.namespaced);
        let e = kinds.of_object("example.com/v0", "Widget").unwrap_err();
        assert!(e.to_string().contains("--crd"), "{e}");
    }
}
