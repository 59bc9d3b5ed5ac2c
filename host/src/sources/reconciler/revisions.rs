//! `ReconcilerRevision`s: one immutable object per (module digest, settings) a Reconciler has
//! served, numbered from 1, owned by the Reconciler (so deleting it deletes them), pruned to
//! `spec.revisionHistoryLimit` beside the one serving and the one pinned.
//!
//! Which number a version gets and which revisions go are pure functions ([`number_for`],
//! [`prunable`]); the writes beside them are made by the replica that owns the guest only.
//!
//! Where it may surprise:
//! - Tenants may read revisions but not write them (`deploy/tenant.yaml`): a revision is the
//!   host's word that this Reconciler ran that module, which is why pinning one may reuse the
//!   host's cached copy of its module without asking the registry again.
//! - Names are `<reconciler>-<number>`, cut to fit the API server's 253 characters; revisions
//!   are found by their owner's uid, never by name alone. A Reconciler deleted and created
//!   again under the same name numbers from 1 again, so its first revision waits until the
//!   garbage collector has removed its predecessor's of the same name.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::guest::settings::GuestSettings;
use crate::informer::store::{Query, Store};
use crate::supervisor::RECONCILER_API_VERSION;

/// The label every revision carries: its Reconciler's uid (a name may be too long for a label).
pub(crate) const OWNER_UID_LABEL: &str = "reconciled.dev/reconciler-uid";

/// The field manager of every write the host makes to Reconcilers and their revisions.
pub(crate) const FIELD_MANAGER: &str = "reconciled";

/// Why a revision could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The API server refused or failed the write.
    #[error(
        "cannot {what} ReconcilerRevision {namespace}/{name}: {source}; the host needs create, delete and patch on reconciled.dev reconcilerrevisions (deploy/reconciled.yaml)"
    )]
    Write {
        what: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// A revision, as read from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Revision {
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Its own uid (empty for one this replica just created): deletes are guarded by it.
    pub(crate) uid: String,
    pub(crate) number: u64,
    /// The uid of the Reconciler that owns it.
    pub(crate) owner: String,
    /// sha256 of the module, hex.
    pub(crate) digest: String,
    /// Where the module came from (see `Source::Reconciler::module`).
    pub(crate) module: String,
    pub(crate) settings: GuestSettings,
}

/// The revision in `json`, if it is one this host wrote (owned by a Reconciler, numbered).
pub(crate) fn read(json: &[u8]) -> Option<Revision> {
    let v: Value = serde_json::from_slice(json).ok()?;
    let owner = v["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == "Reconciler" && o["controller"] == true)?["uid"]
        .as_str()?
        .to_string();
    let spec = &v["spec"];
    Some(Revision {
        namespace: v["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        name: v["metadata"]["name"].as_str()?.to_string(),
        uid: v["metadata"]["uid"].as_str().unwrap_or("").to_string(),
        number: spec["revision"].as_u64()?,
        owner,
        digest: spec["digest"].as_str()?.to_string(),
        module: spec["source"].as_str()?.to_string(),
        settings: match &spec["settings"] {
            Value::Null => GuestSettings::default(),
            s => GuestSettings::from_value(s).ok()?,
        },
    })
}

/// The revisions of the Reconciler of uid `uid` in `namespace`, through the cache's owner index.
pub(crate) fn of(store: &Store, namespace: &str, uid: &str) -> Vec<Revision> {
    let query = Query {
        namespace: Some(namespace.to_string()),
        owner_uid: Some(uid.to_string()),
        ..Query::default()
    };
    // Only an unindexed field fails a query, and this one names none.
    let owned = store.list(&query).unwrap_or_default();
    owned
        .iter()
        .filter_map(|o| read(o.json()))
        .filter(|r| r.owner == uid)
        .collect()
}

/// The number of the version (`digest`, `settings`) among `existing`: the revision that already
/// records it, or the next number (`Err`) for a new one.
pub(crate) fn number_for(
    existing: &[Revision],
    digest: &str,
    settings: &GuestSettings,
) -> Result<u64, u64> {
    match existing
        .iter()
        .filter(|r| r.digest == digest && &r.settings == settings)
        .map(|r| r.number)
        .max()
    {
        Some(n) => Ok(n),
        None => Err(existing.iter().map(|r| r.number).max().unwrap_or(0) + 1),
    }
}

/// The revisions past `limit` to delete: the oldest first, never `keep` (the one serving, the
/// one pinned).
pub(crate) fn prunable<'a>(
    existing: &'a [Revision],
    keep: &[u64],
    limit: usize,
) -> Vec<&'a Revision> {
    let mut others: Vec<&Revision> = existing
        .iter()
        .filter(|r| !keep.contains(&r.number))
        .collect();
    others.sort_by_key(|r| std::cmp::Reverse(r.number));
    others.into_iter().skip(limit).collect()
}

