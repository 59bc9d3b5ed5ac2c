//! `reconciled test --chaos`: each classic controller bug in `guests/chaos-bugs` is found, by
//! the perturbation its kind calls for, with a one-perturbation plan whose printed replay
//! command fails the same way alone; and each bug's fix passes every plan.
//!
//! No control plane here: the command must not need one. `KUBECONFIG` points nowhere to prove it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use crate::common::guests::wasm;
use crate::common::host::output_text;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/chaos-bugs/fixtures")
}

/// `reconciled test --chaos` with `args`, from the fixtures' parent folder, so that the replay
/// command it prints (which names `fixtures`) runs as printed from there too.
fn chaos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .args(["test", "--chaos"])
        .args(args)
        .current_dir(fixtures().parent().unwrap())
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("reconciled runs")
}

/// Each bug, and the start of the plan that must find it.
const BUGS: [(&str, &str); 8] = [
    ("create-unchecked", "stale@"),
    ("create-after-crash", "crash@1:1"),
    ("retry-duplicates", "inject@1:2:"),
    ("delete-on-stale-read", "stale@"),
    ("status-unseen-write", "unseen@1"),
    ("finalizer-before-cleanup", "crash@3:1"),
    ("conflict-done", "inject@1:1:conflict"),
    ("uid-blind", "skip@1"),
];

#[test]
fn every_classic_bug_is_found_with_a_plan_that_replays_and_every_fix_passes() {
    let module = wasm("chaos_bugs");
    let module = module.to_str().unwrap();
    for (bug, finder) in BUGS {
        let buggy = format!("{bug}-buggy");
        let started = Instant::now();
        let out = chaos(&["--case", &buggy, module, "fixtures"]);
        let took = started.elapsed();
        let report = output_text(&out);
        assert!(!out.status.success(), "{buggy} must fail:\n{report}");
        let plan = report
            .lines()
            .filter_map(|l| l.trim().strip_prefix("plan "))
            .find(|p| p.starts_with(finder))
            .unwrap_or_else(|| panic!("{buggy}: no plan {finder}… among\n{report}"));
        eprintln!("{buggy}: found by {plan} in {took:?} (the whole sweep)");
        assert!(
            report.contains("found:") && report.contains("reconciles (outcome [writes]):"),
            "{report}"
        );

        // The replay line, exactly as printed, fails the same way alone.
        let replay = report
            .lines()
            .filter_map(|l| l.trim().strip_prefix("replay: reconciled test --chaos "))
            .find(|l| l.contains(plan) || l.contains(&format!("'{plan}'")))
            .unwrap_or_else(|| panic!("no replay line for {plan} in\n{report}"));
        let args = shell_words(replay);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let again = chaos(&args);
        let text = output_text(&again);
        assert!(!again.status.success(), "{plan} replays:\n{text}");
        assert!(
            text.contains(&format!("FAILED   {buggy}: 1 of 1 plans failed")),
            "only that plan ran, and failed:\n{text}"
        );

        let fixed = chaos(&["--case", bug, module, "fixtures"]);
        let text = output_text(&fixed);
        assert!(fixed.status.success(), "the fix of {bug} passes:\n{text}");
        assert!(text.contains(&format!("ok       {bug}: ")), "{text}");
    }
}

#[test]
fn an_injected_conflict_answered_with_done_is_reported_as_swallowed() {
    let report = one_plan("conflict-done-buggy", "inject@1:1:conflict");
    assert!(
        report.contains("error swallowed: reconcile 1 got conflict on `update chaos.reconciled.dev/v1/Widget default/w/status`"),
        "{report}"
    );
}

#[test]
fn assertions_in_the_style_of_chainsaw_are_checked_at_the_end_of_each_plan() {
    let report = one_plan("finalizer-before-cleanup-buggy", "crash@3:1");
    assert!(
        report.contains(
            "error.yaml: v1/ConfigMap default/registry exists at the end and matches what must not be"
        ),
        "{report}"
    );
}

#[test]
fn a_plan_that_names_nothing_the_run_does_is_a_clear_error() {
    let module = wasm("chaos_bugs");
    let out = chaos(&["--plan", "crash@x", module.to_str().unwrap(), "fixtures"]);
    let report = output_text(&out);
    assert!(!out.status.success());
    assert!(
        report.contains("--plan \"crash@x\" is not a plan; write one as a failing run prints it"),
        "{report}"
    );
    let out = chaos(&["--case", "nope", module.to_str().unwrap(), "fixtures"]);
    let report = output_text(&out);
    assert!(
        report.contains("no case \"nope\" in fixtures; its cases: "),
        "{report}"
    );
}

/// The report of `plan` alone on `case`, which must fail.
fn one_plan(case: &str, plan: &str) -> String {
    let module = wasm("chaos_bugs");
    let out = chaos(&[
        "--case",
        case,
        "--plan",
        plan,
        module.to_str().unwrap(),
        "fixtures",
    ]);
    let report = output_text(&out);
    assert!(
        !out.status.success(),
        "{case} under {plan} fails:\n{report}"
    );
    report
}

/// Splits a command line as a POSIX shell would, for the single quotes the report uses.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}
