//! Protobuf on the wire changes nothing a guest can see: ConfigMaps, Secrets, ServiceAccounts and
//! Namespaces read as protobuf, through a WatchList and its watch, are stored byte for byte as the
//! same objects read as JSON, whatever the transform, and the watch events after the sync are
//! too.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::namespace;
use common::wait::wait_until;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, LocalObjectReference, ObjectReference, Secret, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use reconciled::informer::store::Query;
use reconciled::informer::{Informer, InformerKey, Options, Scope};
use reconciled::object::Transform;
use reconciled::selector::{FieldSelector, LabelSelector};
use serde_json::json;
use testenv::ControlPlane;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// ConfigMaps and Secrets with every part of the tables in use: labels, annotations (one the
/// default transform strips), an owner, finalizers, binary data, `immutable`, server-side apply's
/// managedFields, odd characters.
async fn objects(client: &kube::Client, ns: &str) -> (Api<ConfigMap>, Api<Secret>) {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    let owner = cms
        .create(
            &pp,
            &ConfigMap {
                metadata: meta("owner"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut full = ConfigMap {
        metadata: ObjectMeta {
            labels: Some([("app".into(), "shop".into()), ("tier".into(), "web".into())].into()),
            annotations: Some(
                [
                    (
                        "note".to_string(),
                        "<a & \"b\">\n\u{e9}\u{1F600}".to_string(),
                    ),
                    (
                        "kubectl.kubernetes.io/last-applied-configuration".into(),
                        "{\"big\": true}".into(),
                    ),
                ]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.metadata.uid.clone().unwrap(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]),
            finalizers: Some(vec!["example.com/hold".into()]),
            ..meta("full")
        },
        data: Some([("b".into(), "two".into()), ("a".into(), "".into())].into()),
        binary_data: Some([("bin".into(), ByteString(vec![0, 1, 2, 0xff]))].into()),
        immutable: Some(false),
    };
    cms.create(&pp, &full).await.unwrap();
    full.metadata.name = Some("frozen".into());
    full.metadata.finalizers = None;
    full.immutable = Some(true);
    cms.create(&pp, &full).await.unwrap();
    for i in 0..20 {
        cms.create(
            &pp,
            &ConfigMap {
                metadata: meta(&format!("plain-{i:02}")),
                data: Some([("i".into(), i.to_string())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let applied = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied", "labels": {"by": "apply"}},
        "data": {"k": "v"}
    });
    cms.patch(
        "applied",
        &PatchParams::apply("protobuf-test").force(),
        &Patch::Apply(&applied),
    )
    .await
    .unwrap();
    secrets
        .create(
            &pp,
            &Secret {
                metadata: meta("token"),
                data: Some(BTreeMap::from([(
                    "key".to_string(),
                    ByteString(b"s3cr3t\0".to_vec()),
                )])),
                type_: Some("Opaque".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(
            &pp,
            &ServiceAccount {
                metadata: meta("builder"),
                secrets: Some(vec![ObjectReference {
                    kind: Some("Secret".into()),
                    name: Some("token".into()),
                    ..Default::default()
                }]),
                image_pull_secrets: Some(vec![LocalObjectReference {
                    name: "registry".into(),
                }]),
                automount_service_account_token: Some(false),
            },
        )
        .await
        .unwrap();
    (cms, secrets)
}

fn informer(
    client: &kube::Client,
    kind: &str,
    ns: &str,
    t: &Transform,
    protobuf: bool,
) -> Arc<Informer> {
    // Only this test's own objects, so that nothing the control plane adds meanwhile (other
    // tests' namespaces, the namespace's `default` ServiceAccount and `kube-root-ca.crt`
    // ConfigMap) can reach one informer of a pair before the other.
    let (labels, fields) = match kind {
        "Namespace" => (format!("kubernetes.io/metadata.name={ns}"), String::new()),
        "ServiceAccount" => (String::new(), "metadata.name=builder".to_string()),
        "ConfigMap" => (String::new(), "metadata.name!=kube-root-ca.crt".to_string()),
        _ => (String::new(), String::new()),
    };
    let scope = Scope {
        transform: t.clone(),
        labels: LabelSelector::parse(&labels).unwrap(),
        fields: FieldSelector::parse(&fields).unwrap(),
        ..if kind == "Namespace" {
            Scope::default()
        } else {
            Scope::namespace(ns)
        }
    };
    Informer::start(
        client.clone(),
        InformerKey::new("", "v1", kind, scope),
        Options {
            protobuf,
            ..Options::default()
        },
    )
}

/// Every object of `pb` and `js`, which must be equal, byte for byte.
fn assert_same(what: &str, pb: &Informer, js: &Informer) -> usize {
    let mut a = pb.store().list(&Query::default()).unwrap();
    let mut b = js.store().list(&Query::default()).unwrap();
    a.sort_by(|x, y| x.key().cmp(y.key()));
    b.sort_by(|x, y| x.key().cmp(y.key()));
    assert_eq!(a.len(), b.len(), "{what}: as many objects");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            String::from_utf8_lossy(x.json()),
            String::from_utf8_lossy(y.json()),
            "{what}: {}",
            x.key()
        );
        assert_eq!(x, y, "{what}: {}", x.key());
    }
    a.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_read_as_protobuf_are_stored_byte_for_byte_as_from_json() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "protobuf-equal";
    namespace(&client, ns).await;
    let (cms, secrets) = objects(&client, ns).await;

    let transforms = [Transform::default(), Transform::none()];
    let mut pairs = Vec::new();
    for t in &transforms {
        for kind in ["ConfigMap", "Secret", "ServiceAccount", "Namespace"] {
            let pb = informer(&client, kind, ns, t, true);
            let js = informer(&client, kind, ns, t, false);
            pairs.push((format!("{kind} {t:?}"), pb, js));
        }
    }
    for (what, pb, js) in &pairs {
        pb.wait_synced(Duration::from_secs(30)).await.unwrap();
        js.wait_synced(Duration::from_secs(30)).await.unwrap();
        let n = assert_same(&format!("{what} after the sync"), pb, js);
        assert!(n >= 1, "{what}: {n} objects");
    }

    // Watch events: an edit, a deletion held by a finalizer (deletionTimestamp and its grace
    // period appear), a deletion, a creation.
    cms.patch(
        "plain-00",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"i": "edited"}, "metadata": {"labels": {"new": "label"}}})),
    )
    .await
    .unwrap();
    cms.delete("full", &DeleteParams::default()).await.unwrap();
    cms.delete("plain-01", &DeleteParams::default())
        .await
        .unwrap();
    let last = secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: meta("later"),
                string_data: Some([("k".into(), "from stringData".into())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let rv: u64 = last.metadata.resource_version.unwrap().parse().unwrap();
    for (what, pb, js) in &pairs {
        wait_until(
            &format!("{what}: the last event"),
            Duration::from_secs(30),
            || {
                // The Secret watch sees the last write; the ConfigMap watches see a bookmark or
                // their own last event, so they are waited for through the deletion instead.
                // No ServiceAccount or Namespace changed.
                let store = |i: &Informer| match what.split(' ').next() {
                    Some("Secret") => i.store().resource_version() >= rv,
                    Some("ConfigMap") => {
                        i.store().get(&format!("{ns}/plain-01")).is_none()
                            && i.store().get(&format!("{ns}/full")).is_some_and(|o| {
                                o.to_value()["metadata"]["deletionTimestamp"].is_string()
                            })
                    }
                    _ => true,
                };
                store(pb) && store(js)
            },
        )
        .await;
        assert_same(&format!("{what} after watch events"), pb, js);
        let (p, j) = (pb.stats(), js.stats());
        assert!(p.protobuf_reads > 0, "{what}: {p:?}");
        assert_eq!(p.protobuf_fallbacks, 0, "{what}: {p:?}");
        assert!(
            p.watch_list_syncs >= 1,
            "{what}: a WatchList over protobuf: {p:?}"
        );
        assert_eq!(j.protobuf_reads, 0, "{what}: {j:?}");
    }
    let edited = pairs[0].1.store().get(&format!("{ns}/plain-00")).unwrap();
    assert_eq!(edited.label("new"), Some("label"));

    // Let the held ConfigMap go.
    cms.patch(
        "full",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}
