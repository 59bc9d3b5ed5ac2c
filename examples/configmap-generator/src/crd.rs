//! The ConfigMapGenerator custom resource, by hand (it matches `crd.yaml`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciled_guest::{Gvk, Kind, Object};
use serde::{Deserialize, Serialize};

/// API group of the custom resource.
pub const GROUP: &str = "example.reconciled.dev";
/// API version of the custom resource.
pub const VERSION: &str = "v1alpha1";
/// Kind of the custom resource.
pub const KIND: &str = "ConfigMapGenerator";

/// Generates `spec.copies` ConfigMaps named `<name>-<i>`, each holding `spec.data`.
///
/// No `apiVersion`/`kind` fields: the SDK fills them in from [`Kind`] on writes, and ignores
/// them on reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ConfigMapGenerator {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What to generate.
    #[serde(default)]
    pub spec: ConfigMapGeneratorSpec,
    /// What was generated; written only by the reconciler, through the status subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConfigMapGeneratorStatus>,
}

/// What to generate.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapGeneratorSpec {
    /// The data every generated ConfigMap holds.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// How many ConfigMaps to generate (the CRD defaults it to 1 and forbids negatives).
    #[serde(default = "one")]
    pub copies: i32,
}

impl Default for ConfigMapGeneratorSpec {
    fn default() -> Self {
        ConfigMapGeneratorSpec {
            data: BTreeMap::new(),
            copies: one(),
        }
    }
}

fn one() -> i32 {
    1
}

/// What the last reconcile generated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapGeneratorStatus {
    /// How many ConfigMaps exist for the current spec.
    #[serde(default)]
    pub generated: i32,
    /// The `metadata.generation` that the last reconcile acted on.
    #[serde(default)]
    pub observed_generation: i64,
}

impl Kind for ConfigMapGenerator {
    fn gvk() -> Gvk {
        Gvk::new(GROUP, VERSION, KIND)
    }
}

impl Object for ConfigMapGenerator {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
