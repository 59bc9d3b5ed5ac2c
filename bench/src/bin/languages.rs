//! What a guest costs by the language it is written in: the ConfigMapGenerator example built
//! from Rust, TypeScript (componentize-js), Python (componentize-py) and Go (wasip1, with its
//! own JSON types and with k8s.io/api's), in one run.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin languages
//! ```
//!
//! For each build:
//! - the component's size;
//! - a cold compile (Cranelift, no precompile cache), the median of 3;
//! - a warm load (the precompiled artifact from the cache), the median of 20;
//! - a `describe` call in a fresh store and instance, which calls no import: the cost of a
//!   call by itself, the median of 200;
//! - a reconcile of a generator that does not exist, fresh store and instance: one `cache.get`
//!   (not found) and an answer, the median of 200;
//! - the same reconcile on one instance kept across calls (the `bench` feature; the host never
//!   does this): one `cache.get` and the call, and nothing else; the difference from the fresh
//!   one is what the fresh store and instance cost.
//!
//! The store and instance are made afresh for every call, as the host makes them for every
//! reconcile; the instance's memory starts from the component's snapshot (componentize-js and
//! componentize-py initialise their runtime at build time), copied in on instantiation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciled::guest::artifact_cache::Origin;
use reconciled::guest::bindings::{Gvk, Request};
use reconciled::guest::grant::Grant;
use reconciled::guest::imports::{Declared, GuestContext, Limits};
use reconciled::guest::read_your_writes::Floors;
use reconciled::guest::{Module, Runtime};
use reconciled::informer::factory::InformerFactory;
use reconciled::informer::{InformerKey, Options, Scope};
use reconciled_bench::median;

const NS: &str = "bench-languages";
const BUILDS: [(&str, &str); 5] = [
    ("Rust", "configmap_generator"),
    ("TypeScript", "configmap_generator_ts"),
    ("Python", "configmap_generator_py"),
    ("Go", "configmap_generator_go"),
    ("Go, k8s.io/api types", "configmap_generator_go_typed"),
];

