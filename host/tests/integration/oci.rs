//! Guests delivered as OCI artifacts, against a real registry on loopback (TLS, basic auth) and
//! the real control plane: what `reconciled push` publishes is an ordinary Wasm artifact crane
//! can pull; pulls check digests, media types, sizes, credentials and signatures, each failure
//! with its own message; and a tenant's 12 MB TypeScript guest named by reference in its
//! ConfigMap loads, reconciles, reloads when the reference or its tag moves, and keeps serving
//! through every bad reference.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::host::{TempDir, supervisor_with};
use common::wait::{wait_event, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
};
use p256::ecdsa::SigningKey;
use reconciled::guest::digest_of;
use reconciled::sources::configmap::PULL_SECRET;
use reconciled::sources::configmap::{ConfigMapSource, LABEL};
use reconciled::sources::oci::credentials::Login;
use reconciled::sources::oci::{
    CONFIG_MEDIA_TYPE, Fetched, LAYER_MEDIA_TYPE, ModuleRef, Pulled, Registry, Settings,
};
use testenv::ControlPlane;
use testenv::registry::Registry as TestRegistry;

fn settings(reg: &TestRegistry) -> Settings {
    Settings {
        ca_file: Some(reg.ca_file()),
        poll_interval_ms: 300,
        ..Settings::default()
    }
}

fn login(reg: &TestRegistry) -> Login {
    Login {
        username: reg.user().into(),
        password: reg.password().into(),
    }
}

pub(crate) fn at(reg: &TestRegistry, path: &str) -> ModuleRef {
    format!("{}/{path}", reg.host()).parse().unwrap()
}

async fn pulled(client: &Registry, r: &ModuleRef, login: Option<&Login>) -> Pulled {
    match client.pull(r, login, None, 64 << 20).await.unwrap() {
        Fetched::New(p) => p,
        Fetched::Unchanged => panic!("nothing was known, so something is new"),
    }
}

