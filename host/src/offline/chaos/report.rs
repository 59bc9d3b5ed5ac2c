//! A failing plan as its author needs it: the plan as YAML with the seed and case, what was
//! found, the end state's diff against the reference, the reconciles it took, and the command
//! that replays exactly that plan; and a sweep as JUnit XML.

use std::path::Path;

use crate::offline::chaos::{Failed, Finding, Swept};

/// `text` quoted for a POSIX shell, if it needs to be.
fn quoted(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The command that runs `failed`'s plan alone.
pub fn replay_command(module: &Path, dir: &Path, case: &str, failed: &Failed) -> String {
    format!(
        "reconciled test --chaos --case {} --plan {} {} {}",
        quoted(case),
        quoted(&failed.plan.to_string()),
        quoted(&module.display().to_string()),
        quoted(&dir.display().to_string()),
    )
}

/// The plan as YAML, with what reproduces it: the seed that chose it and the case.
pub fn plan_yaml(case: &str, seed: u64, failed: &Failed) -> String {
    let plan = serde_saphyr::to_string(&failed.plan).unwrap_or_default();
    format!("seed: {seed}\ncase: {case}\n{plan}")
}

/// Everything about one failing plan, as indented lines.
pub fn describe(module: &Path, dir: &Path, case: &str, seed: u64, failed: &Failed) -> String {
    let mut out = format!("plan {}\n", failed.plan);
    for line in plan_yaml(case, seed, failed).lines() {
        out.push_str(&format!("    {line}\n"));
    }
    out.push_str("  found:\n");
    for f in &failed.findings {
        out.push_str(&format!("    - {f}\n"));
        if let Finding::EndState(diff) = f {
            for line in diff.lines() {
                out.push_str(&format!("        {line}\n"));
            }
        }
    }
    out.push_str("  reconciles (outcome [writes]):\n");
    for s in &failed.steps {
        out.push_str(&format!("    {s}\n"));
    }
    out.push_str(&format!(
        "  replay: {}\n",
        replay_command(module, dir, case, failed)
    ));
    out
}

/// The sweep as JUnit XML: a test case per fixture case, failed with its plans' reports.
pub fn junit(suite: &str, module: &Path, dir: &Path, seed: u64, swept: &[Swept]) -> String {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus};
    let mut cases = Vec::new();
    for s in swept {
        let status = if s.ok() {
            TestCaseStatus::success()
        } else {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
            st.set_message(format!(
                "{} of {} plans failed{}",
                s.failed.len(),
                s.ran,
                if s.reference_findings.is_empty() {
                    ""
                } else {
                    "; the reference fails its assertions"
                }
            ));
            let mut text: String = s
                .reference_findings
                .iter()
                .map(|f| format!("{f}\n"))
                .collect();
            for f in &s.failed {
                text.push_str(&describe(module, dir, &s.case, seed, f));
            }
            st.set_description(text);
            st
        };
        let mut case = TestCase::new(s.case.as_str(), status);
        case.set_time(s.took);
        if let Some(u) = &s.unsettled {
            case.set_system_out(format!("skipped: {u}"));
        }
        cases.push(case);
    }
    crate::offline::suite::junit_xml("reconciled test --chaos", suite, cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::chaos::Perturbation;

    fn failed() -> Failed {
        Failed {
            plan: Perturbation::Stale {
                at: 2,
                object: "v1/ConfigMap default/a".into(),
                seen_at: 1,
            },
            findings: vec![Finding::EndState("-a\n+b\n".into())],
            steps: vec!["1: done []".into()],
        }
    }

    #[test]
    fn the_replay_command_quotes_what_a_shell_would_split_and_reads_back_the_plan() {
        let cmd = replay_command(
            Path::new("g.wasm"),
            Path::new("my fixtures"),
            "c",
            &failed(),
        );
        assert_eq!(
            cmd,
            "reconciled test --chaos --case c --plan 'stale@2:v1/ConfigMap default/a<1' g.wasm 'my fixtures'"
        );
        let plan = cmd.split('\'').nth(1).unwrap();
        assert_eq!(Perturbation::parse(plan).unwrap(), failed().plan);
    }

    #[test]
    fn a_report_holds_the_plan_as_yaml_the_diff_and_the_replay() {
        let text = describe(Path::new("g.wasm"), Path::new("f"), "c", 7, &failed());
        for part in [
            "seed: 7",
            "case: c",
            "perturbation: stale",
            "seen_at: 1",
            "+b",
            "replay: ",
        ] {
            assert!(text.contains(part), "{part:?} in\n{text}");
        }
    }
}
