//! A folder of fixture cases run against one guest: each case's outcome compared with its
//! `expected.yaml` as YAML text, differences shown as a unified diff, results as JUnit XML.

use std::path::Path;
use std::time::Duration;

use crate::offline::fixture::{self, Case};
use crate::offline::kinds::Kinds;
use crate::offline::runner::Subject;

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// As expected.
    Passed,
    /// Not as expected (or no expectation yet), and `expected.yaml` was rewritten.
    Updated,
    /// Not as expected: the unified diff, expected first.
    Failed(String),
    /// No `expected.yaml`: what the run came to, to review and save with `--update`.
    Unexpected(String),
    /// The case could not be run: its fixture is wrong.
    Broken(String),
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case folder's name.
    pub name: String,
    /// How it ended.
    pub verdict: Verdict,
    /// How long the reconcile took.
    pub took: Duration,
    /// The guest's error or trap message, if any.
    pub message: Option<String>,
    /// What the offline server could not model for this case.
    pub notes: Vec<&'static str>,
}

impl CaseResult {
    /// Whether the case counts as a success.
    pub fn ok(&self) -> bool {
        matches!(self.verdict, Verdict::Passed | Verdict::Updated)
    }
}

/// Why a suite could not run at all (a case that cannot run is a [`Verdict::Broken`] instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The folder or a fixture file could not be read.
    #[error(transparent)]
    Fixture(#[from] fixture::Error),
    /// A CustomResourceDefinition that defines no kind the suite can serve.
    #[error("{path}: {source}")]
    Definition {
        /// The file holding it.
        path: String,
        /// What is wrong with it.
        #[source]
        source: crate::offline::kinds::Error,
    },
    /// The folder holds no case.
    #[error("no cases in {0}: a case is a folder holding a fixture.yaml")]
    NoCases(String),
    /// `--case` names no case of the folder.
    #[error("no case {case:?} in {dir}; its cases: {cases}")]
    NoSuchCase {
        /// The name asked for.
        case: String,
        /// The folder.
        dir: String,
        /// The cases it holds.
        cases: String,
    },
}

/// The kinds a suite in `dir` can serve: the built-in ones, and those defined by any
/// CustomResourceDefinition in the folder's top-level `.yaml` files (if a folder is given) or
/// in `crds`.
pub fn kinds(dir: Option<&Path>, crds: &[&Path]) -> Result<Kinds, Error> {
    let files = match dir {
        Some(dir) => fixture::scan(dir)?.1,
        None => Vec::new(),
    };
    let mut kinds = Kinds::builtin();
    for path in files
        .iter()
        .map(|p| p.as_path())
        .chain(crds.iter().copied())
    {
        for doc in fixture::documents(path)? {
            if doc["kind"] == "CustomResourceDefinition" {
                kinds
                    .add_definition(&doc)
                    .map_err(|source| Error::Definition {
                        path: path.display().to_string(),
                        source,
                    })?;
            }
        }
    }
    Ok(kinds)
}

