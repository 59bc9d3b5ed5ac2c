//! `reconciled test module.wasm fixtures/`: runs a guest against fixture cases with no cluster,
//! compares each outcome with its `expected.yaml`, and exits non-zero on any difference. With
//! `--chaos`, runs each case to its fixed point under perturbations instead ([`super::chaos`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use reconciled::guest::Runtime;
use reconciled::guest::artifact_cache::ArtifactCache;
use reconciled::offline::runner::Subject;
use reconciled::offline::suite::{self, Verdict};

/// `reconciled test`.
#[derive(Args)]
pub(crate) struct TestArgs {
    /// The guest (.wasm component).
    pub(crate) module: PathBuf,
    /// The fixtures folder: one folder per case (fixture.yaml, objects.yaml, expected.yaml),
    /// and CustomResourceDefinitions in top-level .yaml files.
    pub(crate) dir: PathBuf,
    /// Rewrite each case's expected.yaml with what the run came to (review the diff before
    /// committing it).
    #[arg(long, conflicts_with = "chaos")]
    update: bool,
    /// Also write the results as JUnit XML here, for CI.
    #[arg(long)]
    pub(crate) junit: Option<PathBuf>,
    /// A file of CustomResourceDefinitions of kinds the guest reads; repeatable.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// Only the case in this folder (its name, not a path).
    #[arg(long = "case")]
    pub(crate) only_case: Option<String>,
    /// Run each case to its fixed point, then again under each plan of one perturbation
    /// (crashes, stale reads, skipped states, injected answers, early requeues), and fail on
    /// any end state, create/delete count or swallowed error that differs from the
    /// undisturbed run's. expected.yaml is not read; the guests' logs show only with --plan.
    #[arg(long)]
    pub(crate) chaos: bool,
    /// With --chaos: at most this many plans a case.
    #[arg(long, default_value_t = reconciled::offline::chaos::DEFAULT_BUDGET, requires = "chaos")]
    pub(crate) budget: usize,
    /// With --chaos: chooses which plans run when a case has more than the budget.
    #[arg(long, default_value_t = 0, requires = "chaos")]
    pub(crate) seed: u64,
    /// With --chaos: only this plan, as a failing run prints it (e.g. crash@2:1).
    #[arg(long, requires = "chaos")]
    pub(crate) plan: Option<String>,
}

/// The guest in `module`, compiled (through the precompile cache, so that a TypeScript or
/// Python guest compiles once) and described, with the kinds of `dir` and `crds`.
pub(crate) async fn subject(
    module: &Path,
    dir: Option<&Path>,
    crds: &[PathBuf],
) -> anyhow::Result<Subject> {
    let bytes = std::fs::read(module)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", module.display()))?;
    let mut runtime = Runtime::new()?;
    if let Err(e) = runtime.use_artifact_cache(&ArtifactCache::default_dir()) {
        tracing::debug!("{e}");
    }
    let compiled = runtime
        .compile(bytes)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", module.display()))?;
    let crds: Vec<&Path> = crds.iter().map(PathBuf::as_path).collect();
    let kinds = suite::kinds(dir, &crds)?;
    let subject = Subject::new(compiled, kinds)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", module.display()))?;
    if let Some(stored) = subject.module().persist_artifact() {
        let _ = stored.await;
    }
    Ok(subject)
}

/// Runs `reconciled test`.
pub(crate) async fn test(args: TestArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let subject = subject(&args.module, Some(&args.dir), &args.crds).await?;
    if args.chaos {
        let chaos = super::chaos::ChaosArgs {
            module: &args.module,
            dir: &args.dir,
            only_case: args.only_case.as_deref(),
            budget: args.budget,
            seed: args.seed,
            plan: args.plan.as_deref(),
            junit: args.junit.as_deref(),
        };
        return super::chaos::chaos(chaos, &subject, started).await;
    }
    let results = suite::run(&subject, &args.dir, args.update, args.only_case.as_deref()).await?;

    let mut notes = std::collections::BTreeSet::new();
    for r in &results {
        let ms = r.took.as_secs_f64() * 1000.0;
        match &r.verdict {
            Verdict::Passed => println!("ok       {} ({ms:.1} ms)", r.name),
            Verdict::Updated => println!("updated  {} ({ms:.1} ms)", r.name),
            Verdict::Failed(diff) => {
                println!("FAILED   {} ({ms:.1} ms)", r.name);
                for line in diff.lines() {
                    println!("    {line}");
                }
            }
            Verdict::Unexpected(actual) => {
                println!(
                    "FAILED   {} ({ms:.1} ms): no expected.yaml; this run came to the following (save it with --update):",
                    r.name
                );
                for line in actual.lines() {
                    println!("    {line}");
                }
            }
            Verdict::Broken(e) => println!("BROKEN   {}: {e}", r.name),
        }
        if let Some(m) = &r.message
            && !r.ok()
        {
            println!("    the guest said: {m}");
        }
        notes.extend(r.notes.iter().copied());
    }
    for n in &notes {
        println!("note: {n}");
    }
    if let Some(path) = &args.junit {
        let name = args
            .module
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::fs::write(path, suite::junit(&name, &results))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let failed = results.iter().filter(|r| !r.ok()).count();
    println!(
        "{} of {} cases passed in {:.2} s ({})",
        results.len() - failed,
        results.len(),
        started.elapsed().as_secs_f64(),
        args.dir.display()
    );
    if failed > 0 {
        anyhow::bail!(
            "{failed} case(s) failed; if the new outcome is right, run again with --update and review the diff of expected.yaml"
        );
    }
    Ok(())
}
