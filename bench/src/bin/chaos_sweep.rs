//! `reconciled test --chaos`, measured: the whole sweep of each example's fixtures in each
//! language (plans, time per plan, plans per second), against its peer in the same run, the
//! plain `reconciled test` of the same fixtures (one reconcile a case); and the time the sweep of
//! each buggy case of `guests/chaos-bugs` takes to find its bug.
//!
//! In process, as the command runs them: one compiled module per guest, then `rounds` sweeps;
//! medians. No control plane.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin chaos_sweep [rounds]
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use reconciled::guest::Runtime;
use reconciled::offline::chaos::{self, Options};
use reconciled::offline::fixture::{self, Case};
use reconciled::offline::runner::Subject;
use reconciled::offline::suite;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn subject(runtime: &Runtime, module: &Path, dir: &Path) -> anyhow::Result<Subject> {
    let bytes = std::fs::read(module).with_context(|| module.display().to_string())?;
    let compiled = runtime
        .compile(bytes)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", module.display()))?;
    let kinds = suite::kinds(Some(dir), &[])?;
    Subject::new(compiled, kinds)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", module.display()))
}

fn cases(dir: &Path) -> anyhow::Result<Vec<Case>> {
    let (paths, _) = fixture::scan(dir)?;
    Ok(paths
        .iter()
        .map(|p| Case::load(p))
        .collect::<Result<_, _>>()?)
}

struct Row {
    module: String,
    cases: usize,
    plans: usize,
    plain: Duration,
    sweep: Duration,
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map_or(Ok(5), |a| a.parse())?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let wasms = reconciled_bench::guest_wasms(&[])?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let runtime = Runtime::new()?;
    let options = Options {
        budget: chaos::DEFAULT_BUDGET,
        seed: 0,
        only: None,
    };
    let mut examples: Vec<(String, PathBuf)> = Vec::new();
    for example in ["configmap-generator", "reservation"] {
        for lang in ["", "-ts", "-py", "-go"] {
            let stem = format!("{example}{lang}").replace('-', "_");
            let dir = root.join(format!("examples/{example}{lang}/fixtures"));
            examples.push((stem, dir));
        }
    }
    let mut rows = Vec::new();
    for (stem, dir) in &examples {
        let module = reconciled_bench::wasm(&wasms, stem)?;
        let subject = rt.block_on(subject(&runtime, &module, dir))?;
        let cases = cases(dir)?;
        let (mut plain, mut sweep, mut plans) = (Vec::new(), Vec::new(), 0);
        for _ in 0..rounds {
            let started = Instant::now();
            rt.block_on(suite::run(&subject, dir, false, None))?;
            plain.push(started.elapsed());
            let started = Instant::now();
            plans = 0;
            for case in &cases {
                let swept = rt.block_on(chaos::sweep(&subject, case, &options))?;
                anyhow::ensure!(swept.ok(), "{stem} {}: a plan failed", case.name);
                plans += swept.ran;
            }
            sweep.push(started.elapsed());
        }
        eprintln!("chaos_sweep: {stem} done");
        rows.push(Row {
            module: stem.clone(),
            cases: cases.len(),
            plans,
            plain: median(plain),
            sweep: median(sweep),
        });
    }
    println!(
        "| module | cases | plans | whole sweep | per plan | plans/s | plain `test`, per case | a plan ÷ a plain case |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let per_plan = r.sweep.as_secs_f64() / r.plans.max(1) as f64;
        let per_case = r.plain.as_secs_f64() / r.cases as f64;
        println!(
            "| {} | {} | {} | {:.0} ms | {:.2} ms | {:.0} | {:.2} ms | {:.1}× |",
            r.module,
            r.cases,
            r.plans,
            r.sweep.as_secs_f64() * 1000.0,
            per_plan * 1000.0,
            r.plans as f64 / r.sweep.as_secs_f64(),
            per_case * 1000.0,
            per_plan / per_case
        );
    }

    let dir = root.join("guests/chaos-bugs/fixtures");
    let module = reconciled_bench::wasm(&wasms, "chaos_bugs")?;
    let subject = rt.block_on(subject(&runtime, &module, &dir))?;
    println!();
    println!("| bug | plans | failing plans | the first | time to find (whole sweep) |");
    println!("|---|---|---|---|---|");
    for case in cases(&dir)?
        .into_iter()
        .filter(|c| c.name.ends_with("-buggy"))
    {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..rounds {
            let started = Instant::now();
            let swept = rt.block_on(chaos::sweep(&subject, &case, &options))?;
            times.push(started.elapsed());
            last = Some(swept);
        }
        let swept = last.context("at least one round")?;
        anyhow::ensure!(!swept.ok(), "{}: the bug was not found", case.name);
        println!(
            "| {} | {} | {} | `{}` | {:.1} ms |",
            case.name.trim_end_matches("-buggy"),
            swept.ran,
            swept.failed.len(),
            swept.failed[0].plan,
            median(times).as_secs_f64() * 1000.0
        );
    }
    Ok(())
}
