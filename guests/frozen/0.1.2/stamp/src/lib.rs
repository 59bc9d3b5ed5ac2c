//! The stamp guest as a tenant built it against reconciled:runtime@0.1.2: it reconciles v1
//! ConfigMaps labelled [`SELECTOR`] and merge-patches the annotation [`SEEN`] to
//! `<version>:<data.v>`, writing only when the value changes; the version is its settings'
//! `version` (the interface 0.1.1 added), `wit-0.1.2` without one. A missing ConfigMap is nothing
//! to do; any other host error is the reconcile's error.
//!
//! It uses the frozen 0.1.2 SDK beside it, so the component imports the 0.1.2 interfaces: a
//! current host must link and run it unchanged.

use reconciled_guest::bindings::reconciled::runtime::client::{self as raw_client, PatchBody};
use reconciled_guest::k8s_openapi::api::core::v1::ConfigMap;
use reconciled_guest::serde_json::{self, Value, json};
use reconciled_guest::{Description, Error, Kind, Outcome, Reconciler, Request, Result, describe};

/// The label selector for the ConfigMaps this guest reconciles.
const SELECTOR: &str = "stamp.reconciled.dev/enabled=true";
/// The annotation stamped on each ConfigMap: `<version>:<data.v>`.
const SEEN: &str = "stamp.reconciled.dev/seen";

struct Stamp;

/// What a deployment may say: the version to stamp.
#[derive(reconciled_guest::serde::Deserialize)]
#[serde(crate = "reconciled_guest::serde")]
struct Settings {
    #[serde(default = "built")]
    version: String,
}

fn built() -> String {
    "wit-0.1.2".into()
}

impl Reconciler for Stamp {
    fn describe() -> Description {
        describe::<ConfigMap>().label_selector(SELECTOR).build()
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let kind = ConfigMap::gvk();
        let json = match reconciled_guest::cache::get_raw(&kind, &req.namespace, &req.name) {
            Ok(json) => json,
            Err(e) if e.is_not_found() => return Ok(Outcome::Done),
            Err(e) => return Err(e),
        };
        let cm: Value = serde_json::from_str(&json)
            .map_err(|e| Error::Other(format!("stamp: the host's ConfigMap is not JSON: {e}")))?;
        let v = cm["data"]["v"].as_str().unwrap_or_default();
        let settings: Settings = reconciled_guest::settings()?;
        let version = settings.version;
        let desired = format!("{version}:{v}");
        if cm["metadata"]["annotations"][SEEN].as_str() != Some(desired.as_str()) {
            let patch = json!({ "metadata": { "annotations": { SEEN: desired } } });
            raw_client::patch(
                &kind,
                &req.namespace,
                &req.name,
                &PatchBody::Merge(patch.to_string()),
            )?;
        }
        Ok(Outcome::Done)
    }
}

reconciled_guest::export_reconciler!(Stamp);
