//! What makes a perturbed run a failure, judged against the reference: pure functions of two
//! [`Run`]s and the case.
//!
//! - **Differential:** the end state must equal the reference's, server-assigned metadata and
//!   the case's `nondeterministic` paths aside; and each object must have been created and
//!   deleted as many times as in the reference (a delete and recreate that ends where the
//!   reference ended is still a bug: whatever watched the object saw it go).
//! - **Eventually stable:** once the perturbation is over, the guest stops writing within the
//!   case's `settle` reconciles.
//! - **No error swallowed:** a reconcile that got an injected error and returned `done`,
//!   without the write succeeding on a retry in the same call, lost it.
//! - **Assertions:** the case's `assert.yaml` and `error.yaml` hold at the end.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::offline::chaos::trace::Run;
use crate::offline::fixture::Case;

/// One way a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Still writing, or failing, when the reconciles ran out.
    Unsettled {
        /// Reconciles allowed per change.
        settle: u32,
        /// What the last reconcile did.
        last: String,
    },
    /// The end state is not the reference's: a unified diff, reference first.
    EndState(String),
    /// An object created or deleted a different number of times.
    Lifecycle {
        /// The object.
        object: String,
        /// Created and deleted in this run.
        this: (u32, u32),
        /// Created and deleted in the reference.
        reference: (u32, u32),
    },
    /// An injected error answered with `done`.
    Swallowed {
        /// The reconcile.
        at: u32,
        /// The write that got it, as `verb kind namespace/name`.
        write: String,
        /// The error.
        error: String,
    },
    /// An `assert.yaml` or `error.yaml` document that does not hold.
    Assertion(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsettled { settle, last } => write!(
                f,
                "not eventually stable: still writing or failing after {settle} reconciles (the last: {last})"
            ),
            Self::EndState(_) => write!(f, "the end state differs from the reference's"),
            Self::Lifecycle {
                object,
                this,
                reference,
            } => write!(
                f,
                "{object} was created {} and deleted {} time(s); in the reference, created {} and deleted {}",
                this.0, this.1, reference.0, reference.1
            ),
            Self::Swallowed { at, write, error } => write!(
                f,
                "error swallowed: reconcile {at} got {error} on `{write}` and returned done without requeueing"
            ),
            Self::Assertion(what) => write!(f, "{what}"),
        }
    }
}

/// Metadata the server assigns, which differs between runs that did the same thing.
const ASSIGNED: [&str; 5] = [
    "metadata.resourceVersion",
    "metadata.uid",
    "metadata.creationTimestamp",
    "metadata.managedFields",
    "metadata.generation",
];

/// Everything wrong with `run`, judged against `reference`.
pub fn judge(case: &Case, reference: &Run, run: &Run) -> Vec<Finding> {
    let mut findings = Vec::new();
    if run.unsettled.is_some() {
        let last = run.steps.last().map_or_else(String::new, |s| {
            let writes: Vec<String> = s.writes.iter().map(|w| w.key()).collect();
            format!("{}; writes: [{}]", s.outcome, writes.join(", "))
        });
        findings.push(Finding::Unsettled {
            settle: case.setup.settle,
            last,
        });
    }
    for (at, step) in run.steps.iter().enumerate() {
        let Some((n, error)) = &step.interfered.injected else {
            continue;
        };
        let Some(hit) = step.writes.get((*n as usize).saturating_sub(1)) else {
            continue;
        };
        let retried = step.writes[*n as usize..]
            .iter()
            .any(|w| w.error.is_none() && w.key() == hit.key());
        if step.outcome == "done" && !retried {
            findings.push(Finding::Swallowed {
                at: u32::try_from(at + 1).unwrap_or(u32::MAX),
                write: hit.key(),
                error: error.clone(),
            });
        }
    }
    let (want, got) = (
        render(&reference.end, &case.setup.nondeterministic),
        render(&run.end, &case.setup.nondeterministic),
    );
    if want != got {
        findings.push(Finding::EndState(
            similar::TextDiff::from_lines(&want, &got)
                .unified_diff()
                .context_radius(3)
                .header("reference", "this plan")
                .to_string(),
        ));
    }
    let objects: std::collections::BTreeSet<&String> = reference
        .lifecycle
        .keys()
        .chain(run.lifecycle.keys())
        .collect();
    for object in objects {
        let of = |r: &Run| {
            r.lifecycle
                .get(object)
                .map_or((0, 0), |l| (l.created, l.deleted))
        };
        let (this, reference) = (of(run), of(reference));
        if this != reference {
            findings.push(Finding::Lifecycle {
                object: object.clone(),
                this,
                reference,
            });
        }
    }
    findings.extend(
        assertions(case, &run.end)
            .into_iter()
            .map(Finding::Assertion),
    );
    findings
}

