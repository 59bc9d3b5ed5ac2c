//! Replaying recorded reconciles against another version of a guest, and what differs.
//!
//! A recording becomes a case: the objects the recorded run read (each as first read, before
//! any write of its own to it) are what the cache and the server hold; a write the recorded run
//! saw refused is refused the same way once; the guest's clock starts when the recorded
//! reconcile did, and its random bytes come from the recorded seed. The new version then runs
//! offline (see [`runner`](super::runner)), and its writes, Events, outcome and reads are
//! compared with the recorded ones.
//!
//! Where it may surprise: answers to writes come from the offline model, not from the
//! recording, so a version that copies a uid or resourceVersion from a write's answer into a
//! later write shows that later write as changed.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

pub use crate::guest::divergence::{Change, compare};
use crate::guest::tape::Recording;
use crate::offline::fixture::{Case, Outcome, Setup};
use crate::offline::runner::{CaseError, Subject};
use crate::offline::server::Fault;

/// Why the recordings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A folder or file that cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The folder or file.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The folder holds no recording.
    #[error(
        "no recordings in {0}: record some with `reconciled run --record {0} --record-guest <name>`"
    )]
    Empty(String),
    /// A file that is not a recording.
    #[error("{path} is not a recording: {reason}")]
    NotARecording {
        /// The file.
        path: String,
        /// What the YAML reader said.
        reason: String,
    },
}

/// Reads the recordings in `dir` (`*.yaml`, in name order), each with its file.
pub fn load(dir: &Path) -> Result<Vec<(PathBuf, Recording)>, Error> {
    let read = |path: &Path| {
        let path = path.display().to_string();
        move |source| Error::Read { path, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read(dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::Empty(dir.display().to_string()));
    }
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(read(&p))?;
            let r: Recording = serde_saphyr::from_str(&text).map_err(|e| Error::NotARecording {
                path: p.display().to_string(),
                reason: e.to_string(),
            })?;
            Ok((p, r))
        })
        .collect()
}

