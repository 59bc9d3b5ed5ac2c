//! The image (`scripts/image.sh`) run with podman as `deploy/reconciled.yaml` runs it: released
//! to the loopback registry by `scripts/release.sh` (the amd64 image in a signed list, with its
//! SBOM; a release adds the cross-built arm64 image and checks its own list of both, which
//! `signed_images` proves `reconciled verify` reads), checked with `reconciled verify` and pulled back by digest, then
//! three containers as the Deployment's three replicas, each given what the kubelet would give
//! its pod (`testenv::pod`: the ServiceAccount's token and CA, the `host.toml` ConfigMap, an
//! emptyDir for the cache, the env, the `securityContext`). They must become ready, load a tenant's module from a ConfigMap,
//! reconcile, serve `/metrics`, run as non-root on a read-only root, and stop on SIGTERM within
//! the pod's grace period.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use testenv::ControlPlane;
use testenv::pod::{Pod, http_get};
use testenv::podman::{self, Podman};

const HOST_NS: &str = "reconciled-system";
const TENANT_NS: &str = "team-image";
const REPLICAS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_the_deployment_runs_it() {
    let (_one, podman, archive) = podman_and_image().await;
    // Its own control plane: the replicas load tenants' guests from every namespace, as the
    // deployed config says, and would run the guests other tests deliver on the shared one.
    static CP: std::sync::OnceLock<Result<ControlPlane, String>> = std::sync::OnceLock::new();
    let cp = ControlPlane::own(&CP, &[]);
    let admin = cp.admin_client();
    // The deployed host loads Reconcilers too, and is ready only once their kinds are served.
    common::reconciler_crds(cp);
    common::apply_deploy(cp, "reconciled.yaml", None);
    // The pod as the API server has it, and what the kubelet would mount for it.
    let pod = Pod::new(
        &admin,
        HOST_NS,
        "reconciled",
        cp.server_addr(),
        &cp.dir().join("pki/ca.crt"),
        podman.dir(),
    )
    .await
    .unwrap();
    let security = pod.container().security_context.clone().unwrap_or_default();
    let pod_security = pod.spec().security_context.clone().unwrap_or_default();
    assert_eq!(
        (
            pod_security.run_as_non_root,
            security.read_only_root_filesystem,
            security.allow_privilege_escalation
        ),
        (Some(true), Some(true), Some(false)),
        "the manifest states non-root, a read-only root and no privilege escalation"
    );

    // Into the registry and back by digest: what runs is what the registry serves.
    let tag = load(&podman, &archive);
    let id = podman.inspect_image(&tag, "{{.Id}}").unwrap();
    assert_eq!(
        podman.inspect_image(&tag, "{{.Config.User}}").unwrap(),
        "65532:65532",
        "the image itself names a non-root user"
    );
    let registry = testenv::registry::Registry::start().unwrap();
    podman.run(["rmi", &tag]).unwrap();
    let by_digest = release_verify_and_pull(&podman, &registry).await;
    // release.sh packs its image again, from its own root: the same ID proves packaging
    // deterministic too (file times, modes and metadata; both reuse one cargo build, so not the
    // compiler, which scripts/reproducible.sh checks across clones).
    assert_eq!(
        podman.inspect_image(&by_digest, "{{.Id}}").unwrap(),
        id,
        "the release's amd64 image, pulled by the list's digest, is the one built"
    );

    // A tenant with work to do and a reconciler delivered in a ConfigMap.
    common::tenant_namespace(cp, TENANT_NS).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), TENANT_NS);
    cms.create(&PostParams::default(), &common::host::stamped("work", "7"))
        .await
        .unwrap();
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    common::host::deliver(&cms, TENANT_NS, &module).await;

    // The three replicas.
    let grace = pod.grace();
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let name = format!("reconciled-{i}");
        let port = common::host::free_port().port();
        let flags = pod.flags(&name).unwrap();
        let started = Instant::now();
        podman
            .start(&name, &flags, &by_digest, &pod.args(port).unwrap())
            .unwrap();
        let ready = wait_ready(&podman, &pod, &name, port, started).await;
        eprintln!("container {name}: ready {ready:?} after `podman run`");
        replicas.push((name, port));
    }
    for (name, port) in &replicas {
        let (status, _) = http_get(*port, pod.liveness_path().unwrap()).await.unwrap();
        assert_eq!(status, 200, "{name}: liveness");
        prove_confined(&podman, name);
    }

    // The tenant's reconciler, loaded from its ConfigMap, reconciles on one of them.
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::host::seen(&cms, "work").await.as_deref() != Some("v1:7") {
        assert!(
            Instant::now() < deadline,
            "the tenant's reconciler never stamped its ConfigMap; logs:\n{}",
            podman.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A reconcile is counted once it returns, a moment after its write is seen.
    let guest = format!("{TENANT_NS}/rec/rec");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut reconciles = BTreeMap::new();
        for (name, port) in &replicas {
            let (status, body) = http_get(*port, "/metrics").await.unwrap();
            assert_eq!(status, 200, "{name} /metrics");
            assert!(body.ends_with("# EOF\n"), "{name}: OpenMetrics text");
            let line = format!(
                "controller_runtime_reconcile_total{{controller=\"{guest}\",result=\"success\"}} "
            );
            let n: u64 = body
                .lines()
                .find_map(|l| l.strip_prefix(&line))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            reconciles.insert(name.clone(), n);
        }
        if reconciles.values().any(|&n| n > 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a replica's /metrics counts the reconcile: {reconciles:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every replica loads every guest, compiling it into its own cache emptyDir: the one
    // writable path it has.
    for (name, _) in &replicas {
        let cache = podman.dir().join("volumes/cache").join(name);
        let entries = std::fs::read_dir(&cache).unwrap().count();
        assert!(
            entries > 0,
            "{name} wrote nothing to its cache {}",
            cache.display()
        );
    }
    // Leases named and sharded as the mounted host.toml says.
    let config = reconciled::config::Config::load(&podman.dir().join("volumes/config/host.toml"))
        .unwrap()
        .replicas
        .expect("the deployed host.toml has [replicas]")
        .resolve("any", HOST_NS);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), HOST_NS);
    for (name, _) in &replicas {
        assert!(
            leases
                .get_opt(&format!("{}-replica-{name}", config.group))
                .await
                .unwrap()
                .is_some(),
            "{name} announces itself as a replica"
        );
    }
    let shard = reconciled::replicas::shard::shard_of(&guest, config.shards);
    let shard_lease = format!("{}-shard-{shard}", config.group);
    let owner = holder(&leases.get(&shard_lease).await.unwrap());
    assert!(
        replicas
            .iter()
            .any(|(n, _)| Some(n.as_str()) == owner.as_deref()),
        "the guest's shard is held by a replica: {owner:?}"
    );

    // SIGTERM, as the kubelet sends it, and the grace period before SIGKILL.
    for (name, _) in &replicas {
        let started = Instant::now();
        podman
            .run(["stop", "--time", &grace.as_secs().to_string(), name])
            .unwrap();
        let took = started.elapsed();
        let code = podman.inspect(name, "{{.State.ExitCode}}").unwrap();
        assert_eq!(
            code,
            "0",
            "{name} exits cleanly on SIGTERM; logs:\n{}",
            podman.logs()
        );
        assert!(
            took < grace,
            "{name} took {took:?} to stop, grace period {grace:?}"
        );
        eprintln!("container {name}: stopped {took:?} after SIGTERM");
        assert!(
            leases
                .get_opt(&format!("{}-replica-{name}", config.group))
                .await
                .unwrap()
                .is_none(),
            "{name} deletes its replica Lease as it stops"
        );
    }
    let left = leases.list(&Default::default()).await.unwrap();
    assert!(
        left.items.is_empty(),
        "the last replica out deletes the shard Leases: none is left behind, but {:?}",
        left.items
            .iter()
            .filter_map(|l| l.metadata.name.as_deref())
            .collect::<Vec<_>>()
    );
}

