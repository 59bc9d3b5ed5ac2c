//! `reconciled test`: the ConfigMapGenerator and the Reservation in every language pass the
//! same fixtures (including the error paths) with no cluster, and `--chaos` with its default
//! budget; a changed outcome fails with a diff and JUnit failure, and `--update` writes the
//! outcome back.
//!
//! No control plane here: the command must not need one. `KUBECONFIG` points nowhere to prove it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::guests::wasm;
use common::host::{TempDir, output_text};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn reconciled_test(module: &Path, dir: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .arg("test")
        .arg(module)
        .arg(dir)
        .args(extra)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("reconciled runs")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            // Follows the crd.yaml symlink: the copy holds the definition itself.
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// The four languages' modules of one example: its Rust crate, then `-ts`, `-py` and `-go`.
fn in_every_language(example: &str) -> [(String, String); 4] {
    let module = example.replace('-', "_");
    ["", "_ts", "_py", "_go"].map(|suffix| {
        (
            format!("{module}{suffix}"),
            format!("{example}{}", suffix.replace('_', "-")),
        )
    })
}

/// Runs `example`'s shared fixtures against its module in every language: each case in
/// `cases` must run and pass, with the JUnit report counting them all.
fn passes_the_same_fixtures(example: &str, cases: &[&str]) {
    let junit_dir = TempDir::new("fixtures-junit");
    for (module, folder) in in_every_language(example) {
        let fixtures = examples().join(&folder).join("fixtures");
        let junit = junit_dir.0.join(format!("{module}.xml"));
        // The first run may compile the module (seconds for TypeScript and Python) and store
        // it in the artifact cache; the second is what an author's loop costs.
        let first = reconciled_test(&wasm(&module), &fixtures, &[]);
        assert!(first.status.success(), "{module}:\n{}", output_text(&first));
        let started = Instant::now();
        let out = reconciled_test(
            &wasm(&module),
            &fixtures,
            &["--junit", junit.to_str().unwrap()],
        );
        let took = started.elapsed();
        let report = output_text(&out);
        assert!(out.status.success(), "{module}:\n{report}");
        eprintln!(
            "{module}: {} in {took:?} (the whole command, warm)",
            report
                .lines()
                .rev()
                .find(|l| l.contains("cases passed"))
                .unwrap_or("")
        );
        for case in cases {
            assert!(
                report.contains(&format!("ok       {case} ")),
                "{module}: case {case} ran and passed:\n{report}"
            );
        }
        assert!(
            report.contains("note: server-side apply is modelled"),
            "{module}: what offline apply cannot model is said:\n{report}"
        );
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(
            xml.contains(&format!(r#"tests="{}""#, cases.len())) && xml.contains(r#"failures="0""#),
            "{xml}"
        );

        // The same cases, each to its fixed point under every plan of the default budget.
        let started = Instant::now();
        let out = reconciled_test(&wasm(&module), &fixtures, &["--chaos"]);
        let report = output_text(&out);
        assert!(out.status.success(), "{module} under --chaos:\n{report}");
        eprintln!(
            "{module}: {} in {:?}",
            report.lines().last().unwrap_or(""),
            started.elapsed()
        );
        for case in cases {
            assert!(
                report.contains(&format!("ok       {case}: "))
                    || report.contains(&format!("skipped  {case}: the reference does not settle")),
                "{module}: case {case} was swept:\n{report}"
            );
        }
        let held = report
            .lines()
            .filter(|l| l.starts_with("ok       "))
            .count();
        assert!(
            held + 1 >= cases.len(),
            "{module}: only a case whose fixture refuses every time may be skipped:\n{report}"
        );
    }
}

#[test]
fn every_configmap_generator_passes_the_same_fixtures_with_no_cluster() {
    passes_the_same_fixtures(
        "configmap-generator",
        &[
            "generates-copies",
            "prunes-surplus",
            "up-to-date",
            "gone",
            "status-races-spec-edit",
            "apply-forbidden",
        ],
    );
}

#[test]
fn every_reservation_passes_the_same_fixtures_with_no_cluster() {
    passes_the_same_fixtures(
        "reservation",
        &[
            "reserves",
            "pool-missing",
            "up-to-date",
            "releases",
            "status-races-spec-edit",
        ],
    );
}

#[test]
fn a_changed_outcome_fails_with_a_diff_and_update_writes_it_back() {
    let dir = TempDir::new("fixtures-changed");
    let fixtures = dir.0.join("fixtures");
    copy_dir(&examples().join("configmap-generator/fixtures"), &fixtures);
    let expected = fixtures.join("generates-copies/expected.yaml");
    let right = std::fs::read_to_string(&expected).unwrap();
    assert!(right.contains("message: generated 3 ConfigMaps"));
    std::fs::write(
        &expected,
        right.replace(
            "message: generated 3 ConfigMaps",
            "message: generated 4 ConfigMaps",
        ),
    )
    .unwrap();
    let junit = dir.0.join("junit.xml");
    let module = wasm("configmap_generator");
    let out = reconciled_test(&module, &fixtures, &["--junit", junit.to_str().unwrap()]);
    let report = output_text(&out);
    assert!(!out.status.success(), "a difference fails:\n{report}");
    assert!(report.contains("FAILED   generates-copies"), "{report}");
    assert!(
        report.contains("-  message: generated 4 ConfigMaps")
            && report.contains("+  message: generated 3 ConfigMaps"),
        "the diff shows the one line that changed:\n{report}"
    );
    assert!(
        report.contains("ok       prunes-surplus"),
        "the other cases still pass:\n{report}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"failures="1""#), "{xml}");

    let out = reconciled_test(&module, &fixtures, &["--update"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(output_text(&out).contains("updated  generates-copies"));
    assert_eq!(std::fs::read_to_string(&expected).unwrap(), right);

    // A case without expectations fails, printing what it came to.
    std::fs::remove_file(&expected).unwrap();
    let out = reconciled_test(&module, &fixtures, &[]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("no expected.yaml")
            && output_text(&out).contains("reason: Generated"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_broken_fixture_and_an_unknown_kind_say_what_to_fix() {
    let dir = TempDir::new("fixtures-broken");
    let fixtures = dir.0.join("fixtures");
    std::fs::create_dir_all(fixtures.join("typo")).unwrap();
    std::fs::write(
        fixtures.join("typo/fixture.yaml"),
        "request: {namespace: default, name: x}\nfaults:\n  - {verb: apply, answer: maybe}\n",
    )
    .unwrap();
    let module = wasm("configmap_generator");
    // Without the CRD the guest's own kind is unknown: the error says where to put it.
    let out = reconciled_test(&module, &fixtures, &[]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("ConfigMapGenerator") && output_text(&out).contains("--crd"),
        "{}",
        output_text(&out)
    );
    let crd = examples().join("configmap-generator/crd.yaml");
    let out = reconciled_test(&module, &fixtures, &["--crd", crd.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("BROKEN   typo") && output_text(&out).contains("\"maybe\""),
        "{}",
        output_text(&out)
    );
}