async fn refused(client: &Registry, r: &ModuleRef, login: Option<&Login>, max: usize) -> String {
    let e = client
        .pull(r, login, None, max)
        .await
        .unwrap_err()
        .to_string();
    eprintln!("{r}: {e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_modules_are_wasm_artifacts_and_every_bad_pull_says_why() {
    let reg = TestRegistry::start().unwrap();
    let client = Registry::new(settings(&reg)).unwrap();
    let me = login(&reg);
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let v1 = at(&reg, "team-a/stamp:v1");
    let manifest = client
        .push(&v1, Some(&me), module.clone(), None)
        .await
        .unwrap();

    // crane, a client of another ecosystem, reads the artifact as the Wasm OCI layout says.
    let dir = TempDir::new("oci");
    let out = dir.0.join("pulled.wasm");
    let seen = reg
        .crane_pull(&format!("{}/team-a/stamp:v1", reg.host()), &out)
        .unwrap();
    assert_eq!(
        seen,
        format!(
            "application/vnd.oci.image.manifest.v1+json {CONFIG_MEDIA_TYPE} {LAYER_MEDIA_TYPE} sha256:{}",
            digest_of(&module)
        )
    );
    assert_eq!(std::fs::read(&out).unwrap(), module);

    // oras pulls a pushed module into a file named by its layer's title, as it pulls any
    // artifact (a layer without a title it skips).
    let pulled_by_oras = dir.0.join("oras");
    let files = reg
        .oras_pull(&format!("{}/team-a/stamp:v1", reg.host()), &pulled_by_oras)
        .unwrap();
    assert_eq!(files, [reconciled::sources::oci::LAYER_TITLE]);
    assert_eq!(
        std::fs::read(pulled_by_oras.join(reconciled::sources::oci::LAYER_TITLE)).unwrap(),
        module
    );

    // By tag and by digest; a tag that has not moved is one manifest request.
    let p = pulled(&client, &v1, Some(&me)).await;
    assert_eq!((&p.manifest, &p.digest), (&manifest, &digest_of(&module)));
    assert_eq!(*p.bytes, module);
    assert_eq!(
        *pulled(&client, &v1.at(&manifest), Some(&me)).await.bytes,
        module
    );
    assert!(matches!(
        client
            .pull(&v1, Some(&me), Some(&manifest), 64 << 20)
            .await
            .unwrap(),
        Fetched::Unchanged
    ));

    // Each failure in its own words.
    let wrong = Login {
        password: "wrong".into(),
        ..me.clone()
    };
    let e = refused(&client, &v1, Some(&wrong), 64 << 20).await;
    assert!(
        e.contains("refused user \"tester\"") && e.contains("pull secret"),
        "{e}"
    );
    let e = refused(&client, &v1, None, 64 << 20).await;
    assert!(e.contains("refused anonymous access"), "{e}");
    let unknown = v1.at(&format!("sha256:{}", "0".repeat(64)));
    let e = refused(&client, &unknown, Some(&me), 64 << 20).await;
    assert!(e.contains("does not exist"), "{e}");
    let e = refused(&client, &at(&reg, "team-a/stamp:nope"), Some(&me), 64 << 20).await;
    assert!(e.contains("does not exist"), "{e}");
    let e = refused(&client, &v1, Some(&me), 1000).await;
    assert!(e.contains("over the 1000-byte limit"), "{e}");
    let down: ModuleRef = "127.0.0.1:1/team-a/stamp:v1".parse().unwrap();
    let e = refused(&client, &down, Some(&me), 64 << 20).await;
    assert!(e.contains("registry 127.0.0.1:1 is unreachable"), "{e}");
    let untrusting = Registry::new(Settings::default()).unwrap();
    let e = refused(&untrusting, &v1, Some(&me), 64 << 20).await;
    assert!(
        e.contains("TLS certificate is not accepted")
            && e.contains("UnknownIssuer")
            && e.contains("ca_file"),
        "a certificate nobody vouched for: {e}"
    );

    // A container image is not a module.
    let image = push_image(&reg, "team-a/image:v1", module.clone()).await;
    let e = refused(&client, &image, Some(&me), 64 << 20).await;
    assert!(
        e.contains(
            "is not a Wasm OCI artifact: its config is application/vnd.oci.image.config.v1+json"
        ),
        "{e}"
    );

    // Signatures: none, the right key, another key.
    let (key, private, public) = common::keys::cosign_pair(&dir.0, 7);
    let verifying = Registry::new(Settings {
        verify_key: Some(public),
        ..settings(&reg)
    })
    .unwrap();
    let e = refused(&verifying, &v1, Some(&me), 64 << 20).await;
    assert!(
        e.contains("not signed by the configured verify_key: no signature tag sha256-"),
        "{e}"
    );
    let probe = std::fs::read(common::guests::wasm("probe")).unwrap();
    let signed = at(&reg, "team-a/probe:v1");
    client
        .push(&signed, Some(&me), probe.clone(), Some(&key))
        .await
        .unwrap();
    assert_eq!(*pulled(&verifying, &signed, Some(&me)).await.bytes, probe);
    let other = SigningKey::from_bytes(&[8u8; 32].into()).unwrap();
    let forged = at(&reg, "team-a/forged:v1");
    let hostile = std::fs::read(common::guests::wasm("hostile_calls")).unwrap();
    client
        .push(&forged, Some(&me), hostile, Some(&other))
        .await
        .unwrap();
    let e = refused(&verifying, &forged, Some(&me), 64 << 20).await;
    assert!(e.contains("does not verify with the configured key"), "{e}");

    // `reconciled push`: prints the reference pinned by digest, and refuses what is no
    // component.
    let cli = |module: &std::path::Path, to: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_reconciled"))
            .arg("push")
            .arg(module)
            .arg(to)
            .args(["-u", reg.user(), "--ca-file"])
            .arg(reg.ca_file())
            .arg("--sign-key")
            .arg(&private)
            .env("RECONCILED_REGISTRY_PASSWORD", reg.password())
            .output()
            .unwrap()
    };
    let to = format!("{}/team-a/cli:v1", reg.host());
    let o = cli(&common::guests::wasm("stamp_v1"), &to);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("{to}@{manifest}")
    );
    assert_eq!(
        *pulled(&verifying, &at(&reg, "team-a/cli:v1"), Some(&me))
            .await
            .bytes,
        module
    );
    std::fs::write(dir.0.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let o = cli(&dir.0.join("core.wasm"), &to);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("is not a WebAssembly component"),
        "{stderr}"
    );
}

