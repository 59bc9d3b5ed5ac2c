//! Tenants act as themselves, against the real control plane: a tenant's guest gets from the
//! API server only what its own ServiceAccount may do (escalation closed), its cache reads are
//! reviewed as that ServiceAccount at load, and a right revoked later holds the guest until it
//! is restored, with no restart and no relist.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use reconciled::guest::identity::ServiceAccount as IdentityAccount;
use reconciled::ops::status::GuestState;
use reconciled::sources::configmap::{ConfigMapSource, TenantPolicy};
use reconciled::supervisor::{self, Applied, Reason, Source, Supervisor};
use testenv::ControlPlane;
use testenv::fixtures::rule;

use common::host::{seen, stamped, supervisor_options};
use common::wait::{wait_until, wait_until_async};

/// The ServiceAccount tenants' guests act as.
const GUEST_SA: &str = "reconciled-guest";
/// The annotation the hostile guest reports in.
const RESULT: &str = "hostile.reconciled.dev/result";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// Creates the namespace (unless it exists), the tenant's ServiceAccount, its Role `tenant` with
/// `rules`, and the RoleBinding `tenant` of it to the ServiceAccount.
async fn tenant(client: &kube::Client, ns: &str, rules: Vec<PolicyRule>) {
    if Api::<Namespace>::all(client.clone())
        .get_opt(ns)
        .await
        .unwrap()
        .is_none()
    {
        common::namespace(client, ns).await;
    }
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta(GUEST_SA),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("tenant"),
                rules: Some(rules),
            },
        )
        .await
        .unwrap();
    bind(client, ns).await;
    // A load reviewed before the authorizer sees the binding would be rejected.
    common::wait_allowed(client, ns, GUEST_SA, ("", "configmaps", "list")).await;
}