fn object_key(v: &Value) -> String {
    format!(
        "{}/{} {}/{}",
        v["apiVersion"].as_str().unwrap_or(""),
        v["kind"].as_str().unwrap_or(""),
        v["metadata"]["namespace"].as_str().unwrap_or(""),
        v["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// The answer a fault replays a recorded refusal with; `None` for refusals the host makes
/// itself (it will make them again) or that no server answer stands for.
fn fault_answer(error: &str) -> Option<&'static str> {
    Some(match error {
        "not-found" => "not-found",
        "conflict" => "conflict",
        "forbidden" => "forbidden",
        "invalid" => "invalid",
        "timeout" => "timeout",
        "other" => "unavailable",
        _ => return None,
    })
}

/// The case a recording stands for.
pub fn case_of(name: &str, recording: &Recording) -> Case {
    // An object the recorded run wrote before reading it was not there as read at the start.
    let written: BTreeMap<String, u32> = recording
        .writes
        .iter()
        .map(|w| {
            let key = format!("{} {}/{}", w.kind, w.namespace, w.name);
            (key, w.step)
        })
        .fold(BTreeMap::new(), |mut m, (k, step)| {
            m.entry(k).or_insert(step);
            m
        });
    let mut seen = HashSet::new();
    let mut objects = Vec::new();
    for read in &recording.reads {
        for o in &read.objects {
            let key = object_key(o);
            let after_own_write = written.get(&key).is_some_and(|w| *w < read.step);
            if !after_own_write && seen.insert(key) {
                objects.push(o.clone());
            }
        }
    }
    // A refusal replays on the same occurrence of the same write: the writes of that key that
    // went through before it go through again.
    let mut seen_writes: BTreeMap<String, u32> = BTreeMap::new();
    let faults = recording
        .writes
        .iter()
        .filter_map(|w| {
            let earlier = seen_writes.entry(w.key()).or_insert(0);
            let after = *earlier;
            *earlier += 1;
            let answer = fault_answer(w.error.as_deref()?)?;
            Some(Fault {
                after,
                verb: Some(w.verb.clone()),
                kind: Some(w.kind.clone()),
                namespace: Some(w.namespace.clone()),
                name: Some(w.name.clone()),
                subresource: w.subresource.clone(),
                answer: answer.into(),
                times: Some(1),
            })
        })
        .collect();
    let now = recording
        .started
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| Duration::from_secs(u64::try_from(t.as_second()).unwrap_or(0)))
        .unwrap_or(crate::offline::fixture::DEFAULT_NOW);
    Case {
        name: name.to_string(),
        dir: PathBuf::new(),
        setup: Setup {
            request: recording.request.clone(),
            now: Some(recording.started.clone()),
            seed: recording.seed,
            faults,
            stale: Vec::new(),
            settings: recording.settings.clone(),
            changes: Vec::new(),
            settle: 10,
            nondeterministic: Vec::new(),
        },
        now,
        objects,
        expected: Some(Outcome {
            outcome: recording.outcome.clone(),
            writes: recording.writes.clone(),
            events: recording.events.clone(),
        }),
        asserts: Vec::new(),
        errors: Vec::new(),
    }
}

/// Replays one recording against `subject`: the differences, in order.
pub async fn replay(
    subject: &Subject,
    name: &str,
    recording: &Recording,
) -> Result<Vec<Change>, CaseError> {
    let case = case_of(name, recording);
    let ran = subject.run(&case).await?;
    let new = ran.recording.unwrap_or_else(|| Recording {
        reads: Vec::new(),
        writes: Vec::new(),
        events: Vec::new(),
        ..recording.clone()
    });
    Ok(compare(recording, &new, &ran.outcome.outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::tape::{Read, RequestKey, Write};
    use serde_json::json;

    fn write(verb: &str, name: &str, data: &str, step: u32) -> Write {
        Write {
            verb: verb.into(),
            kind: "v1/ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            subresource: None,
            field_manager: None,
            force: None,
            body: Some(json!({"data": {"k": data}})),
            error: None,
            step,
        }
    }

    fn recording(writes: Vec<Write>, reads: Vec<Read>) -> Recording {
        Recording {
            guest: "g".into(),
            module: "m".into(),
            request: RequestKey {
                namespace: "ns".into(),
                name: "a".into(),
            },
            started: "2026-01-01T00:00:00Z".into(),
            seed: 7,
            outcome: "done".into(),
            message: None,
            cut: false,
            reads,
            writes,
            events: vec![],
            settings: None,
        }
    }

    fn read(step: u32, name: &str) -> Read {
        Read {
            op: "cache.get".into(),
            kind: "v1/ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            query: String::new(),
            objects: vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": name, "namespace": "ns"}})],
            error: None,
            step,
        }
    }

    #[test]
    fn writes_pair_by_key_and_only_what_differs_is_reported() {
        let old = recording(
            vec![write("apply", "a", "1", 1), write("delete", "b", "", 2)],
            vec![],
        );
        let new = recording(
            vec![write("apply", "a", "2", 3), write("apply", "c", "1", 4)],
            vec![read(1, "x")],
        );
        let changes = compare(&old, &new, "done");
        let kinds: Vec<String> = changes
            .iter()
            .map(|c| c.to_string().lines().next().unwrap().to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "write changed: apply v1/ConfigMap ns/a, first at /body/data/k: \"1\" -> \"2\"",
                "write removed: delete v1/ConfigMap ns/b",
                "write added: apply v1/ConfigMap ns/c",
                "new read: cache.get v1/ConfigMap ns/x",
            ]
        );
        assert!(
            changes[0].to_string().contains("-    k: \"1\"\n"),
            "{}",
            changes[0]
        );
        assert_eq!(changes[0].subject(), "v1/ConfigMap");
        assert!(
            compare(&old, &old, "done").is_empty(),
            "a run equals itself"
        );
    }

    #[test]
    fn a_case_holds_what_was_read_before_the_run_wrote_it_and_replays_refusals_once() {
        let mut refused = write("update", "a", "1", 3);
        refused.error = Some("conflict".into());
        let r = recording(
            vec![write("apply", "b", "1", 2), refused],
            vec![read(1, "a"), read(4, "b")],
        );
        let case = case_of("c", &r);
        let names: Vec<&str> = case
            .objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a"], "b was read only after the run applied it");
        assert_eq!(case.setup.faults.len(), 1);
        assert_eq!(case.setup.faults[0].answer, "conflict");
        assert_eq!(case.setup.faults[0].times, Some(1));
        assert_eq!(case.setup.faults[0].after, 0);
        // The second of two writes refused: the first goes through again.
        let mut second = write("update", "a", "2", 5);
        second.error = Some("conflict".into());
        let twice = recording(vec![write("update", "a", "1", 1), second], vec![]);
        assert_eq!(case_of("t", &twice).setup.faults[0].after, 1);
        assert_eq!(case.setup.seed, 7);
    }
}
