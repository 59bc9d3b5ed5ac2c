//! `reconciled test --chaos`: a case run to its fixed point undisturbed (the reference), then
//! again under each plan of one perturbation (a crash after a write, a stale read, a skipped
//! state, an injected answer, an early requeue, unseen own writes), each judged against the
//! reference ([`oracle`]).
//!
//! The perturbations are those of Sieve's and Acto's bug classes, made on the host's side of
//! every read and write the guest makes, so that a sweep of an example takes milliseconds a
//! plan, offline, in any language. Where it may surprise: a run reconciles the case's request
//! only (no other key, so no reordering between keys), and the offline server's limits hold
//! (no garbage collection; apply is a deep merge).

pub mod oracle;
pub mod plans;
pub mod report;
pub mod session;
pub mod trace;

use std::time::{Duration, Instant};

use crate::offline::fixture::Case;
use crate::offline::runner::{CaseError, Subject};

pub use oracle::Finding;
pub use plans::Perturbation;

/// How a sweep runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// At most this many plans a case.
    pub budget: usize,
    /// Chooses the plans when there are more than the budget.
    pub seed: u64,
    /// Only this plan, as printed by a failing run.
    pub only: Option<Perturbation>,
}

/// The default [`Options::budget`].
pub const DEFAULT_BUDGET: usize = 200;

/// A plan that failed, with what it takes to see it again.
#[derive(Debug, Clone)]
pub struct Failed {
    /// The plan.
    pub plan: Perturbation,
    /// What went wrong.
    pub findings: Vec<Finding>,
    /// The perturbed run's reconciles, one line each: outcome and writes.
    pub steps: Vec<String>,
}

/// What a sweep of one case came to.
#[derive(Debug, Clone)]
pub struct Swept {
    /// The case folder's name.
    pub case: String,
    /// Reconciles the reference took.
    pub reference_steps: usize,
    /// Set when the reference itself does not settle: no plan is run, since no end state
    /// exists to compare with. The fixture's faults answering every time do this.
    pub unsettled: Option<String>,
    /// Findings against the reference itself (its `assert.yaml` or `error.yaml`).
    pub reference_findings: Vec<Finding>,
    /// Plans generated before the budget.
    pub generated: usize,
    /// Plans run.
    pub ran: usize,
    /// The plans that failed, in plan order.
    pub failed: Vec<Failed>,
    /// Time taken by the plans (the reference aside).
    pub took: Duration,
}

impl Swept {
    /// Whether the case passes.
    pub fn ok(&self) -> bool {
        self.failed.is_empty() && self.reference_findings.is_empty()
    }
}

/// Sweeps `case`: the reference, then each chosen plan.
pub async fn sweep(subject: &Subject, case: &Case, options: &Options) -> Result<Swept, CaseError> {
    let reference = session::run(subject, case, None).await?;
    let mut swept = Swept {
        case: case.name.clone(),
        reference_steps: reference.steps.len(),
        unsettled: None,
        reference_findings: Vec::new(),
        generated: 0,
        ran: 0,
        failed: Vec::new(),
        took: Duration::ZERO,
    };
    if let Some(phase) = reference.unsettled {
        let last = reference
            .steps
            .last()
            .map(|s| match &s.message {
                Some(m) => format!("{}: {m}", s.outcome),
                None => s.outcome.clone(),
            })
            .unwrap_or_default();
        let after = if phase == 0 {
            "from the start".to_string()
        } else {
            format!("after change {phase}")
        };
        swept.unsettled = Some(format!(
            "the reference does not settle {after} within {} reconciles (the last: {last})",
            case.setup.settle
        ));
        return Ok(swept);
    }
    swept.reference_findings = oracle::assertions(case, &reference.end)
        .into_iter()
        .map(|a| Finding::Assertion(format!("the reference fails it: {a}")))
        .collect();
    let cached = subject.cached_kinds();
    let all = plans::generate(
        &reference.steps,
        &plans::Context {
            cached: &cached,
            reads_its_writes: subject.reads_its_writes(),
            changes: &case.setup.changes,
        },
    );
    swept.generated = all.len();
    let chosen = match &options.only {
        Some(plan) => vec![plan.clone()],
        None => plans::select(all, options.budget, options.seed),
    };
    let started = Instant::now();
    for plan in chosen {
        let run = session::run(subject, case, Some(&plan)).await?;
        swept.ran += 1;
        let findings = oracle::judge(case, &reference, &run);
        if !findings.is_empty() {
            let steps = run
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let writes: Vec<String> = s
                        .writes
                        .iter()
                        .map(|w| match &w.error {
                            Some(e) => format!("{} ({e})", w.key()),
                            None => w.key(),
                        })
                        .collect();
                    format!("{}: {} [{}]", i + 1, s.outcome, writes.join(", "))
                })
                .collect();
            swept.failed.push(Failed {
                plan,
                findings,
                steps,
            });
        }
    }
    swept.took = started.elapsed();
    Ok(swept)
}
