//! Guest cache reads through the WIT boundary, next to native reads of the same objects in the
//! same run, and the cost of a call into a guest (fresh store per call versus a reused one).
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin guest_calls -- 100000
//! ```
//!
//! One namespace holds a 1 KiB `bench-target` and N ConfigMaps of ~1 KiB, 100 of them with
//! `data.indexed=hot`. The `probe` guest's bench behaviours call `cache.get` 1000 times (raw
//! JSON, or typed as `cache::get::<ConfigMap>` with the decoding) or an indexed `cache.list`
//! (100 results) 100 times per reconcile; the per-read cost is the batch time minus an empty
//! reconcile, divided by the count. Each figure is the median over many batches.
//!
//! The peer of the reads is controller-runtime's default cached Get, in Go
//! (`bench/peers/controller-runtime --mode cache`), over a cache of every namespace holding the
//! same objects: it Gets each of them once per round. Where it may flatter us: the guest reads
//! one object over and over (hot in the CPU's caches), the peer walks all of them.
//!
//! Last, the store's side of one watch event: 10 000 of those ConfigMaps, spread over 1000
//! namespaces as a cluster-wide informer sees them, each applied to a fresh store (`upsert`) and
//! the watermarks published, as the informer does whenever its delta FIFO drains (after every
//! event under a light load). The peer is kube-rs' reflector store applying the same objects,
//! typed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use reconciled::guest::Runtime;
use reconciled::guest::bindings::{Gvk, Request};
use reconciled::guest::grant::Grant;
use reconciled::guest::imports::{Declared, GuestContext, Limits};
use reconciled::guest::read_your_writes::Floors;
use reconciled::informer::factory::InformerFactory;
use reconciled::informer::store::{Query, Store, Writer};
use reconciled::informer::{InformerKey, Options, Scope};
use reconciled::object::{Object, ObjectRef, Transform};
use reconciled_bench::median;

const NS: &str = "bench";
const GETS: u32 = 1000;
const LISTS: u32 = 100;
/// Objects and namespaces of the store-write measurement.
const WRITES: usize = 10_000;
const WRITE_NAMESPACES: usize = 1000;
/// Events per timed batch of the store-write measurement.
const WRITE_BATCH: usize = 500;

fn probe_wasm() -> anyhow::Result<std::path::PathBuf> {
    reconciled_bench::wasm(&reconciled_bench::guest_wasms(&[])?, "probe")
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
        identity: None,
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
        world: Default::default(),
        settings: Default::default(),
        recorder: None,
        taped: false,
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
    // The SDK's typed read: the boundary plus decoding into a `k8s_openapi` ConfigMap.
    let typed_name = format!("bench-typed-get-{GETS}");
    let mut guest_typed = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        reused_instance
            .reconcile(req(&typed_name))
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        guest_typed.push((t.elapsed().as_secs_f64() * 1e6 - noop_reused) / f64::from(GETS));
    }
    // Native peer on the same store: our get plus the copy the boundary needs.
    let key = format!("{NS}/bench-target");
    let mut native_copy = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        for _ in 0..GETS {
            let o = store.get(&key).unwrap();
            std::hint::black_box(String::from_utf8_lossy(o.json()).into_owned());
        }
        native_copy.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(GETS));
    }
    // controller-runtime's default cached Get (a typed deep copy, in Go), over a cache of every
    // namespace holding the same objects.
    let peer = controller_runtime_get(cp)?;

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

    let writes = store_writes(&store)?;

    let (fresh_m, reused_m) = (median(&mut fresh), noop_reused);
    let (g, gt, nc) = (
        median(&mut guest_get),
        median(&mut guest_typed),
        median(&mut native_copy),
    );
    let cr = peer.get_ns / 1e3;
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
        "| guest `cache.get`, raw JSON, through WIT | {g:.2} µs | controller-runtime's default cached Get (Go, typed deep copy), all namespaces | {cr:.2} µs | {:.2}× |",
        g / cr
    );
    println!(
        "| guest typed read (`cache::get::<ConfigMap>`, decode included) | {gt:.2} µs | controller-runtime's default cached Get | {cr:.2} µs | {:.2}× |",
        gt / cr
    );
    println!(
        "| guest indexed `cache.list`, {hits} of {}, through WIT | {gl:.1} µs | native indexed store list | {nl:.1} µs | {:.1}× |",
        store.len(),
        gl / nl
    );
    println!(
        "| store write of one watch event (`upsert`, then publish the watermarks), {WRITES} objects over {WRITE_NAMESPACES} namespaces | {:.2} µs | kube-rs reflector `apply_watcher_event`, typed | {:.2} µs | {:.1}× |",
        writes.ours,
        writes.peer,
        writes.ours / writes.peer
    );
    println!(
        "\nobjects examined per indexed list: {touched_per_list:.0} (result size {hits}); module {} bytes, compiled in {:.2?}",
        module.size(),
        module.compile_time()
    );
    println!(
        "store write: `upsert` alone {:.2} µs per event, so publishing the watermarks {:.2} µs",
        writes.upsert_only,
        writes.ours - writes.upsert_only
    );
    println!(
        "controller-runtime's Get: median of its rounds over all {} cached objects; its cache synced in {} ms",
        peer.objects, peer.sync_ms
    );
    Ok(())
}