/// The name of revision `number` of Reconciler `reconciler`, within the API server's limit.
pub(crate) fn name_of(reconciler: &str, number: u64) -> String {
    let suffix = format!("-{number}");
    let room = 253 - suffix.len();
    let mut prefix: String = reconciler.chars().take(room).collect();
    // A name must end in a letter or digit.
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    format!("{prefix}{suffix}")
}

/// What a new revision records.
pub(crate) struct New<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) reconciler: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) number: u64,
    pub(crate) digest: &'a str,
    pub(crate) module: &'a str,
    pub(crate) settings: &'a GuestSettings,
    /// What the module declared.
    pub(crate) declared: crate::controller::Declaration,
    /// When it started serving, RFC 3339.
    pub(crate) served_from: &'a str,
}

fn api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("reconciled.dev", "v1alpha1", "ReconcilerRevision");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

/// Creates revision `new`, then records when it started serving; `false` when the name is taken
/// already (a write of this replica the cache has not shown yet, or a predecessor's of the same
/// name), which is left as it is.
pub(crate) async fn create(client: &kube::Client, new: New<'_>) -> Result<bool, Error> {
    let name = name_of(new.reconciler, new.number);
    let settings: Value = serde_json::from_str(new.settings.as_str()).unwrap_or_else(|_| json!({}));
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": RECONCILER_API_VERSION,
        "kind": "ReconcilerRevision",
        "metadata": {
            "name": name,
            "namespace": new.namespace,
            "labels": { OWNER_UID_LABEL: new.uid },
            "ownerReferences": [{
                "apiVersion": RECONCILER_API_VERSION,
                "kind": "Reconciler",
                "name": new.reconciler,
                "uid": new.uid,
                "controller": true,
            }],
        },
        "spec": {
            "revision": new.number,
            "digest": new.digest,
            "source": new.module,
            "settings": settings,
            "declared": {
                "for": new.declared.for_kind,
                "kinds": new.declared.kinds,
                "namespaces": new.declared.namespaces,
            },
        },
    }))
    .expect("a revision is a valid object");
    let api = api(client, new.namespace);
    let write = |what, source| Error::Write {
        what,
        namespace: new.namespace.to_string(),
        name: name.clone(),
        source,
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
        Err(e) => return Err(write("create", e)),
    }
    set_served(
        client,
        new.namespace,
        &name,
        json!({ "servedFrom": new.served_from }),
    )
    .await
    .map_err(|e| write("record when it served in", e))?;
    Ok(true)
}

/// Sets the fields of `status` (`servedFrom`, `servedUntil`; `null` removes one) on revision
/// `name`, leaving the others: a merge patch, since an apply of one field would drop the other
/// this manager set before.
pub(crate) async fn set_served(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    status: Value,
) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api(client, namespace)
        .patch_status(name, &params, &Patch::Merge(&json!({ "status": status })))
        .await
        .map(|_| ())
}

