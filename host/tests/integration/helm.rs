//! The Helm chart (`deploy/chart`) with the real helm (helm.sh/helm/v4, built from Go modules):
//! it lints; with its defaults it renders what the plain manifests hold, so the two cannot
//! drift; a bad value fails with a message naming it; what it renders with every option on is
//! accepted by the API server (server-side dry run); and it installs into the control plane and
//! uninstalls leaving nothing of itself but the CRDs, as Helm leaves CRDs. The image run as the
//! chart's Deployment, upgraded and uninstalled, is in `container.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use serde_json::Value;
use testenv::helm::Helm;

fn chart() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart")
}

fn plain(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(path).unwrap()
}

/// The chart rendered as release `release` in `ns` with `sets`.
fn render(
    helm: &Helm,
    release: &str,
    ns: &str,
    sets: &[&str],
) -> Result<String, testenv::helm::Error> {
    let chart = chart();
    let mut args = vec!["template", release, chart.to_str().unwrap(), "-n", ns];
    for s in sets {
        args.extend(["--set", s]);
    }
    helm.run(&args)
}

/// Objects by `kind namespace/name`, each made comparable: the name label every chart object
/// carries and the config checksum on the pod template (neither says anything a reader of the
/// plain manifests misses) dropped, and `host.toml` parsed, so that comments and layout do not
/// count.
fn objects(yaml: &str, default_ns: Option<&str>) -> BTreeMap<String, Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    let mut out = BTreeMap::new();
    for mut doc in docs.into_iter().filter(|d| d.is_object()) {
        let meta = doc["metadata"].as_object_mut().unwrap();
        if let (None, Some(ns)) = (meta.get("namespace"), default_ns) {
            meta.insert("namespace".into(), ns.into());
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("app.kubernetes.io/name");
            if labels.is_empty() {
                meta.remove("labels");
            }
        }
        if let Some(a) = doc
            .pointer_mut("/spec/template/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove("checksum/config");
            if a.is_empty() {
                doc["spec"]["template"]["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("annotations");
            }
        }
        if let Some(text) = doc.pointer("/data/host.toml").and_then(Value::as_str) {
            let parsed: toml::Value = toml::from_str(text).unwrap();
            doc["data"]["host.toml"] = serde_json::to_value(parsed).unwrap();
        }
        // A RoleBinding's ServiceAccount subject without a namespace is in the binding's.
        let ns = doc["metadata"]["namespace"].clone();
        if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects {
                if s["kind"] == "ServiceAccount" && s.get("namespace").is_none() {
                    s["namespace"] = ns.clone();
                }
            }
        }
        let key = format!(
            "{} {}/{}",
            doc["kind"].as_str().unwrap(),
            doc["metadata"]["namespace"].as_str().unwrap_or(""),
            doc["metadata"]["name"].as_str().unwrap()
        );
        out.insert(key, doc);
    }
    out
}

