//! Fixtures tests keep needing on the control plane: namespaces, RBAC grants, and waiting for
//! an object to be gone.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// Creates namespace `name`. Tests on the shared control plane isolate themselves this way.
pub async fn create_namespace(client: &kube::Client, name: &str) -> kube::Result<Namespace> {
    let ns = Namespace {
        metadata: meta(name),
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
}

/// A rule for `resources` in API group `api_group` ("" for core) with `verbs`.
pub fn rule(api_group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![api_group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// Grants `user` the `rules` in `namespace`: a Role and a RoleBinding, both named `name`.
///
/// Where it may surprise: the RBAC authorizer reads Roles through an informer, so a grant
/// takes effect a moment (usually well under a second) after this returns.
pub async fn grant(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    user: &str,
    rules: Vec<PolicyRule>,
) -> kube::Result<()> {
    let role = Role {
        metadata: meta(name),
        rules: Some(rules),
    };
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await?;
    let binding = RoleBinding {
        metadata: meta(name),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Polls `get` every 100 ms until it finds nothing; panics naming `what` after `timeout`.
/// Returns how long it took.
///
/// For what the cluster deletes on its own schedule (the garbage collector, namespace
/// finalization), where there is no event of ours to wait on.
pub async fn wait_gone<F, Fut, T>(
    what: &str,
    timeout: std::time::Duration,
    mut get: F,
) -> std::time::Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<Option<T>>>,
{
    let started = std::time::Instant::now();
    loop {
        if get().await.unwrap().is_none() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{what} still exists {timeout:?} later"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
