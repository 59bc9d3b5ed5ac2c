//! The cost of an empty reconcile in a fresh instance, alone, with no cluster: what to run under
//! a profiler (`perf record -g`) to see where a fresh instance's time goes.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin fresh_instance -- [CALLS]
//! ```
//!
//! The probe guest's `bench-noop` returns at once, so a call is the store, the WASI context,
//! the instantiation from the pool and the call itself. The client points at a closed port: an
//! empty reconcile makes no request. Prints the median of batches of 1000 calls, in µs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use reconciled::guest::Runtime;
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
    let wasm = reconciled_bench::wasm(&reconciled_bench::guest_wasms(&[])?, "probe")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let runtime = Runtime::new()?;
        let module = runtime.compile(std::fs::read(&wasm)?).await?;
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
        let mut batches = Vec::new();
        let mut done = 0;
        while done < calls {
            let t = Instant::now();
            for _ in 0..1000 {
                module
                    .reconcile(ctx.clone(), req.clone())
                    .await
                    .result?
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            }
            batches.push(t.elapsed().as_secs_f64() * 1e6 / 1000.0);
            done += 1000;
        }
        println!(
            "empty reconcile, fresh instance: {:.1} µs median over {} batches of 1000",
            median(&mut batches),
            batches.len()
        );
        anyhow::Ok(())
    })
}
