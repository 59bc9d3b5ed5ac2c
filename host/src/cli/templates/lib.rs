//! Reconciles `{{group}}/{{version}}` `{{Kind}}`: writes `status.message` from `spec.message`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciled_guest::{
    Description, Gvk, Kind, Outcome, Reconciler, Request, Result, cache, client, describe,
};
use serde::{Deserialize, Serialize};

/// The custom resource (`crd.yaml`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct {{Kind}} {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the user asks for.
    #[serde(default)]
    pub spec: Spec,
    /// What the reconciler did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

/// What the user asks for.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Spec {
    /// Echoed into the status.
    #[serde(default)]
    pub message: String,
}

/// What the reconciler did.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `reconciled: <spec.message>`.
    pub message: String,
    /// The generation this status is for.
    pub observed_generation: i64,
}

impl Kind for {{Kind}} {
    fn gvk() -> Gvk {
        Gvk::new("{{group}}", "{{version}}", "{{Kind}}")
    }
}

/// The status `obj` should have: the reconciler's logic, pure, so `cargo test` checks it.
pub fn desired_status(obj: &{{Kind}}) -> Status {
    Status {
        message: format!("reconciled: {}", obj.spec.message),
        observed_generation: obj.metadata.generation.unwrap_or_default(),
    }
}

struct Reconcile;

impl Reconciler for Reconcile {
    fn describe() -> Description {
        describe::<{{Kind}}>().build()
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let Some(obj) = cache::get_opt::<{{Kind}}>(&req.namespace, &req.name)? else {
            return Ok(Outcome::Done);
        };
        let status = desired_status(&obj);
        if obj.status.as_ref() != Some(&status) {
            client::update_status(&{{Kind}} {
                status: Some(status),
                ..obj
            })?;
            reconciled_guest::info!("reconciled {}/{}", req.namespace, req.name);
        }
        Ok(Outcome::Done)
    }
}

reconciled_guest::export_reconciler!(Reconcile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_echoes_the_spec_at_its_generation() {
        let obj = {{Kind}} {
            metadata: ObjectMeta {
                generation: Some(3),
                ..ObjectMeta::default()
            },
            spec: Spec {
                message: "hello".into(),
            },
            status: None,
        };
        assert_eq!(
            desired_status(&obj),
            Status {
                message: "reconciled: hello".into(),
                observed_generation: 3,
            }
        );
    }
}
