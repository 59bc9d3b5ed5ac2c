//! `reconciled test --chaos`: sweeps each case of a fixtures folder (see
//! [`reconciled::offline::chaos`]), prints each failing plan with its replay command, and exits
//! non-zero if any failed.

use std::path::Path;
use std::time::Instant;

use reconciled::offline::chaos::{self, Options, Perturbation, report};
use reconciled::offline::fixture::Case;
use reconciled::offline::runner::Subject;
use reconciled::offline::suite;

/// What a sweep needs from the command line.
pub(crate) struct ChaosArgs<'a> {
    /// The guest, as given (the replay command names it so).
    pub(crate) module: &'a Path,
    /// The fixtures folder, as given.
    pub(crate) dir: &'a Path,
    /// `--case`.
    pub(crate) only_case: Option<&'a str>,
    /// `--budget`.
    pub(crate) budget: usize,
    /// `--seed`.
    pub(crate) seed: u64,
    /// `--plan`.
    pub(crate) plan: Option<&'a str>,
    /// `--junit`.
    pub(crate) junit: Option<&'a Path>,
}

/// Failing plans shown in full per case; the rest are listed by name.
const SHOWN: usize = 3;

/// Runs `reconciled test --chaos`.
pub(crate) async fn chaos(
    args: ChaosArgs<'_>,
    subject: &Subject,
    started: Instant,
) -> anyhow::Result<()> {
    let only = args.plan.map(Perturbation::parse).transpose()?;
    let options = Options {
        budget: args.budget,
        seed: args.seed,
        only,
    };
    let cases = suite::cases(args.dir, args.only_case)?;
    let mut swept = Vec::new();
    let (mut plans, mut failed_cases) = (0, 0);
    for path in cases {
        let case = Case::load(&path)?;
        let s = chaos::sweep(subject, &case, &options)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        plans += s.ran;
        let per_plan = if s.ran > 0 {
            s.took.as_secs_f64() * 1000.0 / s.ran as f64
        } else {
            0.0
        };
        if let Some(why) = &s.unsettled {
            println!("skipped  {}: {why}", s.case);
        } else if s.ok() {
            println!(
                "ok       {}: {} plans held ({} generated; the reference settles in {} reconciles; {per_plan:.1} ms a plan)",
                s.case, s.ran, s.generated, s.reference_steps
            );
        } else {
            failed_cases += 1;
            println!(
                "FAILED   {}: {} of {} plans failed ({} generated; the reference settles in {} reconciles)",
                s.case,
                s.failed.len(),
                s.ran,
                s.generated,
                s.reference_steps
            );
            for f in &s.reference_findings {
                println!("    {f}");
            }
            for f in s.failed.iter().take(SHOWN) {
                for line in report::describe(args.module, args.dir, &s.case, args.seed, f).lines() {
                    println!("    {line}");
                }
            }
            if s.failed.len() > SHOWN {
                let rest: Vec<String> = s.failed[SHOWN..]
                    .iter()
                    .map(|f| f.plan.to_string())
                    .collect();
                println!(
                    "    and {} more: {} (run one alone with --plan)",
                    rest.len(),
                    rest.join(", ")
                );
            }
        }
        swept.push(s);
    }
    if let Some(path) = args.junit {
        let name = args
            .module
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let xml = report::junit(&name, args.module, args.dir, args.seed, &swept);
        std::fs::write(path, xml)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{} of {} cases held under {plans} plans in {elapsed:.2} s ({:.0} plans/s; {})",
        swept.len() - failed_cases,
        swept.len(),
        plans as f64 / elapsed.max(1e-9),
        args.dir.display()
    );
    if failed_cases > 0 {
        anyhow::bail!(
            "{failed_cases} case(s) failed under --chaos; replay a plan with the command printed under it"
        );
    }
    Ok(())
}
