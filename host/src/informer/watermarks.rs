//! The store's watermarks: per namespace, the highest resourceVersion applied and the highest
//! published, which read-your-writes waits on.

use std::collections::HashMap;

use crate::object::ObjectRef;

/// One namespace's resourceVersions: the highest applied, and the highest published as its
/// watermark.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Mark {
    pub(super) applied: u64,
    pub(super) published: u64,
    /// In [`Marks::dirty`]: applied past `published` since the last publish.
    pub(super) dirty: bool,
}

/// Highest resourceVersions applied and published, per namespace ("" for cluster-scoped
/// objects), with a floor that every namespace is at least at (set by a [`Writer::replace`](crate::informer::store::Writer::replace) at
/// its list's version).
///
/// Invariant: `dirty` holds, once each, exactly the indexes of the marks whose `dirty` is set,
/// and a mark that is not dirty has `published == applied`. So a publish touches only what
/// changed since the last one, whatever the number of namespaces: the informer publishes each
/// time its delta FIFO drains, which under a light load is after every event.
#[derive(Debug, Default)]
pub(super) struct Marks {
    /// Namespace → index into `marks`. A namespace once seen stays until the next replace, like
    /// client-go's indexers keep their keys.
    pub(super) index: HashMap<Box<str>, usize>,
    pub(super) marks: Vec<Mark>,
    pub(super) dirty: Vec<usize>,
    pub(super) floor: u64,
    /// The highest `applied` of any mark, or the floor: what [`Store::resource_version`](crate::informer::store::Store::resource_version) reads,
    /// without a pass over every namespace.
    pub(super) highest: u64,
}

impl Marks {
    /// Empty, with every namespace at `floor`.
    pub(super) fn at(floor: u64) -> Self {
        Self {
            floor,
            highest: floor,
            ..Self::default()
        }
    }

    pub(super) fn watermark(&self, namespace: &str) -> u64 {
        self.index
            .get(namespace)
            .map_or(0, |&i| self.marks[i].published)
            .max(self.floor)
    }

    pub(super) fn observe(&mut self, obj: &ObjectRef) {
        let Some(rv) = obj.resource_version_number() else {
            return;
        };
        let namespace = obj.namespace().unwrap_or("");
        // A namespace seen before is the common case: found without building a key.
        let i = match self.index.get(namespace) {
            Some(&i) => i,
            None => {
                self.index.insert(namespace.into(), self.marks.len());
                self.marks.push(Mark::default());
                self.marks.len() - 1
            }
        };
        let mark = &mut self.marks[i];
        mark.applied = mark.applied.max(rv);
        if !mark.dirty && mark.applied != mark.published {
            mark.dirty = true;
            self.dirty.push(i);
        }
        self.highest = self.highest.max(rv);
    }

    pub(super) fn publish(&mut self) {
        for i in self.dirty.drain(..) {
            let mark = &mut self.marks[i];
            mark.published = mark.applied;
            mark.dirty = false;
        }
    }
}
