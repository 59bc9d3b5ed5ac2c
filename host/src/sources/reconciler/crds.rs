//! The `Reconciler` and `ReconcilerRevision` CRDs (`deploy/reconcilers.yaml`, compiled in),
//! installed by the host where it owns the cluster: the embedded control plane of `reconciled
//! run` and `reconciled dev`, so that a `Reconciler` applies there with nothing installed by
//! hand. On a real cluster the platform installs them (the chart, or `kubectl apply`).
//!
//! Where it may surprise: the install is a server-side apply with the field manager
//! `reconciled`, so running it again changes nothing, and a CRD someone else changed is taken
//! back to these definitions (forced).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// The CRDs, as `deploy/reconcilers.yaml` defines them.
pub const YAML: &str = include_str!("../../../../deploy/reconcilers.yaml");

/// Why the CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `deploy/reconcilers.yaml` did not read as CRDs (a build from a broken checkout).
    #[error("the Reconciler CRDs compiled into this binary do not read: {0}")]
    Unreadable(String),
    /// The API server refused the apply.
    #[error(
        "cannot install CRD {name}: {source}; the host needs to create CustomResourceDefinitions, or install deploy/reconcilers.yaml by hand"
    )]
    Apply {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A CRD was applied but never became established.
    #[error(
        "CRD {name} was installed but is not established after {after:?}: {detail}; check `kubectl describe crd {name}`"
    )]
    NotEstablished {
        name: String,
        after: Duration,
        detail: String,
    },
}

/// Whether the API server serves `crd`'s kind.
fn established(crd: &CustomResourceDefinition) -> bool {
    (crd.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// The CRDs of [`YAML`], one per document.
pub fn definitions() -> Result<Vec<CustomResourceDefinition>, Error> {
    serde_saphyr::from_multiple::<CustomResourceDefinition>(YAML)
        .map_err(|e| Error::Unreadable(e.to_string()))
}

/// Applies the CRDs and waits (up to `timeout` in all) until the API server serves both.
pub async fn install(client: &kube::Client, timeout: Duration) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("reconciled").force();
    let deadline = tokio::time::Instant::now() + timeout;
    let crds = definitions()?;
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|source| Error::Apply {
                name: name.clone(),
                source,
            })?;
    }
    // The API server establishes a CRD within moments of its create; each is read until it
    // says so.
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let detail = match api.get(&name).await {
                Ok(crd) if established(&crd) => break,
                Ok(_) => "not established yet".to_string(),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::NotEstablished {
                    name,
                    after: timeout,
                    detail,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_crds_are_the_reconciler_and_its_revisions() {
        let names: Vec<String> = definitions()
            .unwrap()
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "reconcilers.reconciled.dev",
                "reconcilerrevisions.reconciled.dev"
            ]
        );
    }
}