/// Publishes the release with `scripts/release.sh` to `registry` (amd64, signed, with its SBOM), checks it with `reconciled verify` as an admission step would, reads
/// the amd64 SBOM back from the registry, and pulls the list by digest (podman picks the amd64
/// image); the reference pinned by the list's digest.
async fn release_verify_and_pull(
    podman: &Podman,
    registry: &testenv::registry::Registry,
) -> String {
    let (_, private, public) = common::keys::cosign_pair(podman.dir(), 42);
    let ca = registry.ca_file();
    let to = format!("{}/reconciled/host:0.1.0", registry.host());
    let started = Instant::now();
    let pinned = testenv::podman::release(
        &[
            "--arch".as_ref(),
            "amd64".as_ref(),
            "--sign-key".as_ref(),
            private.as_os_str(),
            "--username".as_ref(),
            registry.user().as_ref(),
            "--ca-file".as_ref(),
            ca.as_os_str(),
            to.as_ref(),
        ],
        &[("RECONCILED_REGISTRY_PASSWORD", registry.password())],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("release: {pinned} in {:?}", started.elapsed());
    assert!(
        pinned.starts_with(&format!("{}/reconciled/host@sha256:", registry.host())),
        "{pinned}"
    );

    // The admission check: the list and its image signed by the key, with its SBOM.
    let verified = std::process::Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .args(["verify", &pinned, "--key"])
        .arg(&public)
        .args(["--platform", "linux/amd64"])
        .args(["--artifact", "application/vnd.cyclonedx+json"])
        .args(["-u", registry.user(), "--ca-file"])
        .arg(&ca)
        .env("RECONCILED_REGISTRY_PASSWORD", registry.password())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success(),
        "reconciled verify refused the release: {}{out}",
        String::from_utf8_lossy(&verified.stderr)
    );
    eprintln!("{out}");
    assert!(out.contains("an image index of linux/amd64\n"), "{out}");

    // The amd64 SBOM, as the registry serves it, lists what the binary was built from.
    let client = reconciled::sources::oci::Registry::new(reconciled::sources::oci::Settings {
        ca_file: Some(ca.clone()),
        ..Default::default()
    })
    .unwrap();
    let login = reconciled::sources::oci::credentials::Login {
        username: registry.user().into(),
        password: registry.password().into(),
    };
    let index: reconciled::sources::oci::ModuleRef = pinned.parse().unwrap();
    let described = client.describe(&index, Some(&login)).await.unwrap();
    let amd64 = index.at(described.image_for("linux/amd64").unwrap());
    let sboms = client
        .referrers(&amd64, Some(&login), Some("application/vnd.cyclonedx+json"))
        .await
        .unwrap();
    let [sbom] = sboms.as_slice() else {
        panic!("one SBOM on the amd64 image, not {sboms:?}");
    };
    let bytes = client
        .pull_referrer(&amd64, Some(&login), sbom, 64 << 20)
        .await
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["bomFormat"], "CycloneDX", "{doc}");
    let names: Vec<&str> = doc["components"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    for crate_name in ["wasmtime", "kube-client", "tokio", "rustls"] {
        assert!(
            names.contains(&crate_name),
            "the SBOM lists {crate_name}; it lists {} components",
            names.len()
        );
    }
    eprintln!(
        "amd64 SBOM: {} components, {} bytes",
        names.len(),
        bytes.len()
    );

    // What runs is what the registry serves for this machine's platform.
    pull(podman, registry, &pinned);
    assert_eq!(
        podman.inspect_image(&pinned, "{{.Architecture}}").unwrap(),
        "amd64"
    );
    pinned
}