fn main() -> anyhow::Result<()> {
    // --bench: the Go example with k8s.io/api types is built only for benchmarks.
    let wasms = reconciled_bench::guest_wasms(&["--bench"])?;
    let cp = testenv::ControlPlane::start()?;
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/configmap-generator/crd.yaml");
    for args in [
        vec!["apply".to_string(), "-f".into(), crd.display().to_string()],
        vec![
            "wait".into(),
            "--for=condition=established".into(),
            "--timeout=30s".into(),
            "crd/configmapgenerators.example.reconciled.dev".into(),
        ],
    ] {
        let out = cp.kubectl().args(&args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(&cp, &wasms))
}

struct Row {
    language: &'static str,
    size: usize,
    cold: f64,
    warm: f64,
    describe: f64,
    fresh: f64,
    kept: f64,
}

async fn run(
    cp: &testenv::ControlPlane,
    wasms: &HashMap<String, std::path::PathBuf>,
) -> anyhow::Result<()> {
    let client = cp.admin_client();
    testenv::fixtures::create_namespace(&client, NS).await?;
    let factory = InformerFactory::new(client.clone(), Options::default());
    let kind = Gvk::new("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator");
    let sub = factory.subscribe(
        InformerKey::new(&kind.group, &kind.version, &kind.kind, Scope::namespace(NS)),
        &[],
    )?;
    let informer = sub.informer().clone();
    informer.wait_synced(Duration::from_secs(60)).await?;
    let ctx = Arc::new(GuestContext {
        name: "bench".into(),
        client,
        identity: None,
        grant: Grant::default(),
        declared: HashMap::from([(
            kind,
            Declared {
                informer,
                floors: Arc::new(Floors::default()),
                indexes: Vec::new(),
            },
        )]),
        read_your_writes: true,
        limits: Limits::default(),
        metrics: Default::default(),
        world: Default::default(),
        settings: Default::default(),
        recorder: None,
        taped: false,
    });
    let cache =
        std::env::temp_dir().join(format!("reconciled-bench-languages-{}", std::process::id()));
    let mut rows = Vec::new();
    for (language, stem) in BUILDS {
        if stem.ends_with("_typed") && !wasms.contains_key(stem) {
            eprintln!(
                "languages: {language}: skipped, {stem}.wasm is built by guests/build.sh --bench only"
            );
            continue;
        }
        let bytes = std::fs::read(reconciled_bench::wasm(wasms, stem)?)?;
        eprintln!("languages: {language}: {} bytes", bytes.len());
        let mut cold = Vec::new();
        for _ in 0..3 {
            let m = Runtime::new()?.compile(bytes.clone()).await?;
            cold.push(m.compile_time().as_secs_f64() * 1e3);
        }
        let cached = Runtime::new()?.with_artifact_cache(&cache)?;
        cached.compile(bytes.clone()).await?.persist_artifact();
        let mut warm = Vec::new();
        let mut module: Option<Module> = None;
        let started = Instant::now();
        while warm.len() < 20 {
            // A module still held would be shared (`Origin::Memory`), not loaded again.
            module = None;
            let m = cached.compile(bytes.clone()).await?;
            if m.origin() == Origin::Cache {
                warm.push(m.compile_time().as_secs_f64() * 1e3);
                module = Some(m);
            } else {
                // The artifact is stored in the background; wait for it.
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(60),
                    "{language}: the precompiled artifact never appeared in {}",
                    cache.display()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let module = module.expect("20 warm loads");
        let mut describe = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            module
                .describe(Limits::default())
                .await
                .map_err(|e| anyhow::anyhow!("{language}: describe: {e}"))?;
            describe.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut reconcile = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            let r = module
                .reconcile(
                    ctx.clone(),
                    Request {
                        namespace: NS.into(),
                        name: "absent".into(),
                    },
                )
                .await;
            r.result
                .map_err(|e| anyhow::anyhow!("{language}: reconcile: {e}"))?
                .map_err(|e| anyhow::anyhow!("{language}: reconcile: {e:?}"))?;
            reconcile.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // The same reconcile on one instance kept across calls: what is left is the call itself,
        // so the difference is what a fresh store and instance cost.
        let mut reused_instance = module.reused_instance(ctx.clone()).await?;
        let mut reused = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            reused_instance
                .reconcile(Request {
                    namespace: NS.into(),
                    name: "absent".into(),
                })
                .await?
                .map_err(|e| anyhow::anyhow!("{language}: reconcile: {e:?}"))?;
            reused.push(t.elapsed().as_secs_f64() * 1e6);
        }
        rows.push(Row {
            language,
            size: bytes.len(),
            cold: median(&mut cold),
            warm: median(&mut warm),
            describe: median(&mut describe),
            fresh: median(&mut reconcile),
            kept: median(&mut reused),
        });
    }
    let _ = std::fs::remove_dir_all(&cache);

    println!("## Guests by language: the ConfigMapGenerator in Rust, TypeScript, Python and Go\n");
    println!("Command: `cargo run --release -p reconciled-bench --bin languages`\n");
    println!(
        "| language | component | cold compile ms | warm load ms | describe, fresh instance µs | reconcile with one cache.get, fresh instance µs | the same, kept instance µs |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} MB | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} |",
            r.language,
            r.size as f64 / 1e6,
            r.cold,
            r.warm,
            r.describe,
            r.fresh,
            r.kept
        );
    }
    let rust = &rows[0];
    println!(
        "\n| ratio to Rust | component | cold compile | warm load | describe, fresh | reconcile, fresh | reconcile, kept |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows[1..] {
        println!(
            "| {} | {:.0}x | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.1}x |",
            r.language,
            r.size as f64 / rust.size as f64,
            r.cold / rust.cold,
            r.warm / rust.warm,
            r.describe / rust.describe,
            r.fresh / rust.fresh,
            r.kept / rust.kept
        );
    }
    Ok(())
}
