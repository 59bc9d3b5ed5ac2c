//! A worker that dies is noticed. With the `fault-injection` feature a worker of a tenant's
//! guest panics on purpose, over and over, while reconciling one key: the guest must show as
//! failing everywhere an operator or tenant looks (`/status`, `reconciled status`, `/metrics`,
//! an Event on its ConfigMap), keep reconciling its other keys, and serve that key again once
//! the fault clears, without being delivered again.

use crate::common;

use std::time::Duration;

use common::host::{seen, serve, stamped, supervisor_with};
use common::wait::wait_event;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use reconciled::controller::fault;
use reconciled::guest::Blame;
use reconciled::ops::status::{GuestState, GuestStatus, InformerState, Status};
use reconciled::sources::configmap::{ConfigMapSource, LABEL};
use testenv::ControlPlane;

/// Polls `/status` until guest `name` matches `want`; returns its entry and the document.
async fn wait_status(
    addr: std::net::SocketAddr,
    name: &str,
    timeout: Duration,
    want: impl Fn(&GuestStatus) -> bool,
) -> (GuestStatus, Status) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let doc = reconciled::ops::http::get_status(addr).await.unwrap();
        if let Some(g) = doc.guest(name).filter(|g| want(g)) {
            return (g.clone(), doc);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "guest {name} not as wanted within {timeout:?}: {doc:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the sample `line_start` (name and labels) in a Prometheus text exposition.
fn sample(metrics: &str, line_start: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_panics_is_reported_restarted_and_its_key_retried() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "worker-faults";
    common::tenant_namespace(cp, ns).await;
    let objects: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    objects
        .create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    let guest = format!("{ns}/rec/rec");
    // Every reconcile of this key panics in the host's worker until the fault is cleared.
    fault::panic_worker(&guest, &format!("{ns}/work"), u32::MAX);

    let sup = supervisor_with(&cp.admin_config(), None);
    let addr = serve(&sup).await;
    let _source = ConfigMapSource::start(
        sup.factory(),
        sup.clone(),
        common::only(&[ns], common::tenants(&["*"])),
    )
    .unwrap();

    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let delivery = ConfigMap {
        metadata: ObjectMeta {
            name: Some("rec".into()),
            labels: Some([(LABEL.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        binary_data: Some([("rec.wasm".to_string(), ByteString(module))].into()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &delivery)
        .await
        .unwrap();

    // Failing, with the host to blame, within seconds, in /status and `reconciled status`.
    // A third panic: the counters below move after the panic count, and a key is handed out
    // again only once its previous run is counted in full.
    let (g, doc) = wait_status(addr, &guest, Duration::from_secs(60), |g| {
        g.state == GuestState::Failing && g.reconciles.worker_panics >= 3
    })
    .await;
    assert_eq!(g.blame, Some(Blame::Host), "{g:#?}");
    assert!(
        g.reason
            .as_deref()
            .is_some_and(|r| r.contains("worker panicked") && r.contains(&format!("{ns}/work"))),
        "the reason names the key: {g:#?}"
    );
    let table = doc.table();
    let row = table.lines().find(|l| l.starts_with(&guest)).unwrap();
    assert!(
        row.contains("failing") && row.contains("[blame: host]"),
        "{table}"
    );

    // …in /metrics…
    let (_, metrics) = reconciled::ops::http::get(addr, "/metrics").await.unwrap();
    let panics = sample(
        &metrics,
        &format!("reconciled_worker_panics_total{{guest=\"{guest}\"}}"),
    );
    assert!(panics >= Some(2.0), "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            &format!("reconciled_guest_failing{{guest=\"{guest}\"}}")
        ),
        Some(1.0),
        "{metrics}"
    );
    let host_errors = sample(
        &metrics,
        &format!("reconciled_reconcile_errors_total{{guest=\"{guest}\",blame=\"host\"}}"),
    );
    assert!(host_errors >= Some(2.0), "{metrics}");
    // …counted as controller-runtime counts a recovered panic: an error, and a panic…
    let reconcile = |result: &str| {
        sample(
            &metrics,
            &format!(
                "controller_runtime_reconcile_total{{controller=\"{guest}\",result=\"{result}\"}}"
            ),
        )
    };
    assert!(reconcile("error") >= Some(2.0), "{metrics}");
    let panics = sample(
        &metrics,
        &format!("controller_runtime_reconcile_panics_total{{controller=\"{guest}\"}}"),
    );
    assert!(panics >= Some(2.0), "{metrics}");
    // Every informer says how fresh it is: the guest's and the ConfigMap source's, and any the
    // host started meanwhile (the access review's RBAC watch), once synced.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let doc = loop {
        let doc = reconciled::ops::http::get_status(addr).await.unwrap();
        if doc
            .informers
            .iter()
            .all(|i| i.state == InformerState::Synced)
        {
            break doc;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "informers not synced: {doc:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(doc.informers.len() >= 2, "{doc:#?}");
    for i in &doc.informers {
        assert!(i.resource_version > 0, "{i:#?}");
        assert!(i.silent_for_seconds.is_some_and(|s| s < 60.0), "{i:#?}");
    }
    let silent = metrics
        .lines()
        .filter(|l| l.starts_with("reconciled_informer_silent_seconds{"))
        .count();
    assert!(silent >= 2, "{metrics}");

    // …and as an Event on the tenant's ConfigMap.
    wait_event(
        &client,
        ns,
        "rec",
        "GuestFailing",
        "worker panicked",
        Duration::from_secs(30),
    )
    .await;

    // The worker was restarted: another key still reconciles while the first keeps panicking.
    objects
        .create(&PostParams::default(), &stamped("other", "7"))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen(&objects, "other").await.as_deref() != Some("v1:7") {
        assert!(
            std::time::Instant::now() < deadline,
            "a restarted worker did not reconcile another key"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen(&objects, "work").await, None, "the fault still holds");

    // Once the fault clears, the key is retried and the guest serves again, not re-delivered.
    fault::clear();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen(&objects, "work").await.as_deref() != Some("v1:1") {
        assert!(
            std::time::Instant::now() < deadline,
            "the panicking key was not retried"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (g, _) = wait_status(addr, &guest, Duration::from_secs(30), |g| {
        g.state == GuestState::Serving
    })
    .await;
    assert_eq!(g.loads, 1, "served again without a second load: {g:#?}");
    wait_event(
        &client,
        ns,
        "rec",
        "GuestRecovered",
        "reconciling again",
        Duration::from_secs(20),
    )
    .await;
}