/// The case folders of `dir`, or only the one named `only`.
pub fn cases(dir: &Path, only: Option<&str>) -> Result<Vec<std::path::PathBuf>, Error> {
    let (mut cases, _) = fixture::scan(dir)?;
    if let Some(only) = only {
        let names: Vec<String> = cases
            .iter()
            .filter_map(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        cases.retain(|c| c.file_name().is_some_and(|n| n == only));
        if cases.is_empty() {
            return Err(Error::NoSuchCase {
                case: only.to_string(),
                dir: dir.display().to_string(),
                cases: names.join(", "),
            });
        }
    }
    if cases.is_empty() {
        return Err(Error::NoCases(dir.display().to_string()));
    }
    Ok(cases)
}

/// Runs every case in `dir` (or only the one named `only`); with `update`, rewrites the
/// `expected.yaml` of each that differs.
pub async fn run(
    subject: &Subject,
    dir: &Path,
    update: bool,
    only: Option<&str>,
) -> Result<Vec<CaseResult>, Error> {
    let cases = cases(dir, only)?;
    let mut results = Vec::new();
    for path in cases {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let broken = |e: String| CaseResult {
            name: name.clone(),
            verdict: Verdict::Broken(e),
            took: Duration::ZERO,
            message: None,
            notes: Vec::new(),
        };
        let case = match Case::load(&path) {
            Ok(c) => c,
            Err(e) => {
                results.push(broken(e.to_string()));
                continue;
            }
        };
        let ran = match subject.run(&case).await {
            Ok(r) => r,
            Err(e) => {
                results.push(broken(format!("{}: {e}", path.display())));
                continue;
            }
        };
        let actual = ran.outcome.to_yaml();
        let expected = case.expected.as_ref().map(|e| e.to_yaml());
        let verdict = match expected {
            Some(e) if e == actual => Verdict::Passed,
            _ if update => match case.save(&ran.outcome) {
                Ok(()) => Verdict::Updated,
                Err(e) => Verdict::Broken(e.to_string()),
            },
            Some(e) => Verdict::Failed(diff(&e, &actual)),
            None => Verdict::Unexpected(actual),
        };
        results.push(CaseResult {
            name,
            verdict,
            took: ran.took,
            message: ran.message,
            notes: ran.notes,
        });
    }
    Ok(results)
}

/// A unified diff of `expected` against `actual`.
pub fn diff(expected: &str, actual: &str) -> String {
    similar::TextDiff::from_lines(expected, actual)
        .unified_diff()
        .context_radius(3)
        .header("expected.yaml", "actual")
        .to_string()
}

/// The results as JUnit XML, one test suite named `suite`.
pub fn junit(suite: &str, results: &[CaseResult]) -> String {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus};
    let mut cases = Vec::new();
    for r in results {
        let status = match &r.verdict {
            Verdict::Passed | Verdict::Updated => TestCaseStatus::success(),
            Verdict::Failed(d) | Verdict::Unexpected(d) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(if matches!(r.verdict, Verdict::Failed(_)) {
                    "the outcome differs from expected.yaml"
                } else {
                    "no expected.yaml; run with --update to save this outcome"
                });
                s.set_description(d.as_str());
                s
            }
            Verdict::Broken(e) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(e.as_str());
                s
            }
        };
        let mut case = TestCase::new(r.name.as_str(), status);
        case.set_time(r.took);
        if let Some(m) = &r.message {
            case.set_system_out(m.as_str());
        }
        cases.push(case);
    }
    junit_xml("reconciled test", suite, cases)
}

/// A JUnit XML report named `title` of one test suite named `suite` holding `cases`.
pub fn junit_xml(title: &str, suite: &str, cases: Vec<quick_junit::TestCase>) -> String {
    let mut report = quick_junit::Report::new(title);
    let mut ts = quick_junit::TestSuite::new(suite);
    ts.add_test_cases(cases);
    report.add_test_suite(ts);
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- cannot render JUnit XML: {e} -->"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_names_both_sides_and_shows_only_what_changed() {
        let d = diff("a: 1\nb: 2\n", "a: 1\nb: 3\n");
        assert!(
            d.contains("--- expected.yaml") && d.contains("+++ actual"),
            "{d}"
        );
        assert!(d.contains("-b: 2") && d.contains("+b: 3"), "{d}");
    }

    #[test]
    fn junit_counts_a_failure_and_a_broken_fixture() {
        let r = |name: &str, verdict| CaseResult {
            name: name.into(),
            verdict,
            took: Duration::from_millis(3),
            message: None,
            notes: vec![],
        };
        let xml = junit(
            "g",
            &[
                r("ok", Verdict::Passed),
                r("bad", Verdict::Failed("-a\n+b\n".into())),
                r("broken", Verdict::Broken("no request".into())),
            ],
        );
        assert!(
            xml.contains(r#"tests="3""#) && xml.contains(r#"failures="1""#),
            "{xml}"
        );
        assert!(xml.contains(r#"errors="1""#), "{xml}");
    }
}