/// The end state as YAML, with server-assigned metadata and the `ignored` paths left out, and
/// each uid of an object there written as the object's name (a recreated object has a new uid,
/// and references to it would otherwise differ by that alone).
pub fn render(objects: &BTreeMap<String, Value>, ignored: &[String]) -> String {
    let uids: BTreeMap<String, String> = objects
        .iter()
        .filter_map(|(name, v)| {
            v["metadata"]["uid"]
                .as_str()
                .map(|u| (u.to_string(), format!("(uid of {name})")))
        })
        .collect();
    let shown: BTreeMap<&String, Value> = objects
        .iter()
        .map(|(name, v)| {
            let mut v = v.clone();
            for path in ASSIGNED
                .iter()
                .copied()
                .chain(ignored.iter().map(String::as_str))
            {
                let parts: Vec<&str> = path.split('.').collect();
                remove(&mut v, &parts);
            }
            rename_uids(&mut v, &uids);
            (name, v)
        })
        .collect();
    serde_saphyr::to_string(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

fn remove(v: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let children: Vec<&mut Value> = match (v, *first) {
        (Value::Object(m), "*") if rest.is_empty() => {
            m.clear();
            return;
        }
        (Value::Object(m), key) if rest.is_empty() => {
            m.remove(key);
            return;
        }
        (Value::Array(a), "*") if rest.is_empty() => {
            a.clear();
            return;
        }
        (Value::Object(m), "*") => m.values_mut().collect(),
        (Value::Object(m), key) => m.get_mut(key).into_iter().collect(),
        (Value::Array(a), "*") => a.iter_mut().collect(),
        (Value::Array(a), index) => index
            .parse::<usize>()
            .ok()
            .and_then(|i| a.get_mut(i))
            .into_iter()
            .collect(),
        _ => return,
    };
    for child in children {
        remove(child, rest);
    }
}

fn rename_uids(v: &mut Value, uids: &BTreeMap<String, String>) {
    match v {
        Value::String(s) => {
            if let Some(name) = uids.get(s.as_str()) {
                *s = name.clone();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rename_uids(x, uids)),
        Value::Object(m) => m.values_mut().for_each(|x| rename_uids(x, uids)),
        _ => {}
    }
}

/// The `assert.yaml` and `error.yaml` documents of `case` that `end` does not satisfy, each
/// said in a line.
pub fn assertions(case: &Case, end: &BTreeMap<String, Value>) -> Vec<String> {
    let mut failed = Vec::new();
    for want in &case.asserts {
        let name = crate::offline::server::object_name(want);
        match end.get(&name) {
            None => failed.push(format!("assert.yaml: {name} does not exist at the end")),
            Some(got) => {
                if let Some(path) = mismatch(want, got, String::new()) {
                    failed.push(format!(
                        "assert.yaml: {name} does not match at {path}: {}",
                        at(got, &path)
                    ));
                }
            }
        }
    }
    for unwanted in &case.errors {
        let name = crate::offline::server::object_name(unwanted);
        if let Some(got) = end.get(&name)
            && mismatch(unwanted, got, String::new()).is_none()
        {
            failed.push(format!(
                "error.yaml: {name} exists at the end and matches what must not be"
            ));
        }
    }
    failed
}

/// Where `got` fails to hold every field of `want` (a partial object; an array must match
/// item by item, with as many items), as a dotted path; `None` if it holds them all.
fn mismatch(want: &Value, got: &Value, path: String) -> Option<String> {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(k, wv)| match g.get(k) {
            Some(gv) => mismatch(wv, gv, join(k)),
            None => Some(join(k)),
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (wv, gv))| mismatch(wv, gv, join(&i.to_string()))),
        _ if want == got => None,
        _ => Some(if path.is_empty() { ".".into() } else { path }),
    }
}

fn at(v: &Value, path: &str) -> String {
    let mut here = v;
    for part in path.split('.').filter(|p| !p.is_empty() && *p != ".") {
        here = match here {
            Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
            other => other.get(part),
        }
        .unwrap_or(&Value::Null);
    }
    match here {
        Value::Null => "absent".into(),
        other => format!("it holds {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects(list: &[Value]) -> BTreeMap<String, Value> {
        list.iter()
            .map(|v| (crate::offline::server::object_name(v), v.clone()))
            .collect()
    }

    #[test]
    fn a_recreated_object_renders_as_the_original_when_only_assigned_metadata_and_its_uid_differ() {
        let parent = |uid: &str, rv: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "p", "namespace": "d", "uid": uid, "resourceVersion": rv}})
        };
        let child = |owner: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "d",
                                "ownerReferences": [{"uid": owner, "name": "p"}]}})
        };
        let one = objects(&[parent("u1", "3"), child("u1")]);
        let two = objects(&[parent("u7", "9"), child("u7")]);
        assert_eq!(render(&one, &[]), render(&two, &[]));
        let dangling = objects(&[parent("u7", "9"), child("u1")]);
        assert_ne!(render(&one, &[]), render(&dangling, &[]));
    }

    #[test]
    fn nondeterministic_paths_go_through_lists_with_a_star() {
        let at = |t: &str| {
            objects(&[json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "p", "namespace": "d"},
                "status": {"conditions": [{"type": "Ready", "lastTransitionTime": t}]}})])
        };
        let ignored = ["status.conditions.*.lastTransitionTime".to_string()];
        assert_eq!(render(&at("1"), &ignored), render(&at("2"), &ignored));
        assert_ne!(render(&at("1"), &[]), render(&at("2"), &[]));
    }

    #[test]
    fn a_partial_object_matches_a_superset_and_names_the_first_field_that_differs() {
        let got = json!({"metadata": {"name": "a"}, "data": {"k": "1", "j": "2"}, "l": [1, 2]});
        assert_eq!(
            mismatch(&json!({"data": {"k": "1"}}), &got, String::new()),
            None
        );
        assert_eq!(
            mismatch(&json!({"data": {"k": "2"}}), &got, String::new()),
            Some("data.k".into())
        );
        assert_eq!(
            mismatch(&json!({"l": [1]}), &got, String::new()),
            Some("l".into()),
            "a list must match item by item"
        );
        assert_eq!(at(&got, "data.x"), "absent");
    }
}
