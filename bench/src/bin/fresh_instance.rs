//! The cost of an empty reconcile in a fresh instance, alone, with no cluster: what to run under
//! a profiler (`perf record -g`) to see where a fresh instance's time goes.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin fresh_instance -- [CALLS] [MODULE] [paged]
//! ```
//!
//! The probe guest's `bench-noop` returns at once, so a call is the store, the WASI context,
//! the instantiation from the pool and the call itself. The client points at a closed port: an
//! empty reconcile makes no request. Prints the median of batches of 1000 calls, in µs.
//!
//! With MODULE (a guest's file stem, such as `configmap_generator_ts`), the call is that
//! module's `describe` instead: no host import, so it is the same measure for every language.
//!
//! With `paged`, each call is timed alone, once right after the module's code was paged out
//! (as the host's code pager does to an idle module) and once right after a call, in turn;
//! prints the median of each and their ratio.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use reconciled::guest::Runtime;
use reconciled::guest::artifact_cache::ArtifactCache;
use reconciled::guest::bindings::Request;
use reconciled::guest::grant::Grant;
use reconciled::guest::imports::{GuestContext, Limits};
use reconciled_bench::median;

fn main() -> anyhow::Result<()> {
    let calls: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let stem = std::env::args().nth(2).unwrap_or_else(|| "probe".into());
    let wasm = reconciled_bench::wasm(&reconciled_bench::guest_wasms(&[])?, &stem)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        // The precompile cache spares a TypeScript or Python guest its seconds of compiling.
        let runtime = Runtime::new()?.with_artifact_cache(&ArtifactCache::default_dir())?;
        let module = runtime.compile(std::fs::read(&wasm)?).await?;
        if let Some(stored) = module.persist_artifact() {
            stored.await?;
        }
        let config = kube::Config::new("http://127.0.0.1:9".parse()?);
        let ctx = Arc::new(GuestContext {
            name: "bench".into(),
            client: kube::Client::try_from(config)?,
            identity: None,
            grant: Grant::default(),
            declared: HashMap::new(),
            read_your_writes: true,
            limits: Limits::default(),
            metrics: Default::default(),
            world: Default::default(),
            settings: Default::default(),
            recorder: None,
            taped: false,
        });
        let req = Request {
            namespace: "bench".into(),
            name: "bench-noop".into(),
        };
        let call_once = async || -> anyhow::Result<()> {
            if stem == "probe" {
                module
                    .reconcile(ctx.clone(), req.clone())
                    .await
                    .result?
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            } else {
                module.describe(ctx.limits).await?;
            }
            Ok(())
        };
        if std::env::args().nth(3).as_deref() == Some("paged") {
            let (mut paged, mut warm) = (Vec::new(), Vec::new());
            let mut advised = 0;
            for _ in 0..calls {
                advised = module.page_out_code();
                let t = Instant::now();
                call_once().await?;
                paged.push(t.elapsed().as_secs_f64() * 1e6);
                let t = Instant::now();
                call_once().await?;
                warm.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let (p, w) = (median(&mut paged), median(&mut warm));
            println!(
                "{stem}: first call after {} KiB of code paged out {p:.1} µs, next call {w:.1} µs ({:.1}x), medians of {calls}",
                advised / 1024,
                p / w
            );
            return Ok(());
        }
        let mut batches = Vec::new();
        let mut done = 0;
        while done < calls {
            let t = Instant::now();
            for _ in 0..1000 {
                call_once().await?;
            }
            batches.push(t.elapsed().as_secs_f64() * 1e6 / 1000.0);
            done += 1000;
        }
        let call = if stem == "probe" {
            "empty reconcile"
        } else {
            "describe"
        };
        println!(
            "{stem}: {call}, fresh instance: {:.1} µs median over {} batches of 1000",
            median(&mut batches),
            batches.len()
        );
        anyhow::Ok(())
    })
}
