//! Pooled instances are still fresh instances: nothing a reconcile leaves in its instance, a
//! global, heap bytes or heap growth, reaches a later reconcile, even though the pooling
//! allocator hands the same memory slot from one instance to the next.
//!
//! The probe guest's `leak-` behaviour counts its reconciles in a global, reports how many bytes
//! of a fresh 1 MiB heap block are not zero and how large its memory is at the start, and then
//! leaves all three marks behind (the global bumped, the block filled with 0xCD, 4 MiB leaked).
//! The TypeScript, Python and Go test guests (`errors_ts`, `errors_py`, `errors_go`) do the same
//! in their own language's terms: a module-level counter, and 4 MiB held in a module-level list.

use crate::common;

use std::time::Duration;

use common::controllers::{start, wait_annotation};
use common::wait::wait_until;
use common::{cm, namespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use serde_json::json;
use testenv::ControlPlane;

const RESULT: &str = "probe.reconciled.dev/result";

/// Field `name` (say `runs:`) of a `leak-` record.
fn field(record: &str, name: &str) -> String {
    record
        .split(' ')
        .find_map(|f| f.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in {record:?}"))
        .to_string()
}

/// Starts guest `stem` in a new namespace `ns` with two `leak-` ConfigMaps, reconciled by two
/// workers so that slots are handed between keys too; then, `rounds` times, changes both and
/// hands each record to `check`.
async fn leak_rounds(stem: &str, ns: &str, rounds: u32, mut check: impl FnMut(&str, u32, &str)) {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for name in ["leak-a", "leak-b"] {
        api.create(&PostParams::default(), &cm(name, &[("v", "0")]))
            .await
            .unwrap();
    }
    let settings = Settings {
        grant: Grant::namespaces([ns]),
        workers: 2,
        ..Settings::new(ns)
    };
    let (c, _f, _r) = start(admin.clone(), stem, settings)
        .await
        .map_err(|(e, _)| e)
        .unwrap();
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
            check(name, v, &record);
        }
    }
    // Each round reconciled both objects at least once: the same pool slots were handed on
    // many times. The count is waited for, not read once: the guest writes its record during
    // the reconcile, and the reconcile is counted only after it returns.
    let want = 2 * u64::from(rounds);
    wait_until(
        &format!("{stem}: {want} reconciles for {rounds} rounds"),
        Duration::from_secs(30),
        || c.snapshot().reconciles_ok >= want,
    )
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_global_or_heap_byte_of_one_reconcile_reaches_the_next() {
    let mut first_pages = None;
    leak_rounds("probe", "isolation", 25, |name, v, record| {
        let (runs, dirty, pages) = (
            field(record, "runs:"),
            field(record, "dirty:"),
            field(record, "pages:"),
        );
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
    })
    .await;
}

/// The same guarantee where the language's runtime (SpiderMonkey, CPython, Go's) keeps state of
/// its own between calls if the instance were reused: a fresh instance per reconcile, in every
/// language.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_global_of_a_typescript_python_or_go_reconcile_reaches_the_next() {
    for (stem, ns) in [
        ("errors_ts", "isolation-ts"),
        ("errors_py", "isolation-py"),
        ("errors_go", "isolation-go"),
    ] {
        leak_rounds(stem, ns, 10, |name, v, record| {
            let (runs, held) = (field(record, "runs:"), field(record, "held:"));
            assert_eq!(
                runs, "1",
                "{stem} {name}, round {v}: a global survived: {record}"
            );
            assert_eq!(
                held, "0",
                "{stem} {name}, round {v}: a held block survived: {record}"
            );
        })
        .await;
    }
}
