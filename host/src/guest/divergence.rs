//! What differs between two runs of a reconcile, from their recordings: the outcome, the writes
//! (paired by verb, kind and object), the Events, and the reads only the second run made. Used
//! by `reconciled replay` (recorded against replayed) and by shadow versions (live against
//! shadow).
//!
//! Where it may surprise: a changed write names the first place it differs as a JSON pointer
//! into the write as recorded (`/body/data/v`), so the path of an object's field is under
//! `/body`; the paths a caller ignores ([`compare_ignoring`]) are pointers into the object
//! written, without it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::guest::tape::{Event, Recording, Write};

/// One difference between two runs of a reconcile (the first "old", the second "new").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The outcome differs.
    Outcome {
        /// Recorded.
        old: String,
        /// Replayed.
        new: String,
    },
    /// A write only the replay made (its key).
    WriteAdded(String),
    /// A write only the recording has.
    WriteRemoved(String),
    /// A write both made, differently: its key, where it first differs (a JSON pointer into the
    /// write, with both values) and a diff, recorded first.
    WriteChanged {
        key: String,
        first: String,
        diff: String,
    },
    /// An Event only the replay recorded.
    EventAdded(String),
    /// An Event only the recording has.
    EventRemoved(String),
    /// A read only the replay made: the recording has no answer for it, so the offline model
    /// answered from the objects the old version read.
    NewRead(String),
}

impl Change {
    /// What the change is about, for `--allow`: `outcome`, `events`, `reads`, or the
    /// `apiVersion/Kind` of a write.
    pub fn subject(&self) -> String {
        match self {
            Change::Outcome { .. } => "outcome".into(),
            Change::EventAdded(_) | Change::EventRemoved(_) => "events".into(),
            Change::NewRead(_) => "reads".into(),
            Change::WriteAdded(k)
            | Change::WriteRemoved(k)
            | Change::WriteChanged { key: k, .. } => k.split(' ').nth(1).unwrap_or("").to_string(),
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Outcome { old, new } => write!(f, "outcome: {old} -> {new}"),
            Change::WriteAdded(k) => write!(f, "write added: {k}"),
            Change::WriteRemoved(k) => write!(f, "write removed: {k}"),
            Change::WriteChanged { key, first, diff } => {
                writeln!(f, "write changed: {key}, first at {first}")?;
                for line in diff.lines() {
                    writeln!(f, "    {line}")?;
                }
                Ok(())
            }
            Change::EventAdded(e) => write!(f, "event added: {e}"),
            Change::EventRemoved(e) => write!(f, "event removed: {e}"),
            Change::NewRead(k) => write!(f, "new read: {k}"),
        }
    }
}

/// What differs between `old` and `new` (whose outcome is `outcome`).
pub fn compare(old: &Recording, new: &Recording, outcome: &str) -> Vec<Change> {
    compare_ignoring(old, new, outcome, &[])
}

/// [`compare`], with the parts of written objects at `ignore` (JSON pointers into the object,
/// such as `/metadata/annotations/example.com~1version`) left out of the writes compared.
pub fn compare_ignoring(
    old: &Recording,
    new: &Recording,
    outcome: &str,
    ignore: &[String],
) -> Vec<Change> {
    let mut changes = Vec::new();
    if old.outcome != outcome {
        changes.push(Change::Outcome {
            old: old.outcome.clone(),
            new: outcome.to_string(),
        });
    }
    changes.extend(compare_writes(&old.writes, &new.writes, ignore));
    let show = |e: &Event| format!("{} {} {}: {}", e.type_, e.reason, e.regarding, e.message);
    let old_events: Vec<String> = old.events.iter().map(show).collect();
    let new_events: Vec<String> = new.events.iter().map(show).collect();
    for e in &new_events {
        if !old_events.contains(e) {
            changes.push(Change::EventAdded(e.clone()));
        }
    }
    for e in &old_events {
        if !new_events.contains(e) {
            changes.push(Change::EventRemoved(e.clone()));
        }
    }
    let old_reads: BTreeSet<String> = old.reads.iter().map(|r| r.key()).collect();
    let mut reported = BTreeSet::new();
    for r in &new.reads {
        let key = r.key();
        if !old_reads.contains(&key) && reported.insert(key.clone()) {
            changes.push(Change::NewRead(key.trim_end().to_string()));
        }
    }
    changes
}

