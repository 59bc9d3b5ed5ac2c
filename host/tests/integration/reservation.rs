//! End to end: the Reservation example (a finalizer, a `Ready` condition, status by server-side
//! apply, a guest `map` over a field index) converges a real cluster in every language it is
//! written in: Rust (`examples/reservation`), TypeScript, Python and Go (`-ts`, `-py`, `-go`).
//!
//! It also races status writes against spec edits: with status applied rather than replaced,
//! no reconcile fails with a conflict however fast the spec changes.

use crate::common;

use std::time::Duration;

use common::namespace;
use common::wait::wait_until_async;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use serde_json::{Value, json};
use testenv::ControlPlane;

const FINALIZER: &str = "example.reconciled.dev/release";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reservation_reserves_follows_its_pool_and_releases_on_delete() {
    converges("reservation", "rsv").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_reservation_passes_the_same_test() {
    converges("reservation_ts", "rsv-ts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_reservation_passes_the_same_test() {
    converges("reservation_py", "rsv-py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_reservation_passes_the_same_test() {
    converges("reservation_go", "rsv-go").await;
}

/// How long anything here may take to converge.
const CONVERGES: Duration = Duration::from_secs(60);

/// The `Ready` condition of `r`, and its status's observedGeneration.
fn ready(r: &DynamicObject) -> (Value, Value) {
    let status = &r.data["status"];
    let ready = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    (ready, status["observedGeneration"].clone())
}

struct Cluster {
    client: kube::Client,
    ns: String,
    reservations: Api<DynamicObject>,
    pools: Api<ConfigMap>,
}

impl Cluster {
    async fn pool_entry(&self, pool: &str, key: &str) -> Option<String> {
        let found = self.pools.get_opt(pool).await.unwrap()?;
        found.data.and_then(|d| d.get(key).cloned())
    }

    /// Waits until `name` is Ready with `status` and `reason` at its current generation.
    async fn until_ready(&self, name: &str, status: &str, reason: &str) {
        let what = format!("{name} Ready {status} ({reason})");
        wait_until_async(&what, CONVERGES, || async {
            let r = self.reservations.get(name).await.unwrap();
            let generation = r.metadata.generation.unwrap();
            let (ready, observed) = ready(&r);
            ready["status"] == status
                && ready["reason"] == reason
                && ready["observedGeneration"] == generation
                && observed == generation
        })
        .await;
    }

    /// Waits for an Event with `reason` about `name`: the guest posts it after its status
    /// write, so it may land a moment after the condition does.
    async fn until_event(&self, name: &str, reason: &str) {
        let what = format!("a {reason} Event about {name}");
        wait_until_async(&what, CONVERGES, || async {
            let events = common::wait::events(&self.client, &self.ns, name).await;
            events.iter().any(|(r, _)| r == reason)
        })
        .await;
    }
}

/// The example built as `stem` converges in namespace `ns`, and a race of spec edits against
/// its status writes makes no reconcile fail.
async fn converges(stem: &str, ns: &str) {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    namespace(&admin, ns).await;
    common::install_reservation_crd(cp).await;

    let settings = Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new(ns)
    };
    let Ok((controller, _factory, _runtime)) =
        common::controllers::start(admin.clone(), stem, settings).await
    else {
        panic!("{stem} is refused at load");
    };

    let gvk = GroupVersionKind::gvk("example.reconciled.dev", "v1alpha1", "Reservation");
    let c = Cluster {
        client: admin.clone(),
        ns: ns.to_owned(),
        reservations: Api::namespaced_with(admin.clone(), ns, &ApiResource::from_gvk(&gvk)),
        pools: Api::namespaced(admin.clone(), ns),
    };
    let pp = PostParams::default();
    let pool = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    };
    let reservation = |name: &str, pool: &str, slots: i32| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.reconciled.dev/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name}, "spec": {"pool": pool, "slots": slots},
        }))
        .unwrap()
    };

    // Reserves: the finalizer first, then the entry in the pool, Ready True and an Event.
    c.pools.create(&pp, &pool("gpus")).await.unwrap();
    c.reservations
        .create(&pp, &reservation("training", "gpus", 2))
        .await
        .unwrap();
    c.until_ready("training", "True", "Reserved").await;
    assert_eq!(c.pool_entry("gpus", "training").await.as_deref(), Some("2"));
    let r = c.reservations.get("training").await.unwrap();
    assert_eq!(r.metadata.finalizers, Some(vec![FINALIZER.to_owned()]));
    c.until_event("training", "Reserved").await;

    // A missing pool: Ready False, then its creation maps back (the guest's map over the
    // spec.pool index) and the reservation lands.
    c.reservations
        .create(&pp, &reservation("inference", "tpus", 1))
        .await
        .unwrap();
    c.until_ready("inference", "False", "PoolMissing").await;
    c.until_event("inference", "PoolMissing").await;
    c.pools.create(&pp, &pool("tpus")).await.unwrap();
    c.until_ready("inference", "True", "Reserved").await;
    assert_eq!(
        c.pool_entry("tpus", "inference").await.as_deref(),
        Some("1")
    );

    // The race: spec edits back to back while the guest writes status for each.
    let before = controller.snapshot().reconciles_failed;
    for slots in 3..=12 {
        let patch = json!({"spec": {"slots": slots}});
        c.reservations
            .patch("training", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    c.until_ready("training", "True", "Reserved").await;
    wait_until_async("the pool records the last edit", CONVERGES, || async {
        c.pool_entry("gpus", "training").await.as_deref() == Some("12")
    })
    .await;
    let snap = controller.snapshot();
    assert_eq!(
        snap.reconciles_failed, before,
        "a status write racing spec edits failed no reconcile: {snap:?}"
    );

    // Releases: the finalizer holds the Reservation until its entry is out of the pool.
    c.reservations
        .delete("training", &DeleteParams::default())
        .await
        .unwrap();
    wait_until_async("training deleted", CONVERGES, || async {
        c.reservations.get_opt("training").await.unwrap().is_none()
    })
    .await;
    assert_eq!(c.pool_entry("gpus", "training").await, None);
    c.until_event("training", "Released").await;

    let snap = controller.snapshot();
    let errors = ["training", "inference"].map(|n| controller.last_error(&format!("{ns}/{n}")));
    assert_eq!(
        (snap.traps, snap.reconciles_failed),
        (0, 0),
        "{stem}: last errors {errors:?}; {snap:?}"
    );
    eprintln!("{stem} converged: {snap:?}");
}
