//! Example reconciler: a ConfigMapGenerator owns `spec.copies` ConfigMaps named `<name>-<i>`,
//! each holding `spec.data`.
//!
//! Reconcile, for one generator:
//! 1. server-side apply ConfigMaps `<name>-0` .. `<name>-(copies-1)`, labelled
//!    [`GENERATOR_LABEL`]`=<name>` and controlled by the generator (so that deleting the generator
//!    deletes them, and a change to one of them reconciles the generator);
//! 2. delete the ones it controls with an index of `copies` or more;
//! 3. if the status is out of date, apply it (server-side apply of the status subresource, which
//!    a spec edit made meanwhile cannot make conflict) and record a `Generated` event.

pub mod crd;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciled_guest::{
    Description, ListOptions, Outcome, Reconciler, Request, Result, cache, client,
    controller_reference, describe, events, in_span, is_controlled_by,
};

use crate::crd::{ConfigMapGenerator, ConfigMapGeneratorStatus};

/// Label on each generated ConfigMap; its value is the generator's name.
pub const GENERATOR_LABEL: &str = "example.reconciled.dev/generator";

/// Server-side apply field manager.
const FIELD_MANAGER: &str = "configmap-generator";

struct Generator;

impl Reconciler for Generator {
    fn describe() -> Description {
        describe::<ConfigMapGenerator>().owns::<ConfigMap>().build()
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let Some(generator) = cache::get_opt::<ConfigMapGenerator>(&req.namespace, &req.name)?
        else {
            // Gone: the garbage collector deletes what it controlled.
            return Ok(Outcome::Done);
        };
        if generator.metadata.deletion_timestamp.is_some() {
            return Ok(Outcome::Done);
        }
        let (namespace, name) = (req.namespace.as_str(), req.name.as_str());
        let copies = generator.spec.copies.max(0);
        let owner = controller_reference(&generator)?;
        // A span of its own in the host's traces, beside the host's spans for each write.
        in_span("apply copies", |span| -> Result<()> {
            span.attribute("copies", copies);
            for i in 0..copies {
                let copy = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("{name}-{i}")),
                        namespace: Some(namespace.to_owned()),
                        labels: Some(BTreeMap::from([(
                            GENERATOR_LABEL.to_owned(),
                            name.to_owned(),
                        )])),
                        owner_references: Some(vec![owner.clone()]),
                        ..ObjectMeta::default()
                    },
                    data: Some(generator.spec.data.clone()),
                    ..ConfigMap::default()
                };
                client::apply(&copy, FIELD_MANAGER, true)?;
            }
            Ok(())
        })?;

        let generated = ListOptions::new()
            .in_namespace(namespace)
            .labels(format!("{GENERATOR_LABEL}={name}"));
        for cm in cache::list::<ConfigMap>(generated)? {
            let Some(cm_name) = cm.metadata.name.as_deref() else {
                continue;
            };
            let surplus = copy_index(name, cm_name).is_some_and(|i| i >= copies);
            if surplus && is_controlled_by(&cm, &generator) {
                match client::delete::<ConfigMap>(namespace, cm_name) {
                    Ok(()) => reconciled_guest::info!("deleted {namespace}/{cm_name}"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }

        let status = ConfigMapGeneratorStatus {
            generated: copies,
            observed_generation: generator.metadata.generation.unwrap_or_default(),
        };
        if generator.status.as_ref() != Some(&status) {
            let applied = ConfigMapGenerator {
                status: Some(status),
                ..generator
            };
            client::apply_status(&applied, FIELD_MANAGER, true)?;
            let message = format!("generated {copies} ConfigMaps");
            // The status is written; a lost event is not worth a retry that would not resend it.
            if let Err(e) = events::normal(&applied, "Generated", &message) {
                reconciled_guest::warn!("cannot record event on {namespace}/{name}: {e}");
            }
        }
        Ok(Outcome::Done)
    }
}

reconciled_guest::export_reconciler!(Generator);

/// `i` for a ConfigMap named `<generator>-<i>`.
fn copy_index(generator: &str, configmap: &str) -> Option<i32> {
    configmap
        .strip_prefix(generator)?
        .strip_prefix('-')?
        .parse()
        .ok()
}