/// Deletes `revision`, only if it is still the object of that uid; one already gone (or
/// replaced since) is not an error.
pub(crate) async fn delete(client: &kube::Client, revision: &Revision) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: (!revision.uid.is_empty()).then(|| kube::api::Preconditions {
            uid: Some(revision.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api(client, &revision.namespace)
        .delete(&revision.name, &params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(source) => Err(Error::Write {
            what: "delete",
            namespace: revision.namespace.clone(),
            name: revision.name.clone(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(number: u64, digest: &str, settings: &str) -> Revision {
        Revision {
            namespace: "team-a".into(),
            name: name_of("rec", number),
            uid: format!("uid-{number}"),
            number,
            owner: "u-1".into(),
            digest: digest.into(),
            module: "oci://r.example/a@sha256:00".into(),
            settings: GuestSettings::parse(settings).unwrap(),
        }
    }

    #[test]
    fn a_version_served_before_keeps_its_number_and_a_new_one_takes_the_next() {
        let existing = [
            rev(1, "aa", "{}"),
            rev(2, "bb", "{}"),
            rev(3, "bb", r#"{"x":1}"#),
        ];
        let none = GuestSettings::default();
        assert_eq!(number_for(&existing, "bb", &none), Ok(2));
        assert_eq!(
            number_for(
                &existing,
                "bb",
                &GuestSettings::parse(r#"{"x":1}"#).unwrap()
            ),
            Ok(3),
            "settings are part of a version"
        );
        assert_eq!(number_for(&existing, "cc", &none), Err(4));
        assert_eq!(number_for(&[], "cc", &none), Err(1));
    }

    #[test]
    fn pruning_keeps_the_newest_within_the_limit_and_never_the_serving_or_pinned_one() {
        let existing: Vec<Revision> = (1..=8).map(|n| rev(n, &format!("{n:02}"), "{}")).collect();
        let gone: Vec<u64> = prunable(&existing, &[8], 5)
            .iter()
            .map(|r| r.number)
            .collect();
        assert_eq!(gone, [2, 1], "8 serves; 7..3 are the five kept");
        let gone: Vec<u64> = prunable(&existing, &[8, 1], 2)
            .iter()
            .map(|r| r.number)
            .collect();
        assert_eq!(gone, [5, 4, 3, 2], "1 is pinned");
        assert!(
            prunable(&existing, &[8], 0).len() == 7,
            "a limit of 0 keeps only the serving one"
        );
    }

    #[test]
    fn a_name_too_long_for_a_suffix_is_cut_to_fit_and_ends_in_a_letter_or_digit() {
        assert_eq!(name_of("rec", 12), "rec-12");
        let long = format!("{}-bbbb", "a".repeat(248));
        assert_eq!(long.len(), 253);
        let name = name_of(&long, 100);
        assert_eq!(name.len(), 252);
        assert!(name.ends_with("a-100"), "{name}");
    }

    #[test]
    fn only_a_numbered_revision_owned_by_a_reconciler_reads() {
        let good = json!({
            "metadata": {"name": "rec-2", "ownerReferences": [
                {"kind": "Reconciler", "controller": true, "uid": "u-1", "name": "rec", "apiVersion": RECONCILER_API_VERSION}
            ]},
            "spec": {"revision": 2, "digest": "aa", "source": "configmap/m/rec.wasm", "settings": {"b": 1, "a": 2}},
        });
        let r = read(good.to_string().as_bytes()).unwrap();
        assert_eq!((r.number, r.owner.as_str()), (2, "u-1"));
        assert_eq!(r.settings.as_str(), r#"{"a":2,"b":1}"#);
        let mut orphan = good.clone();
        orphan["metadata"]["ownerReferences"] = json!([]);
        assert_eq!(read(orphan.to_string().as_bytes()), None);
        assert_eq!(read(b"[]"), None);
    }
}
