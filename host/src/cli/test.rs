//! `reconciled test module.wasm fixtures/`: runs a guest against fixture cases with no cluster,
//! compares each outcome with its `expected.yaml`, and exits non-zero on any difference.

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
    module: PathBuf,
    /// The fixtures folder: one folder per case (fixture.yaml, objects.yaml, expected.yaml),
    /// and CustomResourceDefinitions in top-level .yaml files.
    dir: PathBuf,
    /// Rewrite each case's expected.yaml with what the run came to (review the diff before
    /// committing it).
    #[arg(long)]
    update: bool,
    /// Also write the results as JUnit XML here, for CI.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// A file of CustomResourceDefinitions of kinds the guest reads; repeatable.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
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
    let results = suite::run(&subject, &args.dir, args.update).await?;

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
