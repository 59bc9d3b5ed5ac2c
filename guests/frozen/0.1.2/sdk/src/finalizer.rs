//! Finalizers, in kube-runtime's shape: [`with_finalizer`] keeps a finalizer on an object while
//! it lives, runs the author's cleanup once it is being deleted, and only then lets it go.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::meta::shown;
use crate::{Error, Object, Outcome, Result, client};

/// Whether `obj` carries finalizer `name`.
pub fn has_finalizer<K: Object>(obj: &K, name: &str) -> bool {
    obj.meta().finalizers.iter().flatten().any(|f| f == name)
}

/// Runs `apply` while `obj` lives and `cleanup` once it is being deleted, keeping finalizer
/// `name` in step, as kube-runtime's `finalizer` does:
///
/// - not being deleted, finalizer missing: the finalizer is added, then `apply` runs with the
///   object as the server returned it;
/// - not being deleted, finalizer there: `apply` runs;
/// - being deleted (`deletionTimestamp` set), finalizer there: `cleanup` runs, and only if it
///   succeeds is the finalizer removed (the object may then be gone at once);
/// - being deleted, finalizer gone: nothing runs; [`Outcome::Done`].
///
/// Both patches are JSON patches that first `test` the finalizer list as it was read, so an
/// edit of the list by anyone else in between fails the patch rather than being overwritten.
/// That failure is [`Error::Conflict`] (retried with backoff, reading the list again), though
/// the API server reports it as invalid. Returns what `apply` or `cleanup` returned.
///
/// Where it may surprise: `cleanup` runs again if removing the finalizer fails, so it must be
/// safe to repeat; and a finalizer added by this helper is not removed when the reconciler
/// stops being deployed, so a deleted object waits for it until someone removes it.
pub fn with_finalizer<K, A, C>(obj: &K, name: &str, apply: A, cleanup: C) -> Result<Outcome>
where
    K: Object + Clone + DeserializeOwned,
    A: FnOnce(K) -> Result<Outcome>,
    C: FnOnce(K) -> Result<Outcome>,
{
    match plan(obj, name) {
        Plan::Add(patch) => apply(patch_finalizers(obj, &patch)?),
        Plan::Apply => apply(obj.clone()),
        Plan::Cleanup(patch) => {
            let outcome = cleanup(obj.clone())?;
            match patch_finalizers(obj, &patch) {
                // Not found: someone else let it go first; it is deleted, which was wanted.
                Err(e) if !e.is_not_found() => Err(e),
                _ => Ok(outcome),
            }
        }
        Plan::Nothing => Ok(Outcome::Done),
    }
}

/// What [`with_finalizer`] does for an object, decided from the object alone.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Add the finalizer with this JSON patch, then apply.
    Add(Value),
    /// Apply.
    Apply,
    /// Clean up, then remove the finalizer with this JSON patch.
    Cleanup(Value),
    /// Being deleted and not ours to hold: nothing.
    Nothing,
}

fn plan<K: Object>(obj: &K, name: &str) -> Plan {
    let meta = obj.meta();
    let index = meta.finalizers.iter().flatten().position(|f| f == name);
    match (meta.deletion_timestamp.is_some(), index) {
        (false, Some(_)) => Plan::Apply,
        (false, None) => Plan::Add(match &meta.finalizers {
            // An absent list is tested as null: `add` of a whole list would replace one that
            // appeared meanwhile.
            None => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [name]},
            ]),
            Some(list) => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": list},
                {"op": "add", "path": "/metadata/finalizers/-", "value": name},
            ]),
        }),
        (true, Some(i)) => Plan::Cleanup(json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": name},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ])),
        (true, None) => Plan::Nothing,
    }
}

fn patch_finalizers<K: Object + DeserializeOwned>(obj: &K, patch: &Value) -> Result<K> {
    let meta = obj.meta();
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    client::json_patch::<K>(namespace, name, patch).map_err(|e| match e {
        Error::Invalid(m) => Error::Conflict(format!(
            "the finalizers of {} {} changed since they were read ({m}); read it again",
            K::gvk().kind,
            shown(obj)
        )),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    const NAME: &str = "example.com/cleanup";

    fn cm(finalizers: Option<&[&str]>, deleting: bool) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ns".into()),
                finalizers: finalizers.map(|f| f.iter().map(|s| s.to_string()).collect()),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_live_object_without_the_finalizer_gets_it_by_a_patch_that_tests_the_list_first() {
        assert_eq!(
            plan(&cm(None, false), NAME),
            Plan::Add(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [NAME]},
            ]))
        );
        assert_eq!(
            plan(&cm(Some(&["other"]), false), NAME),
            Plan::Add(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": NAME},
            ]))
        );
    }

    #[test]
    fn a_live_object_with_the_finalizer_is_applied() {
        assert_eq!(plan(&cm(Some(&["other", NAME]), false), NAME), Plan::Apply);
        assert!(has_finalizer(&cm(Some(&["other", NAME]), false), NAME));
    }

    #[test]
    fn an_object_being_deleted_is_cleaned_up_then_its_entry_removed_at_its_index() {
        assert_eq!(
            plan(&cm(Some(&["other", NAME]), true), NAME),
            Plan::Cleanup(json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": NAME},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
        );
    }

    #[test]
    fn an_object_being_deleted_without_the_finalizer_is_left_alone() {
        assert_eq!(plan(&cm(Some(&["other"]), true), NAME), Plan::Nothing);
        assert_eq!(plan(&cm(None, true), NAME), Plan::Nothing);
        assert!(!has_finalizer(&cm(None, true), NAME));
    }
}