/// Pushes image `tag` to `registry` as `reconciled/host:0.1.0` in manifest format `format`
/// (`oci` or `v2s2`), removes the local image, and pulls it back by digest; the reference by
/// digest. The same image pushed in the two formats has two digests.
fn push_and_pull(
    podman: &Podman,
    registry: &testenv::registry::Registry,
    tag: &str,
    format: &str,
) -> String {
    let (certs, creds) = login(podman, registry);
    let digest_file = podman.dir().join(format!("digest-{format}"));
    let repo = format!("{}/reconciled/host", registry.host());
    podman
        .run([
            "push".as_ref(),
            "--quiet".as_ref(),
            format!("--format={format}").as_ref(),
            "--cert-dir".as_ref(),
            certs.as_os_str(),
            "--creds".as_ref(),
            creds.as_ref(),
            "--digestfile".as_ref(),
            digest_file.as_os_str(),
            tag.as_ref(),
            format!("docker://{repo}:0.1.0").as_ref(),
        ])
        .unwrap();
    let digest = std::fs::read_to_string(&digest_file).unwrap();
    assert!(digest.starts_with("sha256:"), "{digest}");
    // What runs must be what the registry serves, not the local copy.
    podman.run(["rmi", tag]).unwrap();
    let by_digest = format!("{repo}@{}", digest.trim());
    pull(podman, registry, &by_digest);
    by_digest
}

