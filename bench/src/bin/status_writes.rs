//! Status writes: 100 Reconcilers on three replicas, under steady work, against a controller
//! that writes status on every reconcile.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin status_writes -- [--reconcilers 100] [--window-s 120]
//! ```
//!
//! Three replicas (three supervisors with their own Leases and Reconciler sources, in this
//! process, against one loopback control plane) share 100 Reconcilers of one tenant namespace,
//! each running `stamp_v1` from a ConfigMap key. A driver edits one of ten stamped ConfigMaps
//! every second, so every Reconciler reconciles every second and its counts change all the time:
//! the worst case for a status that reports counts. Measured over the window, once every
//! Reconciler is Ready: the status writes the API server served (`apiserver_request_total`,
//! `reconcilers/status`), the reconciles the guests ran, and the writes per Reconciler. The peer
//! is the common controller pattern that writes status at the end of every reconcile: one write
//! per reconcile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use reconciled::guest::Runtime;
use reconciled::guest::identity::Identities;
use reconciled::informer::factory::InformerFactory;
use reconciled::replicas::{Config as ReplicasConfig, Replicas};
use reconciled::sources::configmap::TenantPolicy;
use reconciled::sources::oci::Registry;
use reconciled::sources::reconciler::{Options, ReconcilerSource};
use reconciled::supervisor::{self, Supervisor};

const NS: &str = "bench-status";
const LEASES: &str = "bench-status-leases";
const REPLICAS: usize = 3;

