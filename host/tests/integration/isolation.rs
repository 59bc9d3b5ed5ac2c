//! Pooled instances are still fresh instances: nothing a reconcile leaves in its instance, a
//! global, heap bytes or heap growth, reaches a later reconcile, even though the pooling
//! allocator hands the same memory slot from one instance to the next.
//!
//! The probe guest's `leak-` behaviour counts its reconciles in a global, reports how many bytes
//! of a fresh 1 MiB heap block are not zero and how large its memory is at the start, and then
//! leaves all three marks behind (the global bumped, the block filled with 0xCD, 4 MiB leaked).

use crate::common;

use std::time::Duration;

use common::controllers::{start, wait_annotation};
use common::{cm, namespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use serde_json::json;
use testenv::ControlPlane;

const RESULT: &str = "probe.reconciled.dev/result";

/// The `runs`, `dirty` and `pages` fields of a `leak-` record.
fn marks(record: &str) -> (String, String, String) {
    let field = |name: &str| {
        record
            .split(' ')
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {record:?}"))
            .to_string()
    };
    (field("runs:"), field("dirty:"), field("pages:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_global_or_heap_byte_of_one_reconcile_reaches_the_next() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "isolation";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    // Two objects, reconciled by two workers, so that slots are handed between keys too.
    for name in ["leak-a", "leak-b"] {
        api.create(&PostParams::default(), &cm(name, &[("v", "0")]))
            .await
            .unwrap();
    }
    let settings = Settings {
        grant: Grant::namespaces([ns]),
        workers: 2,
        ..Settings::new("isolation")
    };
    let (c, _f, _r) = start(admin.clone(), "probe", settings)
        .await
        .map_err(|(e, _)| e)
        .unwrap();

    let mut first_pages = None;
    let rounds = 25;
    for v in 1..=rounds {
        for name in ["leak-a", "leak-b"] {
            let patch = json!({ "data": { "v": v.to_string() } });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        for name in ["leak-a", "leak-b"] {
            let want = format!("v:{v} ");
            let record = wait_annotation(&api, name, RESULT, Duration::from_secs(30), |r| {
                r.starts_with(&want)
            })
            .await;
            let (runs, dirty, pages) = marks(&record);
            assert_eq!(runs, "1", "{name}, round {v}: a global survived: {record}");
            assert_eq!(
                dirty, "0",
                "{name}, round {v}: heap bytes survived: {record}"
            );
            let first = first_pages.get_or_insert_with(|| pages.clone());
            assert_eq!(
                &pages, first,
                "{name}, round {v}: the memory kept an earlier reconcile's growth: {record}"
            );
        }
    }
    // Each round reconciled both objects at least once (and their own annotation writes once
    // more each): the same pool slots were handed on many times.
    let reconciles = c.snapshot().reconciles_ok;
    assert!(
        reconciles >= 2 * rounds as u64,
        "only {reconciles} reconciles for {rounds} rounds"
    );
}