/// Pushes `layer` to `path` of `reg` as an ordinary container image (OCI image config, one
/// tar layer): what a Wasm artifact is not.
pub(crate) async fn push_image(reg: &TestRegistry, path: &str, layer: Vec<u8>) -> ModuleRef {
    let oci = oci_client::Client::new(oci_client::client::ClientConfig {
        extra_root_certificates: vec![oci_client::client::Certificate {
            encoding: oci_client::client::CertificateEncoding::Pem,
            data: std::fs::read(reg.ca_file()).unwrap(),
        }],
        use_monolithic_push: true,
        ..Default::default()
    });
    let image_ref: oci_client::Reference = format!("{}/{path}", reg.host()).parse().unwrap();
    oci.push(
        &image_ref,
        &[oci_client::client::ImageLayer::oci_v1(layer, None)],
        oci_client::client::Config::oci_v1(b"{}".to_vec(), None),
        &oci_client::secrets::RegistryAuth::Basic(reg.user().into(), reg.password().into()),
        None,
    )
    .await
    .unwrap();
    at(reg, path)
}

/// Waits until guest `name` serves the module whose sha256 is `digest`.
async fn serving(sup: &reconciled::supervisor::Supervisor, name: &str, digest: &str, what: &str) {
    wait_until(what, Duration::from_secs(180), || {
        sup.controller(name).is_some_and(|c| c.digest() == digest)
    })
    .await;
}