/// Writes paired by key, occurrence by occurrence: the i-th write of a key in one run with the
/// i-th of the same key in the other.
fn compare_writes(old: &[Write], new: &[Write], ignore: &[String]) -> Vec<Change> {
    let group = |ws: &[Write]| {
        let mut m: BTreeMap<String, Vec<Write>> = BTreeMap::new();
        let mut order = Vec::new();
        // A write that changes only what is ignored (a patch of the revision's own stamp) is
        // no write at all: the other run, which had nothing else to change either, wrote none.
        for w in ws
            .iter()
            .filter(|w| ignore.is_empty() || !only_ignored(w, ignore))
        {
            let k = w.key();
            if !m.contains_key(&k) {
                order.push(k.clone());
            }
            m.entry(k).or_default().push(w.clone());
        }
        (m, order)
    };
    let (old_by, old_order) = group(old);
    let (new_by, new_order) = group(new);
    let mut keys = old_order;
    for k in new_order {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut changes = Vec::new();
    let empty = Vec::new();
    for k in keys {
        let (a, b) = (
            old_by.get(&k).unwrap_or(&empty),
            new_by.get(&k).unwrap_or(&empty),
        );
        for i in 0..a.len().max(b.len()) {
            match (a.get(i), b.get(i)) {
                (Some(x), Some(y)) => {
                    let (x, y) = (comparable(x, ignore), comparable(y, ignore));
                    if x != y {
                        let diff = similar::TextDiff::from_lines(&yaml(&x), &yaml(&y))
                            .unified_diff()
                            .context_radius(2)
                            .header("recorded", "replayed")
                            .to_string();
                        let (a, b) = (
                            serde_json::to_value(&x).unwrap_or_default(),
                            serde_json::to_value(&y).unwrap_or_default(),
                        );
                        let first = first_difference(&a, &b, &mut String::new())
                            .unwrap_or_else(|| "(the root)".into());
                        changes.push(Change::WriteChanged {
                            key: k.clone(),
                            first,
                            diff,
                        });
                    }
                }
                (Some(_), None) => changes.push(Change::WriteRemoved(k.clone())),
                (None, Some(_)) => changes.push(Change::WriteAdded(k.clone())),
                (None, None) => {}
            }
        }
    }
    changes
}

/// A write without its place in the call, which may move without the write changing, and
/// without the parts of its object at `ignore`.
fn comparable(w: &Write, ignore: &[String]) -> Write {
    let mut body = w.body.clone();
    if let Some(body) = &mut body {
        for pointer in ignore {
            remove_pointer(body, pointer);
        }
    }
    Write {
        step: 0,
        body,
        ..w.clone()
    }
}

/// Whether `w` changes nothing but what `ignore` names: its object, without those parts and
/// without the maps left empty, holds no more than what names the object (`apiVersion`,
/// `kind`, `metadata.name`, `metadata.namespace`). A write with no object (a delete) changes
/// more.
fn only_ignored(w: &Write, ignore: &[String]) -> bool {
    let Some(body) = &comparable(w, ignore).body else {
        return false;
    };
    let mut rest = body.clone();
    if let Some(map) = rest.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        if let Some(meta) = map.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("name");
            meta.remove("namespace");
        }
    }
    prune(&mut rest);
    rest.as_object().is_some_and(|m| m.is_empty())
}

/// Removes, depth first, every map that holds nothing.
fn prune(value: &mut Value) {
    if let Some(map) = value.as_object_mut() {
        for v in map.values_mut() {
            prune(v);
        }
        map.retain(|_, v| !v.as_object().is_some_and(|m| m.is_empty()));
    }
}

/// Removes what `pointer` (RFC 6901) names in `value`, if anything.
fn remove_pointer(value: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < items.len()
            {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// The first place, in document order, where `a` and `b` differ: a JSON pointer (from `at`)
/// and both values, shortened; `None` when they are equal.
fn first_difference(a: &Value, b: &Value, at: &mut String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|key| {
                let segment = key.replace('~', "~0").replace('/', "~1");
                child_difference(x.get(key), y.get(key), &segment, at)
            })
        }
        (Value::Array(x), Value::Array(y)) => (0..x.len().max(y.len()))
            .find_map(|i| child_difference(x.get(i), y.get(i), &i.to_string(), at)),
        _ if a == b => None,
        _ => Some(shown_difference(Some(a), Some(b), at)),
    }
}