async fn bind(client: &kube::Client, ns: &str) {
    let binding = RoleBinding {
        metadata: meta("tenant"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "tenant".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: GUEST_SA.into(),
            namespace: Some(ns.into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// Delivers `wasm` as ConfigMap `rec` (key `rec`) in `ns`.
async fn deliver(client: &kube::Client, ns: &str, wasm: &str) {
    let module = std::fs::read(common::guests::wasm(wasm)).unwrap();
    let packed = reconciled::sources::configmap::pack(ns, "rec", "rec", &module).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(packed).unwrap(),
        )
        .await
        .unwrap();
}

async fn wait_serving(sup: &Supervisor, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while sup.controller(name).is_none() {
        assert!(
            Instant::now() < deadline,
            "{name} not serving: {:?}",
            sup.last_error(name)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The hostile guest's result on ConfigMap `name`, once it wrote one.
async fn result(cms: &Api<ConfigMap>, name: &str) -> BTreeMap<String, (String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cm = cms.get(name).await.unwrap();
        if let Some(r) = cm.metadata.annotations.and_then(|a| a.get(RESULT).cloned()) {
            return r
                .lines()
                .map(|l| {
                    let mut parts = l.splitn(3, '\t');
                    let call = parts.next().unwrap_or_default().to_string();
                    let case = parts.next().unwrap_or_default().to_string();
                    let message = parts.next().unwrap_or_default().to_string();
                    (call, (case, message))
                })
                .collect();
        }
        assert!(Instant::now() < deadline, "no result on {name}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn escalation(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(
            [
                ("deployment", "web"),
                ("secret", "token"),
                ("role", "tenant"),
                ("subject", "default"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        ),
        ..Default::default()
    }
}

fn deployment() -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            },
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_guest_gets_only_what_its_service_account_may_and_changes_nothing_else() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "tenant-escalate";
    // The tenant manages ConfigMaps. Deployments, Secrets and RoleBindings it may only list
    // and watch: what the host's load-time review asks of a guest that declares them, and
    // nothing the guest's calls below need.
    let read = ["list", "watch"];
    tenant(
        &admin,
        ns,
        vec![
            rule(
                "",
                &["configmaps"],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
            ),
            rule("apps", &["deployments"], &read),
            rule("", &["secrets"], &read),
            rule("rbac.authorization.k8s.io", &["rolebindings"], &read),
        ],
    )
    .await;
    let web = Api::<Deployment>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    let token = Api::<Secret>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: meta("token"),
                string_data: Some([("password".to_string(), "hunter2".to_string())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let sup = supervisor_options(&cp.admin_config(), None, supervisor::Options::default());
    let policy = TenantPolicy {
        namespaces: Some([ns.to_string()].into()),
        kinds: [
            "v1/ConfigMap",
            "apps/v1/Deployment",
            "v1/Secret",
            "rbac.authorization.k8s.io/v1/RoleBinding",
        ]
        .map(String::from)
        .into(),
        grants: [(
            ns.to_string(),
            Grant {
                namespaces: None,
                kinds: None,
                uncached_reads: true,
            },
        )]
        .into(),
        min_reload_interval_ms: 0,
        ..TenantPolicy::default()
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    deliver(&admin, ns, "hostile_escalate").await;
    let guest = format!("{ns}/rec/rec");
    wait_serving(&sup, &guest).await;

    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(&PostParams::default(), &escalation("escalate-1"))
        .await
        .unwrap();
    let got = result(&cms, "escalate-1").await;
    let account = format!("ServiceAccount {ns}/{GUEST_SA}");
    for (call, rule) in [
        (
            "delete-deployment",
            r#"{apiGroups:["apps"], resources:["deployments"], verbs:["delete"]}"#,
        ),
        (
            "get-secret",
            r#"{apiGroups:[""], resources:["secrets"], verbs:["get"]}"#,
        ),
        (
            "create-rolebinding",
            r#"{apiGroups:["rbac.authorization.k8s.io"], resources:["rolebindings"], verbs:["create"]}"#,
        ),
    ] {
        let (case, message) = &got[call];
        assert_eq!(case, "forbidden", "{call}: {message}");
        assert!(
            message.contains(&account) && message.contains(&format!("add rule {rule}")),
            "{call}: {message}"
        );
    }
    // Nothing changed on the server.
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let still = deployments.get("web").await.unwrap();
    assert_eq!(still.metadata.uid, web.metadata.uid);
    assert_eq!(
        still.metadata.resource_version,
        web.metadata.resource_version
    );
    assert!(still.metadata.deletion_timestamp.is_none());
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
    assert!(bindings.get_opt("escalated").await.unwrap().is_none());
    let secret = Api::<Secret>::namespaced(admin.clone(), ns)
        .get("token")
        .await
        .unwrap();
    assert_eq!(
        secret.metadata.resource_version,
        token.metadata.resource_version
    );

    // The same guest, once the tenant's Role grants those verbs.
    let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
    let mut role = roles.get("tenant").await.unwrap();
    role.rules.get_or_insert_default().extend([
        rule("apps", &["deployments"], &["delete"]),
        rule("", &["secrets"], &["get"]),
        rule("rbac.authorization.k8s.io", &["rolebindings"], &["create"]),
    ]);
    roles
        .replace("tenant", &PostParams::default(), &role)
        .await
        .unwrap();
    common::wait_allowed(&admin, ns, GUEST_SA, ("apps", "deployments", "delete")).await;
    common::wait_allowed(&admin, ns, GUEST_SA, ("", "secrets", "get")).await;
    let create_bindings = ("rbac.authorization.k8s.io", "rolebindings", "create");
    common::wait_allowed(&admin, ns, GUEST_SA, create_bindings).await;
    cms.create(&PostParams::default(), &escalation("escalate-2"))
        .await
        .unwrap();
    let got = result(&cms, "escalate-2").await;
    for call in ["delete-deployment", "get-secret", "create-rolebinding"] {
        assert_eq!(got[call].0, "ok", "{call}: {}", got[call].1);
    }
    let gone = deployments.get_opt("web").await.unwrap();
    assert!(
        gone.is_none_or(|d| d.metadata.deletion_timestamp.is_some()),
        "the Deployment was deleted"
    );
    assert!(bindings.get_opt("escalated").await.unwrap().is_some());
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_service_account_may_not_watch_a_kind_it_reads_is_rejected_naming_the_role() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "tenant-unreviewed";
    // ConfigMaps only: the guest also declares Deployments, Secrets and RoleBindings.
    tenant(
        &admin,
        ns,
        vec![rule(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch"],
        )],
    )
    .await;
    let sup = supervisor_options(&cp.admin_config(), None, supervisor::Options::default());
    let policy = TenantPolicy {
        // A wildcard would not do: Secrets and RoleBindings must be named.
        kinds: ["*", "v1/Secret", "rbac.authorization.k8s.io/v1/RoleBinding"]
            .map(String::from)
            .into(),
        ..TenantPolicy::default()
    };
    let name = format!("{ns}/rec/rec");
    let applied = sup
        .apply(
            &name,
            Source::ConfigMap {
                namespace: ns.into(),
                name: "rec".into(),
                key: "rec.wasm".into(),
                uid: String::new(),
            },
            policy.settings(&name, ns),
            std::fs::read(common::guests::wasm("hostile_escalate")).unwrap(),
        )
        .await;
    let Applied::Rejected { reason, message } = applied else {
        panic!("loaded: {applied:?}");
    };
    assert_eq!(reason, Reason::Access);
    assert_eq!(reason.label(), "access");
    assert!(
        message.contains(&format!("ServiceAccount {ns}/{GUEST_SA}"))
            && message.contains(
                r#"{apiGroups:["apps"], resources:["deployments"], verbs:["list","watch"]}"#
            )
            && message.contains(&format!("a RoleBinding of it to ServiceAccount {GUEST_SA}")),
        "{message}"
    );
    assert!(
        !message.contains("configmaps"),
        "only what is missing: {message}"
    );
    assert!(sup.controller(&name).is_none());
    sup.shutdown().await;
}

/// (LISTs, relists) of every informer the host runs.
fn lists(sup: &Supervisor) -> (u64, u64) {
    sup.factory().active().iter().fold((0, 0), |(l, r), i| {
        let s = i.stats();
        (l + s.lists + s.watch_list_syncs, r + s.relists)
    })
}

/// Events on `ns`'s objects with `reason`.
async fn events(client: &kube::Client, ns: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_right_holds_the_guest_and_a_restored_one_resumes_it_without_relisting() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "tenant-revoke";
    tenant(
        &admin,
        ns,
        vec![rule(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch"],
        )],
    )
    .await;
    let period = Duration::from_secs(2);
    let sup = supervisor_options(
        &cp.admin_config(),
        None,
        supervisor::Options {
            review_period: period,
            ..supervisor::Options::default()
        },
    );
    let policy = TenantPolicy {
        namespaces: Some([ns.to_string()].into()),
        kinds: ["v1/ConfigMap".to_string()].into(),
        min_reload_interval_ms: 0,
        ..TenantPolicy::default()
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    deliver(&admin, ns, "stamp_v1").await;
    let guest = format!("{ns}/rec/rec");
    wait_serving(&sup, &guest).await;
    wait_until_async("work reconciled", Duration::from_secs(30), || async {
        seen(&cms, "work").await.as_deref() == Some("v1:1")
    })
    .await;
    let controller = sup.controller(&guest).unwrap();
    // Module ConfigMaps, the guest's ConfigMaps, and the Roles and RoleBindings the reviews
    // follow: all listed once before the count starts.
    wait_until("every informer synced", Duration::from_secs(30), || {
        let active = sup.factory().active();
        active.len() == 4
            && active.iter().all(|i| {
                let s = i.stats();
                i.status().state.is_synced() && s.lists + s.watch_list_syncs > 0
            })
    })
    .await;
    let before = lists(&sup);

    // Revoked: held within a few review periods, saying why, with one Warning Event.
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .delete("tenant", &DeleteParams::default())
        .await
        .unwrap();
    let revoked = Instant::now();
    wait_until("guest held", Duration::from_secs(70), || {
        controller.snapshot().held_back.is_some()
    })
    .await;
    let held_after = revoked.elapsed();
    let why = controller.snapshot().held_back.unwrap();
    assert!(
        why.contains(&format!("ServiceAccount {ns}/{GUEST_SA}")) && why.contains("RoleBinding"),
        "{why}"
    );
    let status = sup.status();
    let shown = status.guest(&guest).unwrap();
    assert_eq!(shown.state, GuestState::Waiting);
    assert_eq!(shown.reason.as_deref(), Some(why.as_str()));
    wait_until_async("AccessRevoked Event", Duration::from_secs(10), || async {
        !events(&admin, ns, "AccessRevoked").await.is_empty()
    })
    .await;

    // Held: an edit queues its key, and nothing reconciles it, over several reviews.
    let mut work = cms.get("work").await.unwrap();
    work.data = Some([("v".to_string(), "2".to_string())].into());
    cms.replace("work", &PostParams::default(), &work)
        .await
        .unwrap();
    tokio::time::sleep(period * 3).await;
    assert_eq!(seen(&cms, "work").await.as_deref(), Some("v1:1"));
    assert!(
        controller.snapshot().queued >= 1,
        "the key waits in the queue"
    );
    let revoked_events = events(&admin, ns, "AccessRevoked").await;
    assert_eq!(revoked_events.len(), 1, "one Event, however many reviews");
    assert_eq!(revoked_events[0].type_.as_deref(), Some("Warning"));

    // Restored: the same controller resumes, nothing relisted.
    bind(&admin, ns).await;
    wait_until_async("work reconciled again", Duration::from_secs(70), || async {
        seen(&cms, "work").await.as_deref() == Some("v1:2")
    })
    .await;
    assert!(controller.snapshot().held_back.is_none());
    assert!(
        Arc::ptr_eq(&controller, &sup.controller(&guest).unwrap()),
        "no restart"
    );
    assert_eq!(sup.status().guest(&guest).unwrap().loads, 1, "no reload");
    assert_eq!(
        lists(&sup),
        before,
        "(LISTs, relists): no informer listed again"
    );
    wait_until_async("AccessRestored Event", Duration::from_secs(10), || async {
        !events(&admin, ns, "AccessRestored").await.is_empty()
    })
    .await;
    eprintln!("held {held_after:?} after the RoleBinding was deleted (review period {period:?})");
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_may_pick_another_service_account_of_its_namespace_and_a_bad_one_is_refused() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "tenant-annotated";
    tenant(
        &admin,
        ns,
        vec![rule(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch"],
        )],
    )
    .await;
    let sup = supervisor_options(&cp.admin_config(), None, supervisor::Options::default());
    let policy = TenantPolicy {
        namespaces: Some([ns.to_string()].into()),
        kinds: ["v1/ConfigMap".to_string()].into(),
        min_reload_interval_ms: 0,
        ..TenantPolicy::default()
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    deliver(&admin, ns, "stamp_v1").await;
    let guest = format!("{ns}/rec/rec");
    wait_serving(&sup, &guest).await;

    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let annotate = |value: &'static str| {
        let cms = cms.clone();
        async move {
            let patch = serde_json::json!({"metadata": {"annotations": {
                "reconciled.dev/service-account": value,
            }}});
            cms.patch(
                "rec",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await
            .unwrap();
        }
    };
    // Another ServiceAccount, which may read nothing: the guest restarts as it, and is refused.
    annotate("deployer").await;
    wait_until(
        "restarted as deployer and refused",
        Duration::from_secs(30),
        || {
            sup.controller(&guest).is_none()
                && sup
                    .last_error(&guest)
                    .is_some_and(|e| e.contains(&format!("ServiceAccount {ns}/deployer")))
        },
    )
    .await;
    // A name no ServiceAccount can have: refused, saying so on the ConfigMap.
    annotate("Not_A_Name").await;
    common::wait::wait_event(
        &admin,
        ns,
        "rec",
        "ModuleRejected",
        "annotation reconciled.dev/service-account names no usable ServiceAccount",
        Duration::from_secs(30),
    )
    .await;
    assert!(sup.controller(&guest).is_none());
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_guest_acts_as_the_host_unless_its_config_names_a_service_account() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "operator-identity";
    // The ServiceAccount may read ConfigMaps, not patch them.
    tenant(
        &admin,
        ns,
        vec![rule("", &["configmaps"], &["get", "list", "watch"])],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    let sup = supervisor_options(&cp.admin_config(), None, supervisor::Options::default());
    let module = common::guests::wasm("stamp_v1");
    let bytes = std::fs::read(&module).unwrap();
    let as_sa = Settings {
        grant: Grant::namespaces([ns]),
        identity: Some(IdentityAccount::parse(&format!("{ns}/{GUEST_SA}")).unwrap()),
        ..Settings::new("ops")
    };
    let applied = sup
        .apply(
            "ops",
            Source::File(module.clone()),
            as_sa.clone(),
            bytes.clone(),
        )
        .await;
    assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");
    wait_until_async("a forbidden reconcile", Duration::from_secs(30), || async {
        sup.controller("ops")
            .and_then(|c| c.last_error(&format!("{ns}/work")))
            .is_some_and(|e| {
                e.contains(&format!("ServiceAccount {ns}/{GUEST_SA}"))
                    && e.contains(r#"verbs:[\"patch\"]"#)
            })
    })
    .await;
    assert_eq!(seen(&cms, "work").await, None, "nothing written");

    // The same guest without a ServiceAccount: restarted, and writing as the host.
    let as_host = Settings {
        identity: None,
        ..as_sa
    };
    let applied = sup.apply("ops", Source::File(module), as_host, bytes).await;
    assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");
    wait_until_async(
        "reconciled as the host",
        Duration::from_secs(30),
        || async { seen(&cms, "work").await.as_deref() == Some("v1:1") },
    )
    .await;
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_lost_through_a_clusterrole_edit_holds_the_guest_within_the_review_period() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "tenant-clusterrole";
    common::namespace(&admin, ns).await;
    // The tenant's rights come from a ClusterRole, whose edits no Role or RoleBinding event
    // announces: only the periodic review sees them.
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    let reader = |verbs: &[&str]| ClusterRole {
        metadata: meta(&format!("{ns}-reader")),
        rules: Some(vec![rule("", &["configmaps"], verbs)]),
        ..Default::default()
    };
    cluster_roles
        .create(
            &PostParams::default(),
            &reader(&["get", "list", "watch", "patch"]),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("tenant"),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: format!("{ns}-reader"),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: GUEST_SA.into(),
                    namespace: Some(ns.into()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();
    common::wait_allowed(&admin, ns, GUEST_SA, ("", "configmaps", "list")).await;
    let period = Duration::from_secs(2);
    let sup = supervisor_options(
        &cp.admin_config(),
        None,
        supervisor::Options {
            review_period: period,
            ..supervisor::Options::default()
        },
    );
    let policy = TenantPolicy {
        namespaces: Some([ns.to_string()].into()),
        kinds: ["v1/ConfigMap".to_string()].into(),
        min_reload_interval_ms: 0,
        ..TenantPolicy::default()
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    deliver(&admin, ns, "stamp_v1").await;
    let guest = format!("{ns}/rec/rec");
    wait_serving(&sup, &guest).await;
    let controller = sup.controller(&guest).unwrap();

    let mut edited = cluster_roles.get(&format!("{ns}-reader")).await.unwrap();
    edited.rules = reader(&["get", "patch"]).rules;
    cluster_roles
        .replace(&format!("{ns}-reader"), &PostParams::default(), &edited)
        .await
        .unwrap();
    // One period, plus the authorizer's own cache and a pass's reviews.
    let held = wait_until("guest held", period * 4, || {
        controller.snapshot().held_back.is_some()
    })
    .await;
    let why = controller.snapshot().held_back.unwrap();
    assert!(why.contains(r#"verbs:["list","watch"]"#), "{why}");

    let mut restored = cluster_roles.get(&format!("{ns}-reader")).await.unwrap();
    restored.rules = reader(&["get", "list", "watch", "patch"]).rules;
    cluster_roles
        .replace(&format!("{ns}-reader"), &PostParams::default(), &restored)
        .await
        .unwrap();
    wait_until("guest resumed", period * 4, || {
        controller.snapshot().held_back.is_none()
    })
    .await;
    eprintln!("held {held:?} after the ClusterRole edit (review period {period:?})");
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_refused_for_access_loads_once_its_service_account_is_granted_without_an_edit() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "tenant-granted-later";
    common::namespace(&admin, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    let sup = supervisor_options(&cp.admin_config(), None, supervisor::Options::default());
    let policy = TenantPolicy {
        namespaces: Some([ns.to_string()].into()),
        kinds: ["v1/ConfigMap".to_string()].into(),
        min_reload_interval_ms: 0,
        ..TenantPolicy::default()
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    deliver(&admin, ns, "stamp_v1").await;
    let guest = format!("{ns}/rec/rec");
    common::wait::wait_event(
        &admin,
        ns,
        "rec",
        "ModuleRejected",
        "module rejected (access",
        common::wait::COLD_LOAD,
    )
    .await;
    assert!(sup.controller(&guest).is_none());

    // The platform team creates the tenant's Role and RoleBinding; nobody touches the ConfigMap.
    tenant(
        &admin,
        ns,
        vec![rule(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch"],
        )],
    )
    .await;
    wait_until_async(
        "reconciled once granted",
        Duration::from_secs(30),
        || async { seen(&cms, "work").await.as_deref() == Some("v1:1") },
    )
    .await;
    sup.shutdown().await;
}