/// What podman needs to reach `registry`: a certificate folder with its CA, and `user:password`.
fn login(podman: &Podman, registry: &testenv::registry::Registry) -> (PathBuf, String) {
    let certs = podman.dir().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::copy(registry.ca_file(), certs.join("ca.crt")).unwrap();
    (
        certs,
        format!("{}:{}", registry.user(), registry.password()),
    )
}

/// Pulls `reference` from `registry` into `podman`.
fn pull(podman: &Podman, registry: &testenv::registry::Registry, reference: &str) {
    let (certs, creds) = login(podman, registry);
    podman
        .run([
            "pull".as_ref(),
            "--quiet".as_ref(),
            "--cert-dir".as_ref(),
            certs.as_os_str(),
            "--creds".as_ref(),
            creds.as_ref(),
            reference.as_ref(),
        ])
        .unwrap();
}

/// Starts a container of `pod` named `name` (its pod name, and so its replica identity) from
/// `image`, and waits until it is ready; its name and port.
async fn start_pod(podman: &Podman, pod: &Pod, name: &str, image: &str) -> (String, u16) {
    let port = common::host::free_port().port();
    podman
        .start(
            name,
            &pod.flags(name).unwrap(),
            image,
            &pod.args(port).unwrap(),
        )
        .unwrap();
    wait_ready(podman, pod, name, port, Instant::now()).await;
    (name.to_string(), port)
}

/// Polls the readiness probe until it answers 200; how long after `since` it did.
async fn wait_ready(podman: &Podman, pod: &Pod, name: &str, port: u16, since: Instant) -> Duration {
    let path = pod
        .readiness_path()
        .expect("the Deployment has an HTTP readiness probe");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if http_get(port, path).await.is_some_and(|(s, _)| s == 200) {
            return since.elapsed();
        }
        let running = podman.inspect(name, "{{.State.Running}}").unwrap();
        assert!(
            running == "true",
            "{name} exited before it was ready; logs:\n{}",
            podman.logs()
        );
        assert!(
            Instant::now() < deadline,
            "{name} not ready in 60 s; logs:\n{}",
            podman.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the kernel says of the container's process: not root, no capabilities, no new
/// privileges, and a root filesystem mounted read-only.
fn prove_confined(podman: &Podman, name: &str) {
    let pid = podman.inspect(name, "{{.State.Pid}}").unwrap();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let status = std::fs::read_to_string(proc.join("status")).unwrap();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {}/status", proc.display()))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        field("Uid:"),
        ["65532"; 4],
        "{name}: real, effective, saved and fs uid"
    );
    assert_eq!(field("Gid:"), ["65532"; 4], "{name}: gids");
    // Not only the effective set (empty for any non-root process): the bounding set too, which
    // only dropping ALL empties.
    for set in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(set), ["0000000000000000"], "{name}: {set}");
    }
    assert!(field("Groups:").contains(&"65532"), "{name}: the fsGroup");
    assert_eq!(
        field("NoNewPrivs:"),
        ["1"],
        "{name}: no privilege escalation"
    );
    let mounts = std::fs::read_to_string(proc.join("mountinfo")).unwrap();
    let root = mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&"/"))
        .unwrap_or_else(|| panic!("{name}: no root mount in mountinfo"));
    assert!(
        root[5].split(',').any(|o| o == "ro"),
        "{name}: root mounted {}",
        root[5]
    );
}

