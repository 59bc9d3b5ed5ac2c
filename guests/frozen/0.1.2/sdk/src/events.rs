//! Events about an object you hold: its kind, namespace and name come from the object.

use crate::meta::shown;
use crate::{Error, EventType, Object, Result, client};

/// Records a Normal Event about `obj`. `reason` is a short UpperCamelCase word
/// (`Generated`), `message` a sentence for humans (cut at 1024 bytes by the host).
///
/// An Event is worth little next to the write it reports: most reconcilers log a failed one
/// and carry on rather than fail the reconcile and retry everything.
pub fn normal<K: Object>(obj: &K, reason: &str, message: &str) -> Result<()> {
    record(obj, EventType::Normal, reason, message)
}

/// Records a Warning Event about `obj`; see [`normal`].
pub fn warning<K: Object>(obj: &K, reason: &str, message: &str) -> Result<()> {
    record(obj, EventType::Warning, reason, message)
}

fn record<K: Object>(obj: &K, event_type: EventType, reason: &str, message: &str) -> Result<()> {
    let meta = obj.meta();
    let Some(name) = meta.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(Error::Invalid(format!(
            "an Event about {} {} needs the object's metadata.name",
            K::gvk().kind,
            shown(obj)
        )));
    };
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    client::record_event::<K>(namespace, name, event_type, reason, message)
}