fn main() -> anyhow::Result<()> {
    let (mut reconcilers, mut window) = (100usize, 120u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--reconcilers" => reconcilers = it.next().unwrap_or_default().parse()?,
            "--window-s" => window = it.next().unwrap_or_default().parse()?,
            other => anyhow::bail!(
                "unknown argument {other}; usage: status_writes [--reconcilers 100] [--window-s 120]"
            ),
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stamp = std::fs::read(reconciled_bench::wasm(
        &reconciled_bench::guest_wasms(&[])?,
        "stamp_v1",
    )?)?;
    let cp = testenv::ControlPlane::start()?;
    for (file, ns) in [("reconcilers.yaml", None), ("tenant.yaml", Some(NS))] {
        if let Some(ns) = ns {
            let out = cp.kubectl().args(["create", "namespace", ns]).output()?;
            anyhow::ensure!(out.status.success(), "kubectl create namespace {ns}");
        }
        let mut kubectl = cp.kubectl();
        kubectl.args(["apply", "--server-side"]);
        if let Some(ns) = ns {
            kubectl.args(["-n", ns]);
        }
        let out = kubectl
            .arg("-f")
            .arg(root.join("deploy").join(file))
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl apply {file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = cp
        .kubectl()
        .args([
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/reconcilers.reconciled.dev",
            "crd/reconcilerrevisions.reconciled.dev",
        ])
        .output()?;
    anyhow::ensure!(out.status.success(), "the CRDs are not established");
    let out = cp
        .kubectl()
        .args(["create", "namespace", LEASES])
        .output()?;
    anyhow::ensure!(out.status.success(), "kubectl create namespace {LEASES}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let work = std::env::temp_dir().join(format!("reconciled-status-{}", std::process::id()));
    let result = rt.block_on(run(
        &cp,
        &work,
        &stamp,
        reconcilers,
        Duration::from_secs(window),
    ));
    let _ = std::fs::remove_dir_all(&work);
    let r = result?;
    println!(
        "\n| reconcilers | replicas | window s | reconciles | status writes | writes per reconciler per minute | most writes of one reconciler | status writes per reconcile | peer (status on every reconcile) / reconciled |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let per_minute = r.writes as f64 / reconcilers as f64 / (window as f64 / 60.0);
    println!(
        "| {reconcilers} | {REPLICAS} | {window} | {} | {} | {per_minute:.2} | {} | {:.4} | {:.0}x |",
        r.reconciles,
        r.writes,
        r.most_of_one,
        r.writes as f64 / r.reconciles.max(1) as f64,
        r.reconciles as f64 / r.writes.max(1) as f64,
    );
    Ok(())
}

struct Measured {
    reconciles: u64,
    writes: u64,
    most_of_one: u64,
}

async fn run(
    cp: &testenv::ControlPlane,
    work: &std::path::Path,
    stamp: &[u8],
    n: usize,
    window: Duration,
) -> anyhow::Result<Measured> {
    let admin = cp.admin_client();
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), NS);
    let mut module = ConfigMap::default();
    module.metadata.name = Some("modules".into());
    module.binary_data = Some(
        [(
            "stamp.wasm".to_string(),
            k8s_openapi::ByteString(stamp.to_vec()),
        )]
        .into(),
    );
    cms.create(&PostParams::default(), &module).await?;
    let names: Vec<String> = (0..10).map(|i| format!("work-{i}")).collect();
    reconciled_bench::fill_stamped(&admin, NS, "stamp.reconciled.dev/enabled", names.clone())
        .await?;

    let policy = TenantPolicy {
        kinds: ["v1/ConfigMap".to_string()].into(),
        namespaces: Some([NS.to_string()].into()),
        max_guests_per_namespace: n + 10,
        ..TenantPolicy::default()
    };
    let mut hosts = Vec::new();
    for i in 0..REPLICAS {
        let identity = format!("r{i}");
        let mut config = ReplicasConfig::new(&identity, LEASES);
        config.rebalance_after = Duration::from_secs(5);
        let identities = Identities::new(cp.admin_config())?;
        let replicas = Arc::new(Replicas::start(identities.host().clone(), config).await?);
        let runtime = Runtime::new()?.with_artifact_cache(&work.join("compiled"))?;
        let factory = Arc::new(InformerFactory::new(
            identities.host().clone(),
            Default::default(),
        ));
        let sup = Arc::new(Supervisor::new(
            runtime,
            factory,
            identities,
            supervisor::Options {
                replicas: Some(replicas),
                ..Default::default()
            },
        ));
        let source = ReconcilerSource::start(
            sup.factory(),
            sup.clone(),
            policy.clone(),
            Arc::new(Registry::default()),
            Options::default(),
        )?;
        hosts.push((sup, source));
    }
    let gvk = GroupVersionKind::gvk("reconciled.dev", "v1alpha1", "Reconciler");
    let api =
        Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &ApiResource::from_gvk(&gvk));
    let started = Instant::now();
    for i in 0..n {
        let name = format!("rec-{i:03}");
        let r: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "reconciled.dev/v1alpha1", "kind": "Reconciler",
            "metadata": { "name": name },
            "spec": { "module": { "configMapRef": { "name": "modules", "key": "stamp.wasm" } } },
        }))?;
        api.patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&r),
        )
        .await?;
    }
    // Every Reconciler Ready, and the shards settled among the three.
    loop {
        let ready = api
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|r| {
                r.data["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        eprintln!(
            "status_writes: {ready}/{n} Ready after {:.0?}",
            started.elapsed()
        );
        if ready == n {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "not all Ready within 10 minutes"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    // The driver: one edit a second, round the ten work objects.
    let driver = {
        let cms = cms.clone();
        let names = names.clone();
        tokio::spawn(async move {
            for v in 1u64.. {
                let name = &names[v as usize % names.len()];
                let patch = serde_json::json!({ "data": { "v": v.to_string() } });
                let _ = cms
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    eprintln!("status_writes: warming up for 30 s");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let reconciles = |hosts: &[(Arc<Supervisor>, ReconcilerSource)]| -> u64 {
        hosts
            .iter()
            .flat_map(|(sup, _)| sup.status().guests)
            .map(|g| g.reconciles.ok + g.reconciles.failed + g.reconciles.traps)
            .sum()
    };
    let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (changes, watch) = count_changes(api.clone(), counting.clone());
    // The watch's first list is not counted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes0 = status_writes(cp)?;
    let reconciles0 = reconciles(&hosts);
    counting.store(true, std::sync::atomic::Ordering::Relaxed);
    eprintln!("status_writes: measuring for {window:?}");
    tokio::time::sleep(window).await;
    counting.store(false, std::sync::atomic::Ordering::Relaxed);
    let writes1 = status_writes(cp)?;
    let reconciles1 = reconciles(&hosts);
    driver.abort();
    watch.abort();
    let most_of_one = changes.lock().unwrap().values().copied().max().unwrap_or(0);
    for (sup, source) in hosts {
        drop(source);
        sup.shutdown().await;
        if let Some(r) = sup.replicas() {
            r.shutdown().await;
        }
    }
    Ok(Measured {
        reconciles: reconciles1 - reconciles0,
        writes: (writes1 - writes0) as u64,
        most_of_one,
    })
}

/// The status writes the API server has served for Reconcilers so far.
fn status_writes(cp: &testenv::ControlPlane) -> anyhow::Result<f64> {
    let out = cp.kubectl().args(["get", "--raw", "/metrics"]).output()?;
    anyhow::ensure!(out.status.success(), "kubectl get --raw /metrics");
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"reconcilers\"") && l.contains("subresource=\"status\""))
        .filter(|l| l.contains("verb=\"PATCH\"") || l.contains("verb=\"APPLY\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Counts, per Reconciler, the changes a watch sees while `counting` is set: each is one status
/// write (the source writes only a status that differs, and nothing else edits them here).
fn count_changes(
    api: Api<DynamicObject>,
    counting: Arc<std::sync::atomic::AtomicBool>,
) -> (
    Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
    tokio::task::JoinHandle<()>,
) {
    use futures::StreamExt as _;
    let counts = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let task = tokio::spawn({
        let counts = counts.clone();
        async move {
            let mut events = std::pin::pin!(kube::runtime::watcher(api, Default::default()));
            while let Some(e) = events.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(r)) = e
                    && counting.load(std::sync::atomic::Ordering::Relaxed)
                {
                    *counts
                        .lock()
                        .unwrap()
                        .entry(r.metadata.name.unwrap_or_default())
                        .or_default() += 1;
                }
            }
        }
    });
    (counts, task)
}