/// What the controller-runtime peer's cache mode measured.
struct PeerGet {
    get_ns: f64,
    objects: u64,
    sync_ms: u64,
}

/// Runs the controller-runtime peer in cache mode over every namespace and reads its Get cost.
fn controller_runtime_get(cp: &testenv::ControlPlane) -> anyhow::Result<PeerGet> {
    let peer = reconciled_bench::build_peer()?;
    let out = std::process::Command::new(&peer)
        .args(["--mode", "cache", "--get-rounds", "5", "--kubeconfig"])
        .arg(cp.kubeconfig_path())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} --mode cache failed",
        peer.display()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(PeerGet {
        get_ns: v["get_ns"].as_f64().unwrap_or(f64::NAN),
        objects: v["objects"].as_u64().unwrap_or(0),
        sync_ms: v["sync_ms"].as_u64().unwrap_or(0),
    })
}

/// Medians per event of [`store_writes`], in µs.
struct Writes {
    /// `upsert` + `publish_watermarks`.
    ours: f64,
    /// `upsert` alone.
    upsert_only: f64,
    /// kube-rs' `apply_watcher_event(&Event::Apply(_))`.
    peer: f64,
}

/// `objects` with their namespace replaced by one of [`WRITE_NAMESPACES`] and their
/// resourceVersion by `first_rv + i`: a watch delivers ever higher versions, so every event
/// moves its namespace's mark, as in a live cluster.
fn rehomed(objects: &[ObjectRef], first_rv: u64) -> anyhow::Result<Vec<ObjectRef>> {
    objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut v = o.to_value();
            v["metadata"]["namespace"] = format!("ns-{:04}", i % WRITE_NAMESPACES).into();
            v["metadata"]["resourceVersion"] = (first_rv + i as u64).to_string().into();
            Ok(Arc::new(Object::from_value(v, &Transform::none(), None)?))
        })
        .collect()
}

/// Times `apply` over `items` in batches of [`WRITE_BATCH`]; the median per item, in µs.
fn per_event<T>(items: &[T], mut apply: impl FnMut(&T)) -> f64 {
    let mut batches: Vec<f64> = items
        .chunks(WRITE_BATCH)
        .map(|chunk| {
            let t = Instant::now();
            for item in chunk {
                apply(item);
            }
            t.elapsed().as_secs_f64() * 1e6 / chunk.len() as f64
        })
        .collect();
    median(&mut batches)
}

/// The store's side of a watch event, ours and kube-rs', on copies of `store`'s objects. Each
/// store first receives every object once (adds, untimed), so that the timed passes are updates
/// of known keys in known namespaces, the steady state of a synced informer.
fn store_writes(store: &Store) -> anyhow::Result<Writes> {
    let sample: Vec<ObjectRef> = store.all().into_iter().take(WRITES).collect();
    let n = sample.len() as u64;
    let added = rehomed(&sample, 1_000_000)?;
    let published = rehomed(&sample, 1_000_000 + n)?;
    let unpublished = rehomed(&sample, 1_000_000 + 2 * n)?;
    let typed: Vec<ConfigMap> = added
        .iter()
        .map(|o| serde_json::from_slice(o.json()))
        .collect::<Result<_, _>>()?;

    let writer = Writer::new();
    for o in &added {
        writer.upsert(o.clone());
        writer.publish_watermarks();
    }
    let ours = per_event(&published, |o| {
        std::hint::black_box(writer.upsert(o.clone()));
        writer.publish_watermarks();
    });
    let upsert_only = per_event(&unpublished, |o| {
        std::hint::black_box(writer.upsert(o.clone()));
    });

    let (_reader, mut peer_writer) = kube::runtime::reflector::store::<ConfigMap>();
    let events: Vec<kube::runtime::watcher::Event<ConfigMap>> = typed
        .into_iter()
        .map(kube::runtime::watcher::Event::Apply)
        .collect();
    for e in &events {
        peer_writer.apply_watcher_event(e);
    }
    let peer = per_event(&events, |e| peer_writer.apply_watcher_event(e));
    Ok(Writes {
        ours,
        upsert_only,
        peer,
    })
}