/// The first difference between two object sets, for a failure message.
fn first_difference(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Option<String> {
    let keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => {
                return Some(format!(
                    "{k}:\n  chart: {}\n  plain: {}",
                    serde_json::to_string(&x).unwrap(),
                    serde_json::to_string(&y).unwrap()
                ));
            }
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_lints_renders_the_plain_manifests_and_refuses_bad_values() {
    let cp = testenv::ControlPlane::shared();
    let helm = Helm::new(cp.kubeconfig_path()).unwrap_or_else(|e| panic!("{e}"));
    let lint = helm
        .run(&["lint", "--strict", chart().to_str().unwrap()])
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{lint}");

    // The defaults render what deploy/reconciled.yaml holds, but its Namespace (the chart goes
    // into a namespace made by `helm install --create-namespace`, or an existing one).
    let chart = objects(
        &render(&helm, "reconciled", "reconciled-system", &[]).unwrap(),
        None,
    );
    let mut manifests = objects(&plain("reconciled.yaml"), None);
    manifests.remove("Namespace /reconciled-system");
    if let Some(d) = first_difference(&chart, &manifests) {
        panic!("the chart's defaults and deploy/reconciled.yaml differ at {d}");
    }
    assert_eq!(chart.len(), manifests.len(), "{:?}", chart.keys());
    // The comparison sees a change: one value off the defaults is a difference.
    let two = objects(
        &render(&helm, "reconciled", "reconciled-system", &["replicas=2"]).unwrap(),
        None,
    );
    let d = first_difference(&two, &manifests).expect("replicas=2 differs");
    assert!(
        d.starts_with("Deployment reconciled-system/reconciled"),
        "{d}"
    );

    // A tenant namespace set up by the chart is what deploy/tenant.yaml makes of one.
    let tenant = objects(
        &render(
            &helm,
            "reconciled",
            "reconciled-system",
            &["tenants.setUp[0].name=team-a"],
        )
        .unwrap(),
        None,
    );
    let tenant: BTreeMap<String, Value> = tenant
        .into_iter()
        .filter(|(k, _)| k.contains(" team-a/"))
        .collect();
    let manifests = objects(&plain("tenant.yaml"), Some("team-a"));
    if let Some(d) = first_difference(&tenant, &manifests) {
        panic!("the chart's tenant namespace and deploy/tenant.yaml differ at {d}");
    }

    // A bad value fails before anything is sent, naming the value.
    for (set, names) in [
        ("replicas=0", "replicas"),
        ("rbac.impersonation=sometimes", "impersonation"),
        ("image.digest=latest", "digest"),
        ("sharding.shards=2000", "shards"),
        ("tenants.kinds[0].verbs[0]=burn", "verbs"),
        ("replica=3", "replica"),
    ] {
        let err = render(&helm, "reconciled", "reconciled-system", &[set])
            .expect_err(set)
            .to_string();
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(names),
            "--set {set}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_with_every_option_is_accepted_by_the_api_server_and_uninstalls_cleanly() {
    let cp = testenv::ControlPlane::shared();
    let helm = Helm::new(cp.kubeconfig_path()).unwrap_or_else(|e| panic!("{e}"));
    let admin = cp.admin_client();
    let ns = "helm-options";
    // Not `reconciled`: the plain manifests' cluster-wide objects, applied by other tests on
    // this control plane, carry that name, and Helm refuses to adopt what it did not make.
    let release = "helm-opts";
    // As a platform team would write them: a values file (a list given by `--set` replaces
    // the chart's whole list).
    let values =
        std::env::temp_dir().join(format!("helm-options-{}.values.yaml", std::process::id()));
    std::fs::write(
        &values,
        r#"
rbac:
  impersonation: legacy
image:
  repository: registry.example/platform/reconciled
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  pullSecrets: [registry-login]
tenants:
  namespaces: [helm-team]
  registries: [registry.example]
  kinds:
    - { apiVersion: v1, kind: ConfigMap, resource: configmaps, verbs: [get, list, patch] }
    - { apiVersion: apps/v1, kind: Deployment, resource: deployments, verbs: [get, patch] }
  setUp:
    - name: helm-team
registry:
  pullSecret: helm-options/registry-login
podDisruptionBudget:
  maxUnavailable: 2
nodeSelector:
  kubernetes.io/os: linux
metrics:
  serviceMonitor:
    enabled: false
"#,
    )
    .unwrap();
    let values = values.to_str().unwrap().to_string();
    // Every object the chart renders with these, checked by the API server (schema, RBAC
    // escalation rules, field validation) without being stored.
    let chart = chart();
    let target = [release, chart.to_str().unwrap(), "-n", ns, "-f", &values];
    let rendered = helm
        .run(&[&["template"][..], &target].concat())
        .unwrap_or_else(|e| panic!("{e}"));
    common::namespace(&admin, ns).await;
    common::namespace(&admin, "helm-team").await;
    let dry = std::env::temp_dir().join(format!("helm-options-{}.yaml", std::process::id()));
    std::fs::write(&dry, &rendered).unwrap();
    let out = cp
        .kubectl()
        .args(["apply", "--dry-run=server", "--validate=strict", "-f"])
        .arg(&dry)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&dry);
    assert!(
        out.status.success(),
        "the API server refuses what the chart renders:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("deployment.apps/helm-opts created (server dry run)"),
        "{text}"
    );

    // Installed for real, with a tenant namespace the release makes: the objects exist as
    // rendered (the digest, the legacy rule, the namespaces), the CRDs with them.
    let made = format!("{values}.made.yaml");
    std::fs::write(
        &made,
        "tenants:\n  setUp:\n    - name: helm-team\n    - name: helm-made\n      create: true\n",
    )
    .unwrap();
    let args = [&["install"][..], &target, &["-f", &made]].concat();
    helm.run(&args).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(&values);
    let _ = std::fs::remove_file(&made);
    let deployment = Api::<Deployment>::namespaced(admin.clone(), ns)
        .get(release)
        .await
        .unwrap();
    let image = deployment.spec.template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap();
    assert!(
        image.ends_with("@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
        "{image}"
    );
    let role = Api::<ClusterRole>::all(admin.clone())
        .get(&format!("{release}-host"))
        .await
        .unwrap();
    assert!(
        role.rules
            .unwrap_or_default()
            .iter()
            .any(|r| r.verbs == ["impersonate"]),
        "the legacy impersonate rule"
    );
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    assert!(namespaces.get_opt("helm-made").await.unwrap().is_some());
    let sa =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), "helm-team");
    assert!(sa.get_opt("reconciled-guest").await.unwrap().is_some());
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(admin.clone());
    assert!(
        crds.get_opt("reconcilers.reconciled.dev")
            .await
            .unwrap()
            .is_some()
    );

    // Uninstalled: nothing of the release is left but the CRDs (Helm never deletes a chart's
    // CRDs: they may hold other releases' objects).
    helm.run(&["uninstall", release, "-n", ns, "--wait"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        Api::<Deployment>::namespaced(admin.clone(), ns)
            .get_opt(release)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ClusterRole>::all(admin.clone())
            .get_opt(&format!("{release}-host"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(sa.get_opt("reconciled-guest").await.unwrap().is_none());
    let team = namespaces.get_opt("helm-made").await.unwrap();
    assert!(
        team.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "the tenant namespace the release made goes with it"
    );
    assert!(
        crds.get_opt("reconcilers.reconciled.dev")
            .await
            .unwrap()
            .is_some()
    );
}