/// Loads an image archive; the tag it carries.
fn load(podman: &Podman, archive: &Path) -> String {
    let loaded = podman
        .run(["load".as_ref(), "--input".as_ref(), archive.as_os_str()])
        .unwrap_or_else(|e| panic!("{e}"));
    loaded
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .unwrap_or_else(|| panic!("podman load said {loaded:?}"))
        .trim()
        .to_string()
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref().and_then(|s| s.holder_identity.clone())
}

/// A podman of its own and the image archive, once the other container test is done: each
/// runs three replicas of the image, too many for two cores at once.
async fn podman_and_image() -> (tokio::sync::MutexGuard<'static, ()>, Podman, PathBuf) {
    static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let one = ONE.lock().await;
    let podman = Podman::new().unwrap_or_else(|e| panic!("{e}"));
    let archive = podman::image_archive().unwrap_or_else(|e| panic!("{e}"));
    (one, podman, archive)
}

/// Which guests each replica serves now, by its `/status`; a replica not answering serves none.
async fn serving_now(replicas: &[(String, u16)]) -> BTreeMap<String, Vec<String>> {
    let mut by_guest: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, port) in replicas {
        let Some((200, body)) = http_get(*port, "/status").await else {
            continue;
        };
        let Ok(status) = serde_json::from_str::<reconciled::ops::status::Status>(&body) else {
            continue;
        };
        for g in status.guests {
            let entry = by_guest.entry(g.name).or_default();
            if g.state == reconciled::ops::status::GuestState::Serving {
                entry.push(name.clone());
            }
        }
    }
    by_guest
}

/// The longest time each guest went unserved while `watch` ran, sampling every 50 ms.
#[derive(Default)]
struct Gaps {
    /// Per guest: when it was last seen served, and the longest gap so far.
    guests: BTreeMap<String, (Instant, Duration)>,
}

impl Gaps {
    fn sample(&mut self, now: Instant, serving: &BTreeMap<String, Vec<String>>) {
        for (guest, by) in serving {
            let entry = self
                .guests
                .entry(guest.clone())
                .or_insert((now, Duration::ZERO));
            if by.is_empty() {
                entry.1 = entry.1.max(now - entry.0);
            } else {
                entry.0 = now;
            }
        }
    }
}