/// Waits until guest `name`'s last error says `says`, and checks that `digest` still serves.
async fn rejected(sup: &reconciled::supervisor::Supervisor, name: &str, says: &str, digest: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !sup.last_error(name).is_some_and(|e| e.contains(says)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} not rejected saying {says:?} within 60 s; last error: {:?}",
            sup.last_error(name)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("{name}: {}", sup.last_error(name).unwrap());
    let c = sup
        .controller(name)
        .expect("the previous version keeps serving");
    assert_eq!(c.digest(), digest, "the previous version keeps serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_typescript_guest_named_by_reference_loads_reloads_and_survives_bad_references() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "oci-team-a";
    common::tenant_namespace(cp, ns).await;
    common::install_example_crd(cp).await;
    let guest_user = format!("system:serviceaccount:{ns}:reconciled-guest");
    use testenv::fixtures::rule;
    testenv::fixtures::grant(
        &admin,
        ns,
        "generators-and-pull-secret",
        &guest_user,
        vec![
            rule(
                "example.reconciled.dev",
                &["configmapgenerators", "configmapgenerators/status"],
                &["get", "list", "watch", "patch", "update"],
            ),
            k8s_openapi::api::rbac::v1::PolicyRule {
                resource_names: Some(vec!["registry-login".into()]),
                ..rule("", &["secrets"], &["get"])
            },
        ],
    )
    .await
    .unwrap();
    // The same Role: once one rule takes effect, both have.
    common::wait_allowed(
        &admin,
        ns,
        "reconciled-guest",
        ("example.reconciled.dev", "configmapgenerators", "watch"),
    )
    .await;

    let reg = TestRegistry::start().unwrap();
    let secrets = Api::<Secret>::namespaced(admin.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &common::registry_login(reg.dockerconfigjson()),
        )
        .await
        .unwrap();

    let client = Arc::new(Registry::new(settings(&reg)).unwrap());
    let me = login(&reg);
    // Publishes `bytes` at `path` in the test registry, as the tenant's login; the manifest
    // digest it answers.
    let push = async |path: &str, bytes: Vec<u8>| {
        let at = at(&reg, path);
        client.push(&at, Some(&me), bytes, None).await.unwrap()
    };
    let ts = std::fs::read(common::guests::wasm("configmap_generator_ts")).unwrap();
    let rust = std::fs::read(common::guests::wasm("configmap_generator")).unwrap();
    eprintln!(
        "TypeScript module: {} bytes; Rust: {} bytes",
        ts.len(),
        rust.len()
    );
    assert!(
        ts.len() > 10 << 20,
        "the TypeScript component is the large one"
    );
    let d1 = push("team-a/cmgen:v1", ts.clone()).await;
    let d2 = push("team-a/cmgen:v2", rust.clone()).await;

    let dir = TempDir::new("oci-tenant");
    let sup = supervisor_with(&cp.admin_config(), Some(&dir));
    let mut policy = common::tenants(&[
        "v1/ConfigMap",
        "example.reconciled.dev/v1alpha1/ConfigMapGenerator",
    ]);
    policy.registries = [reg.host().to_string(), "127.0.0.1:1".to_string()].into();
    policy.min_reload_interval_ms = 0;
    let policy = common::only(&[ns], policy);
    let _source =
        ConfigMapSource::start_with(sup.factory(), sup.clone(), policy, client.clone()).unwrap();

    let cms = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let name = format!("{ns}/cmgen/gen");
    let delivery = |reference: String| ConfigMap {
        metadata: ObjectMeta {
            name: Some("cmgen".into()),
            labels: Some([(LABEL.to_string(), "true".to_string())].into()),
            annotations: Some([(PULL_SECRET.to_string(), "registry-login".to_string())].into()),
            ..Default::default()
        },
        data: Some([("gen.wasm.ref".to_string(), reference)].into()),
        ..Default::default()
    };
    let point = async |reference: String| {
        cms.patch(
            "cmgen",
            &PatchParams::apply("oci-test").force(),
            &Patch::Apply(&delivery(reference)),
        )
        .await
        .unwrap();
    };

    // Loads, from team-a's ConfigMap, and reconciles.
    let host = reg.host().to_string();
    let started = std::time::Instant::now();
    point(format!("{host}/team-a/cmgen:v1@{d1}")).await;
    serving(&sup, &name, &digest_of(&ts), "the TypeScript guest serving").await;
    eprintln!(
        "pulled and loaded the TypeScript guest in {:?}",
        started.elapsed()
    );
    let gvk = GroupVersionKind::gvk("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator");
    let generators =
        Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &ApiResource::from_gvk(&gvk));
    let generate = async |name: &str| {
        let g: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.reconciled.dev/v1alpha1", "kind": "ConfigMapGenerator",
            "metadata": {"name": name},
            "spec": {"copies": 1, "data": {"greeting": "hello"}}
        }))
        .unwrap();
        generators.create(&PostParams::default(), &g).await.unwrap();
        common::wait::wait_until_async(
            &format!("{name}-0 generated"),
            Duration::from_secs(60),
            async || cms.get_opt(&format!("{name}-0")).await.unwrap().is_some(),
        )
        .await;
    };
    generate("by-typescript").await;

    // Reloads when the reference changes.
    point(format!("{host}/team-a/cmgen:v2@{d2}")).await;
    serving(&sup, &name, &digest_of(&rust), "the new reference serving").await;
    generate("by-rust").await;

    // A wrong digest: refused, the serving version stays.
    let serving_now = digest_of(&rust);
    point(format!("{host}/team-a/cmgen:v2@sha256:{}", "0".repeat(64))).await;
    rejected(&sup, &name, "does not exist", &serving_now).await;

    // A tag is followed as it moves, and a move to a bad module is refused.
    push("team-a/cmgen:moving", ts.clone()).await;
    point(format!("{host}/team-a/cmgen:moving")).await;
    serving(&sup, &name, &digest_of(&ts), "the tag's module serving").await;
    push("team-a/cmgen:moving", rust.clone()).await;
    serving(
        &sup,
        &name,
        &digest_of(&rust),
        "the module the tag moved to serving",
    )
    .await;
    push("team-a/cmgen:moving", b"\0asm not a component".to_vec()).await;
    rejected(&sup, &name, "not a valid wasm component", &serving_now).await;

    // A container image where a module should be.
    push_image(&reg, "team-a/cmgen:image", rust.clone()).await;
    point(format!("{host}/team-a/cmgen:image")).await;
    rejected(&sup, &name, "is not a Wasm OCI artifact", &serving_now).await;

    // Bad credentials, a registry tenants may not use, an unreachable one.
    secrets
        .replace("registry-login", &PostParams::default(), &{
            let mut s = common::registry_login(
                serde_json::json!({"auths": {host.clone(): {"username": reg.user(), "password": "wrong"}}})
                    .to_string(),
            );
            s.metadata.resource_version = secrets.get("registry-login").await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    push("team-a/cmgen:v3", ts.clone()).await;
    point(format!("{host}/team-a/cmgen:v3")).await;
    rejected(&sup, &name, "refused user \"tester\"", &serving_now).await;
    point("registry.example/team-a/cmgen:v1".into()).await;
    rejected(
        &sup,
        &name,
        "is not one tenants may pull from",
        &serving_now,
    )
    .await;
    point("127.0.0.1:1/team-a/cmgen:v1".into()).await;
    rejected(&sup, &name, "is unreachable", &serving_now).await;

    // Removing the ConfigMap unloads the guest, and its watch pulls nothing more: a tag that
    // moves afterwards brings nothing back.
    push("team-a/cmgen:moving", rust.clone()).await;
    point(format!("{host}/team-a/cmgen:moving")).await;
    wait_until(
        "serving from the tag again",
        Duration::from_secs(60),
        || {
            sup.last_error(&name)
                .is_none_or(|e| !e.contains("unreachable"))
                && sup.controller(&name).is_some()
        },
    )
    .await;
    cms.delete("cmgen", &Default::default()).await.unwrap();
    wait_until("the guest unloaded", Duration::from_secs(30), || {
        sup.controller(&name).is_none()
    })
    .await;
    push("team-a/cmgen:moving", ts.clone()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        sup.controller(&name).is_none(),
        "five polls later, nothing brought the removed guest back"
    );

    // Each refusal is an Event on the ConfigMap, in its own words (posted in the background).
    for says in [
        "does not exist",
        "not a valid wasm component",
        "is not a Wasm OCI artifact",
        "refused user",
        "is not one tenants may pull from",
        "is unreachable",
    ] {
        let timeout = Duration::from_secs(30);
        wait_event(&admin, ns, "cmgen", "ModuleRejected", says, timeout).await;
    }
}

/// `reconciled run` with `[[guest]] module = "oci://…:tag"`, logging in with `[registry]
/// pull_secret`: the guest serves what the tag names, and follows it when it moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_guest_named_by_tag_in_the_host_config_follows_the_tag() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "oci-operator";
    common::namespace(&admin, ns).await;
    let reg = TestRegistry::start().unwrap();
    let secret = common::registry_login(reg.dockerconfigjson());
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let client = Registry::new(settings(&reg)).unwrap();
    let me = login(&reg);
    let v1 = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let v2 = std::fs::read(common::guests::wasm("stamp_v2")).unwrap();
    let tag = at(&reg, "platform/stamp:stable");
    client
        .push(&tag, Some(&me), v1.clone(), None)
        .await
        .unwrap();

    let dir = TempDir::new("oci-operator");
    let config = dir.0.join("host.toml");
    std::fs::write(
        &config,
        format!(
            "[[guest]]\nname = \"stamp\"\nmodule = \"{tag}\"\n[guest.grant]\nnamespaces = [\"{ns}\"]\n\n\
             [registry]\npull_secret = \"{ns}/registry-login\"\nca_file = \"{}\"\npoll_interval_ms = 300\n",
            reg.ca_file().display()
        ),
    )
    .unwrap();
    let addr = common::host::free_port();
    let log = dir.0.join("run.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(["--listen", &addr.to_string()])
        .env("RECONCILED_CACHE_DIR", dir.0.join("cache"))
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child, &'a std::path::Path);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            if std::thread::panicking() {
                eprintln!(
                    "--- reconciled run log ---\n{}",
                    std::fs::read_to_string(self.1).unwrap_or_default()
                );
            }
        }
    }
    let _kill = Kill(&mut child, &log);
    let serving = async |digest: String, what: &str| {
        common::wait::wait_until_async(what, Duration::from_secs(60), async || {
            reconciled::ops::http::get_status(addr)
                .await
                .ok()
                .and_then(|s| s.guests.into_iter().find(|g| g.name == "stamp"))
                .is_some_and(|g| {
                    g.digest.as_deref() == Some(digest.as_str()) && g.source == tag.to_string()
                })
        })
        .await;
    };
    serving(digest_of(&v1), "stamp v1 serving from the registry").await;
    client
        .push(&tag, Some(&me), v2.clone(), None)
        .await
        .unwrap();
    serving(digest_of(&v2), "stamp v2 serving once the tag moved").await;
}
