//! What differs between two runs of a reconcile, from their recordings: the outcome, the writes
//! (paired by verb, kind and object), the Events, and the reads only the second run made. Used
//! by `reconciled replay` (recorded against replayed) and by shadow versions (live against
//! shadow).

use std::collections::{BTreeMap, BTreeSet};

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
    /// A write both made, differently: its key and a diff, recorded first.
    WriteChanged(String, String),
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
            Change::WriteAdded(k) | Change::WriteRemoved(k) | Change::WriteChanged(k, _) => {
                k.split(' ').nth(1).unwrap_or("").to_string()
            }
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Outcome { old, new } => write!(f, "outcome: {old} -> {new}"),
            Change::WriteAdded(k) => write!(f, "write added: {k}"),
            Change::WriteRemoved(k) => write!(f, "write removed: {k}"),
            Change::WriteChanged(k, diff) => {
                writeln!(f, "write changed: {k}")?;
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
    let mut changes = Vec::new();
    if old.outcome != outcome {
        changes.push(Change::Outcome {
            old: old.outcome.clone(),
            new: outcome.to_string(),
        });
    }
    changes.extend(compare_writes(&old.writes, &new.writes));
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
fn compare_writes(old: &[Write], new: &[Write]) -> Vec<Change> {
    let group = |ws: &[Write]| {
        let mut m: BTreeMap<String, Vec<Write>> = BTreeMap::new();
        let mut order = Vec::new();
        for w in ws {
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
                    let (x, y) = (comparable(x), comparable(y));
                    if x != y {
                        let diff = similar::TextDiff::from_lines(&yaml(&x), &yaml(&y))
                            .unified_diff()
                            .context_radius(2)
                            .header("recorded", "replayed")
                            .to_string();
                        changes.push(Change::WriteChanged(k.clone(), diff));
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

/// A write without its place in the call, which may move without the write changing.
fn comparable(w: &Write) -> Write {
    Write {
        step: 0,
        ..w.clone()
    }
}

fn yaml(w: &Write) -> String {
    serde_saphyr::to_string(w).unwrap_or_default()
}