/// The chart installed by helm with the image by digest, run as its Deployment's pods under
/// podman, upgraded by `helm upgrade` to a second digest and rolled one replica at a time as the
/// Deployment's strategy says (maxSurge 0: an old pod stops, then its replacement starts and is
/// ready before the next old one stops), then
/// uninstalled: every pod stopped, and no Lease left behind. The longest time any guest went
/// unserved during the roll is measured and bounded by the hand-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_one_replica_at_a_time_and_uninstalls_leaving_no_lease() {
    let (_one, podman, archive) = podman_and_image().await;
    static CP: std::sync::OnceLock<Result<ControlPlane, String>> = std::sync::OnceLock::new();
    let cp = ControlPlane::own(&CP, &[]);
    let admin = cp.admin_client();
    let helm = testenv::helm::Helm::new(cp.kubeconfig_path()).unwrap_or_else(|e| panic!("{e}"));
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart");

    // One image, two digests: pushed as an OCI manifest and as a Docker one.
    let registry = testenv::registry::Registry::start().unwrap();
    let tag = load(&podman, &archive);
    let first = push_and_pull(&podman, &registry, &tag, "oci");
    let tag = load(&podman, &archive);
    let second = push_and_pull(&podman, &registry, &tag, "v2s2");
    assert_ne!(first, second);
    let (repo, first_digest) = first.split_once('@').unwrap();
    let second_digest = second.split_once('@').unwrap().1;

    // Three tenants, each with one reconciler and one object to stamp.
    const TENANTS: [&str; 3] = ["helm-a", "helm-b", "helm-c"];
    let mut args: Vec<String> = [
        "install",
        "reconciled",
        chart.to_str().unwrap(),
        "-n",
        HOST_NS,
        "--create-namespace",
        "--set",
        &format!("image.repository={repo}"),
        "--set",
        &format!("image.digest={first_digest}"),
    ]
    .map(String::from)
    .to_vec();
    for (i, ns) in TENANTS.iter().enumerate() {
        args.push("--set".into());
        args.push(format!("tenants.setUp[{i}].name={ns}"));
        args.push("--set".into());
        args.push(format!("tenants.setUp[{i}].create=true"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm.run(&args).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("helm installed the chart with {first}");
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    for ns in TENANTS {
        common::wait_allowed(&admin, ns, "reconciled-guest", ("", "configmaps", "patch")).await;
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
        cms.create(&PostParams::default(), &common::host::stamped("work", "1"))
            .await
            .unwrap();
        common::host::deliver(&cms, ns, &module).await;
    }

    // The Deployment's pods, as the kubelet would run them.
    let pod = |dir: &'static str| {
        let dir = podman.dir().join(dir);
        let admin = admin.clone();
        async move {
            std::fs::create_dir_all(&dir).unwrap();
            Pod::new(
                &admin,
                HOST_NS,
                "reconciled",
                cp.server_addr(),
                &cp.dir().join("pki/ca.crt"),
                &dir,
            )
            .await
            .unwrap()
        }
    };
    let old = pod("v1").await;
    assert_eq!(old.container().image.as_deref(), Some(first.as_str()));
    let replicas_of = |d: &Deployment| d.spec.replicas.unwrap_or(1);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), HOST_NS);
    let count =
        usize::try_from(replicas_of(&deployments.get("reconciled").await.unwrap())).unwrap();
    let mut running: Vec<(String, u16)> = Vec::new();
    for i in 0..count {
        running.push(start_pod(&podman, &old, &format!("reconciled-v1-{i}"), &first).await);
    }
    for ns in TENANTS {
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
        let deadline = Instant::now() + Duration::from_secs(60);
        while common::host::seen(&cms, "work").await.as_deref() != Some("v1:1") {
            assert!(
                Instant::now() < deadline,
                "{ns}'s reconciler never ran; logs:\n{}",
                podman.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // helm upgrade to the second digest, then the roll: one new pod started and ready, then one
    // old pod stopped (SIGTERM, as the kubelet sends it), as maxSurge 0 / maxUnavailable 1 lets
    // a Deployment do it; while a sampler records each guest's longest unserved gap.
    let upgrade = [
        "upgrade",
        "reconciled",
        chart.to_str().unwrap(),
        "-n",
        HOST_NS,
        "--reuse-values",
        "--set",
        &format!("image.digest={second_digest}"),
    ];
    helm.run(&upgrade).unwrap_or_else(|e| panic!("{e}"));
    let new = pod("v2").await;
    assert_eq!(new.container().image.as_deref(), Some(second.as_str()));
    let live = std::sync::Arc::new(std::sync::Mutex::new(running.clone()));
    let gaps = std::sync::Arc::new(std::sync::Mutex::new(Gaps::default()));
    let sampler = {
        let (live, gaps) = (live.clone(), gaps.clone());
        tokio::spawn(async move {
            loop {
                let now = Instant::now();
                let replicas = live.lock().unwrap().clone();
                let serving = serving_now(&replicas).await;
                gaps.lock().unwrap().sample(now, &serving);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let grace = new.grace();
    let rolled = Instant::now();
    for (i, (old_name, _)) in running.iter().enumerate() {
        let old_name = old_name.clone();
        // maxSurge 0: the old pod goes first, then its replacement comes up.
        podman
            .run(["stop", "--time", &grace.as_secs().to_string(), &old_name])
            .unwrap();
        live.lock().unwrap().retain(|(n, _)| *n != old_name);
        let started = start_pod(&podman, &new, &format!("reconciled-v2-{i}"), &second).await;
        live.lock().unwrap().push(started);
    }
    // Settled: every guest served again by one of the new pods.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now_live = live.lock().unwrap().clone();
        let serving = serving_now(&now_live).await;
        if serving.len() == TENANTS.len() && serving.values().all(|by| by.len() == 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled after the roll: {serving:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sampler.abort();
    let gaps: BTreeMap<String, Duration> = gaps
        .lock()
        .unwrap()
        .guests
        .iter()
        .map(|(g, (_, gap))| (g.clone(), *gap))
        .collect();
    eprintln!(
        "rolled {count} replicas in {:?}; longest unserved gap per guest: {gaps:?}",
        rolled.elapsed()
    );
    // A hand-off is a release seen by the others and a takeover: about a second, not the
    // 15 s of a lease expiry. Allow for the sampling and a loaded machine.
    for (guest, gap) in &gaps {
        assert!(
            *gap < Duration::from_secs(8),
            "{guest} went unserved for {gap:?} during the roll; logs:\n{}",
            podman.logs()
        );
    }
    for ns in TENANTS {
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
        let patch = serde_json::json!({"data": {"v": "2"}});
        cms.patch(
            "work",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while common::host::seen(&cms, "work").await.as_deref() != Some("v1:2") {
            assert!(
                Instant::now() < deadline,
                "{ns}: the new pods do not reconcile"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Every Lease is owned by the release's host.toml ConfigMap.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), HOST_NS);
    let config_uid = Api::<ConfigMap>::namespaced(admin.clone(), HOST_NS)
        .get("reconciled-config")
        .await
        .unwrap()
        .metadata
        .uid;
    for l in leases.list(&Default::default()).await.unwrap() {
        let owners = l.metadata.owner_references.unwrap_or_default();
        assert!(
            owners.iter().any(|o| Some(&o.uid) == config_uid.as_ref()),
            "Lease {:?} is owned by reconciled-config: {owners:?}",
            l.metadata.name
        );
    }

    // helm uninstall, then the pods stopped together, as the kubelet stops a deleted
    // Deployment's. Helm has deleted their Role and ServiceAccount by then, so they cannot
    // delete their Leases themselves: the garbage collector does, with their owner.
    helm.run(&["uninstall", "reconciled", "-n", HOST_NS, "--wait"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(deployments.get_opt("reconciled").await.unwrap().is_none());
    let names: Vec<String> = live
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    let stops: Vec<std::process::Child> = names
        .iter()
        .map(|n| {
            podman
                .command()
                .args(["stop", "--time", &grace.as_secs().to_string(), n])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut s in stops {
        assert!(s.wait().unwrap().success());
    }
    let uninstalled = Instant::now();
    let mut left: Vec<String>;
    loop {
        left = leases
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|l| l.metadata.name)
            .collect();
        if left.is_empty() || uninstalled.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        left.is_empty(),
        "Leases left behind a minute after uninstall: {left:?}"
    );
    eprintln!(
        "no Lease left {:?} after the pods stopped",
        uninstalled.elapsed()
    );
}
