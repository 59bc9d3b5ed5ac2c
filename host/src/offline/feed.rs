//! Feeding the offline informers: each write the server applies reaches the stores it falls in,
//! as the watch event would, with the watermark read-your-writes waits for.

use std::sync::Arc;

use serde_json::Value;

use crate::informer::store::Writer;
use crate::informer::{Namespaces, Scope};
use crate::object::Object;
use crate::offline::semantics::meta;
use crate::selector::FieldSelector;

/// A store fed by the server's writes, as its watch would feed it.
pub(crate) struct Cache {
    pub(crate) group: String,
    pub(crate) plural: String,
    pub(crate) scope: Scope,
    pub(crate) writer: Writer,
}

impl Cache {
    /// Whether the store's scope covers `v`.
    pub(crate) fn holds(&self, v: &Value) -> bool {
        let namespace = meta(v, "namespace");
        let ns_ok = match &self.scope.namespaces {
            Namespaces::All => true,
            Namespaces::Only(set) => set.contains(namespace),
        };
        let labels = &v["metadata"]["labels"];
        ns_ok
            && self.scope.labels.matches(|k| labels[k].as_str())
            && fields_match(&self.scope.fields, v)
    }

    /// `v` was written: upserted, or removed if it left the scope.
    pub(crate) fn put(&self, v: &Value) {
        let key = crate::object::object_key(Some(meta(v, "namespace")), meta(v, "name"));
        if self.holds(v) {
            if let Ok(o) = Object::from_value(v.clone(), &self.scope.transform, None) {
                self.writer.upsert(Arc::new(o));
            }
        } else {
            self.writer.remove(&key);
        }
        self.writer.publish_watermarks();
    }

    /// `v` was deleted.
    pub(crate) fn gone(&self, v: &Value) {
        if let Ok(o) = Object::from_value(v.clone(), &self.scope.transform, None) {
            self.writer.observe(&Arc::new(o));
        }
        let key = crate::object::object_key(Some(meta(v, "namespace")), meta(v, "name"));
        self.writer.remove(&key);
        self.writer.publish_watermarks();
    }
}

/// Whether `v` matches a field selector (any dotted path; the API server supports fewer).
pub(crate) fn fields_match(selector: &FieldSelector, v: &Value) -> bool {
    selector.requirements().iter().all(|r| {
        let mut at = v;
        for part in r.field.split('.') {
            at = &at[part];
        }
        let value = match at {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        (value == r.value) != r.negated
    })
}
