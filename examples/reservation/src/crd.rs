//! The Reservation custom resource, by hand (it matches `crd.yaml`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use reconciled_guest::{Gvk, Kind, Object};
use serde::{Deserialize, Serialize};

/// Records `spec.slots` under its own name in the data of the pool ConfigMap `spec.pool`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Reservation {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What to reserve, and where.
    #[serde(default)]
    pub spec: ReservationSpec,
    /// What the last reconcile saw; written only by the reconciler, by status apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ReservationStatus>,
}

/// What to reserve, and where.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ReservationSpec {
    /// The ConfigMap, in the same namespace, whose data records the reservation.
    #[serde(default)]
    pub pool: String,
    /// How many slots to reserve; absent reads as 1 (the CRD's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<i32>,
}

/// What the last reconcile saw.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    /// The `metadata.generation` the last reconcile acted on (0 when never written).
    #[serde(default)]
    pub observed_generation: i64,
    /// `Ready`, and nothing else.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl Reservation {
    /// `spec.slots`, with the CRD's default.
    pub fn slots(&self) -> i32 {
        self.spec.slots.unwrap_or(1)
    }
}

impl Kind for Reservation {
    fn gvk() -> Gvk {
        Gvk::new("example.reconciled.dev", "v1alpha1", "Reservation")
    }
}

impl Object for Reservation {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