/// [`first_difference`] under the child `segment` of `at`, which one side may lack.
fn child_difference(
    a: Option<&Value>,
    b: Option<&Value>,
    segment: &str,
    at: &mut String,
) -> Option<String> {
    let len = at.len();
    at.push('/');
    at.push_str(segment);
    let found = match (a, b) {
        (Some(p), Some(q)) => first_difference(p, q, at),
        (p, q) => Some(shown_difference(p, q, at)),
    };
    at.truncate(len);
    found
}

/// `at: a -> b`, each value cut to 60 characters.
fn shown_difference(a: Option<&Value>, b: Option<&Value>, at: &str) -> String {
    let shown = |v: Option<&Value>| match v {
        None => "(absent)".to_string(),
        Some(v) => {
            let text = v.to_string();
            match text.char_indices().nth(60) {
                Some((cut, _)) => format!("{}…", &text[..cut]),
                None => text,
            }
        }
    };
    let at = if at.is_empty() { "/" } else { at };
    format!("{at}: {} -> {}", shown(a), shown(b))
}

fn yaml(w: &Write) -> String {
    serde_saphyr::to_string(w).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(body: Value) -> Write {
        serde_json::from_value(json!({
            "verb": "merge-patch", "kind": "v1/ConfigMap", "namespace": "a", "name": "x",
            "body": body,
        }))
        .unwrap()
    }

    fn recording(writes: Vec<Write>) -> Recording {
        serde_json::from_value(json!({
            "guest": "g", "module": "m", "request": {"namespace": "a", "name": "x"},
            "started": "2026-01-01T00:00:00Z", "seed": 0, "outcome": "done",
            "writes": writes,
        }))
        .unwrap()
    }

    #[test]
    fn a_changed_write_names_the_first_path_that_differs() {
        let old = recording(vec![patch(json!({"data": {"a": "1", "v": "1"}}))]);
        let new = recording(vec![patch(json!({"data": {"a": "1", "v": "2"}}))]);
        let changes = compare(&old, &new, "done");
        let [Change::WriteChanged { first, .. }] = changes.as_slice() else {
            panic!("{changes:?}")
        };
        assert_eq!(first, r#"/body/data/v: "1" -> "2""#);
        let added = recording(vec![patch(json!({"data": {"a": "1"}, "x~y/z": 1}))]);
        let changes = compare(&old, &added, "done");
        let [Change::WriteChanged { first, .. }] = changes.as_slice() else {
            panic!("{changes:?}")
        };
        assert_eq!(first, r#"/body/data/v: "1" -> (absent)"#);
    }

    #[test]
    fn an_ignored_path_does_not_diverge_and_escapes_read_as_rfc_6901_says() {
        let stamped = |version: &str| {
            recording(vec![patch(json!({"metadata": {"annotations": {
                "stamp.reconciled.dev/seen": version, "keep": "k"}}}))])
        };
        let ignore = ["/metadata/annotations/stamp.reconciled.dev~1seen".to_string()];
        assert!(compare_ignoring(&stamped("v1:3"), &stamped("v2:3"), "done", &ignore).is_empty());
        let changes = compare(&stamped("v1:3"), &stamped("v2:3"), "done");
        assert_eq!(changes.len(), 1, "without the path ignored: {changes:?}");
        assert!(
            changes[0].to_string().contains(
                "first at /body/metadata/annotations/stamp.reconciled.dev~1seen: \"v1:3\" -> \"v2:3\""
            ),
            "{}",
            changes[0]
        );
        // A write of the stamp alone, where the other run wrote nothing, is no write.
        let none = recording(vec![]);
        let stamp_only = recording(vec![patch(json!({"metadata": {"annotations": {
            "stamp.reconciled.dev/seen": "v2:3"}}}))]);
        assert!(compare_ignoring(&none, &stamp_only, "done", &ignore).is_empty());
        assert_eq!(
            compare(&none, &stamp_only, "done").len(),
            1,
            "not ignored: a write added"
        );
        // Only what the path names is left out.
        let other = recording(vec![patch(json!({"metadata": {"annotations": {
            "stamp.reconciled.dev/seen": "v2:3", "keep": "changed"}}}))]);
        assert_eq!(
            compare_ignoring(&stamped("v1:3"), &other, "done", &ignore).len(),
            1
        );
    }
}
