//! Guest cache reads through the WIT boundary, next to native reads of the same objects in the
//! same run, and the cost of a call into a guest (fresh store per call versus a reused one).
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin guest_calls -- 100000
//! ```
//!
//! One namespace holds a 1 KiB `bench-target` and N ConfigMaps of ~1 KiB, 100 of them with
//! `data.indexed=hot`. The `probe` guest's bench behaviours call `cache.get` 1000 times or an
//! indexed `cache.list` (100 results) 100 times per reconcile; the per-read cost is the batch time
//! minus an empty reconcile, divided by the count. Each figure is the median over many batches.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use reconciled::bindings::{Gvk, Request};
use reconciled::factory::InformerFactory;
use reconciled::grant::Grant;
use reconciled::guest::Runtime;
use reconciled::imports::{Declared, GuestContext, Limits};
use reconciled::informer::{InformerKey, Options, Scope};
use reconciled::read_your_writes::Floors;
use reconciled::store::Query;
use reconciled_bench::median;

const NS: &str = "bench";
const GETS: u32 = 1000;
const LISTS: u32 = 100;

fn probe_wasm() -> anyhow::Result<std::path::PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/build.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(out.status.success(), "guests/build.sh failed");
    let text = String::from_utf8(out.stdout)?;
    Ok(text
        .lines()
        .find(|l| l.ends_with("probe.wasm"))
        .ok_or_else(|| anyhow::anyhow!("no probe.wasm"))?
        .into())
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let wasm = probe_wasm()?;
    let cp = testenv::ControlPlane::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(&cp, &wasm, n))
}

async fn run(cp: &testenv::ControlPlane, wasm: &Path, n: usize) -> anyhow::Result<()> {
    let client = cp.admin_client();
    // 100 evenly spread "hot" objects; the rest spread over 1000 other index values.
    let every = (n / 100).max(1);
    reconciled_bench::fill(&client, NS, n, |i| {
        Some(if i % every == 0 {
            "hot".to_string()
        } else {
            format!("cold-{}", i % 1000)
        })
    })
    .await?;
    let payload = "x".repeat(1024);
    let target = ConfigMap {
        metadata: ObjectMeta {
            name: Some("bench-target".into()),
            ..Default::default()
        },
        data: Some([("payload".to_string(), payload)].into()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &target)
        .await?;

    let factory = InformerFactory::new(client.clone(), Options::default());
    let sub = factory.subscribe(
        InformerKey::new("", "v1", "ConfigMap", Scope::namespace(NS)),
        &["data.indexed"],
    )?;
    let informer = sub.informer().clone();
    informer.wait_synced(Duration::from_secs(600)).await?;
    let store = informer.store().clone();
    eprintln!("informer synced: {} objects", store.len());

    let runtime = Runtime::new()?;
    let module = runtime.compile(std::fs::read(wasm)?).await?;
    let limits = Limits {
        host_calls: 1_000_000,
        bytes_out: 1 << 40,
        deadline: Duration::from_secs(120),
        ..Limits::default()
    };
    let ctx = Arc::new(GuestContext {
        name: "bench".into(),
        client,
        grant: Grant::default(),
        declared: HashMap::from([(
            Gvk::new("", "v1", "ConfigMap"),
            Declared {
                informer: informer.clone(),
                floors: Arc::new(Floors::default()),
                indexes: vec!["data.indexed".into()],
            },
        )]),
        read_your_writes: true,
        limits,
        metrics: Default::default(),
    });
    let req = |name: &str| Request {
        namespace: NS.into(),
        name: name.into(),
    };

    // Call overhead: an empty reconcile, fresh store + instance each time, versus one reused.
    let mut fresh = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        module
            .reconcile(ctx.clone(), req("bench-noop"))
            .await
            .result?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        fresh.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mut reused_instance = module.reused_instance(ctx.clone()).await?;
    let mut reused = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        reused_instance
            .reconcile(req("bench-noop"))
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        reused.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let noop_reused = median(&mut reused.clone());

    // Guest get: batches of 1000 reads through the boundary.
    let get_name = format!("bench-get-{GETS}");
    let mut guest_get = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        reused_instance
            .reconcile(req(&get_name))
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        guest_get.push((t.elapsed().as_secs_f64() * 1e6 - noop_reused) / f64::from(GETS));
    }
    // Native peers on the same store: our get plus the copy the boundary needs, and a typed deep
    // copy, which is what controller-runtime's cached Get does (in Go).
    let key = format!("{NS}/bench-target");
    let mut native_copy = Vec::new();
    let mut typed_clone = Vec::new();
    let typed: ConfigMap = serde_json::from_slice(store.get(&key).unwrap().json())?;
    for _ in 0..100 {
        let t = Instant::now();
        for _ in 0..GETS {
            let o = store.get(&key).unwrap();
            std::hint::black_box(String::from_utf8_lossy(o.json()).into_owned());
        }
        native_copy.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(GETS));
        let t = Instant::now();
        for _ in 0..GETS {
            std::hint::black_box(std::hint::black_box(&typed).clone());
        }
        typed_clone.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(GETS));
    }

    // Indexed list of 100 among N, through the boundary and natively.
    let list_name = format!("bench-list-{LISTS}");
    let touched_before = store.touched();
    let mut guest_list = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        reused_instance
            .reconcile(req(&list_name))
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        guest_list.push((t.elapsed().as_secs_f64() * 1e6 - noop_reused) / f64::from(LISTS));
    }
    let touched_per_list = (store.touched() - touched_before) as f64 / f64::from(30 * LISTS);
    let q = Query {
        namespace: Some(NS.into()),
        fields: vec![("data.indexed".into(), "hot".into())],
        ..Query::default()
    };
    let mut native_list = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        for _ in 0..LISTS {
            std::hint::black_box(store.list(&q)?);
        }
        native_list.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(LISTS));
    }
    let hits = store.list(&q)?.len();

    let (fresh_m, reused_m) = (median(&mut fresh), noop_reused);
    let (g, nc, tc) = (
        median(&mut guest_get),
        median(&mut native_copy),
        median(&mut typed_clone),
    );
    let (gl, nl) = (median(&mut guest_list), median(&mut native_list));
    println!(
        "| measurement ({} objects in the namespace) | median | peer in the same run | peer median | ratio |",
        store.len()
    );
    println!("|---|---|---|---|---|");
    println!(
        "| empty reconcile, fresh store + instance per call | {fresh_m:.1} µs | same, instance reused | {reused_m:.1} µs | {:.1}× |",
        fresh_m / reused_m
    );
    println!(
        "| guest `cache.get` of a 1 KiB ConfigMap, through WIT | {g:.2} µs | native store get + JSON copy | {nc:.2} µs | {:.1}× |",
        g / nc
    );
    println!(
        "| guest `cache.get`, through WIT | {g:.2} µs | typed deep copy (what controller-runtime's cached Get does) | {tc:.2} µs | {:.1}× |",
        g / tc
    );
    println!(
        "| guest indexed `cache.list`, {hits} of {}, through WIT | {gl:.1} µs | native indexed store list | {nl:.1} µs | {:.1}× |",
        store.len(),
        gl / nl
    );
    println!(
        "\nobjects examined per indexed list: {touched_per_list:.0} (result size {hits}); module {} bytes, compiled in {:.2?}",
        module.size(),
        module.compile_time()
    );
    Ok(())
}
