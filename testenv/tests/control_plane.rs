//! The loopback control plane behaves like a real cluster: kubectl works, RBAC is enforced,
//! the garbage collector deletes dependents, and deleted namespaces finalize.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Resource};
use testenv::ControlPlane;
use testenv::fixtures::wait_gone;

/// How long the garbage collector and the namespace controller get to delete.
const GONE: Duration = Duration::from_secs(30);

async fn namespace(client: &kube::Client, name: &str) {
    testenv::fixtures::create_namespace(client, name)
        .await
        .unwrap();
}

#[test]
fn kubectl_with_the_written_kubeconfig_lists_default() {
    let cp = ControlPlane::shared();
    let out = cp
        .kubectl()
        .args(["get", "namespaces", "-o", "name"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.lines().any(|l| l == "namespace/default"),
        "no default namespace in {stdout:?}"
    );

    let out = cp
        .kubectl()
        .args(["version", "-o", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["serverVersion"]["gitVersion"],
        testenv::binaries::kubernetes_version(),
        "/version must tell the truth"
    );
}

#[tokio::test]
async fn admin_writes_and_a_limited_user_is_forbidden_until_granted() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "rbac-check";
    namespace(&admin, ns).await;

    let cms = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("one".into()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(cms.get("one").await.unwrap().data.unwrap()["k"], "v");
    let names: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains(&"one".to_string()), "{names:?}");

    let user = cp.user("limited-lisa", &["testers"]).unwrap();
    let as_user =
        Api::<ConfigMap>::namespaced(kube::Client::try_from(user.config.clone()).unwrap(), ns);
    match as_user.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("a user with no rights listed configmaps: {other:?}"),
    }

    let rule = testenv::fixtures::rule("", &["configmaps"], &["list", "get"]);
    testenv::fixtures::grant(&admin, ns, "read-cm", &user.name, vec![rule])
        .await
        .unwrap();

    // The RBAC authorizer reads from an informer, so a grant takes effect a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match as_user.list(&ListParams::default()).await {
            Ok(list) => {
                assert_eq!(list.items.len(), 1);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 403 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("still failing 10 s after the grant: {e}"),
        }
    }
}

fn config_map(name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    // As controller, blocking the owner's deletion.
    let owner_references = owner.map(|o| vec![o.controller_owner_ref(&()).unwrap()]);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependent() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "gc-owner";
    namespace(&client, ns).await;
    let cms = Api::<ConfigMap>::namespaced(client, ns);
    let pp = PostParams::default();
    let owner = cms.create(&pp, &config_map("owner", None)).await.unwrap();
    cms.create(&pp, &config_map("dependent", Some(&owner)))
        .await
        .unwrap();
    cms.create(&pp, &config_map("bystander", None))
        .await
        .unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    let took = wait_gone("the dependent of a deleted owner", GONE, || {
        cms.get_opt("dependent")
    })
    .await;
    eprintln!("garbage collector removed the dependent {took:?} after its owner was deleted");
    assert!(
        cms.get_opt("bystander").await.unwrap().is_some(),
        "the garbage collector deleted a ConfigMap that has no owner"
    );
}

#[tokio::test]
async fn a_deleted_namespace_with_content_finalizes() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "ns-finalize";
    namespace(&client, ns).await;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config_map("content", None))
        .await
        .unwrap();

    let namespaces = Api::<Namespace>::all(client);
    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
    let took = wait_gone("the deleted namespace", GONE, || namespaces.get_opt(ns)).await;
    eprintln!("namespace {ns} finalized {took:?} after its deletion");
}
