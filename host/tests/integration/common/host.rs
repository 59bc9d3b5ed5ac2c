//! A host in the test process: a supervisor (with a precompile cache in a temp dir that is
//! removed when the test binary's process ends), its endpoints on a free port, and the `stamp`
//! guest's vocabulary.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, ObjectMeta};
use reconciled::guest::Runtime;
use reconciled::guest::identity::Identities;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;
use reconciled::sources::configmap::{ConfigMapSource, TenantPolicy};
use reconciled::supervisor::{self, Supervisor};

/// The annotation `stamp` writes: `<version>:<data.v>`.
pub const SEEN: &str = "stamp.reconciled.dev/seen";
/// The label that makes `stamp` reconcile a ConfigMap.
pub const ENABLED: &str = "stamp.reconciled.dev/enabled";

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `what`.
    pub fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "reconciled-test-{what}-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A supervisor connecting with `config` (guests acting as a ServiceAccount impersonate it from
/// there); with `artifacts`, its runtime keeps compiled modules there.
pub fn supervisor_with(config: &kube::Config, artifacts: Option<&TempDir>) -> Arc<Supervisor> {
    supervisor_options(config, artifacts, supervisor::Options::default())
}

/// A host serving tenant namespace `ns`, set up as `deploy/tenant.yaml` sets one up (see
/// [`crate::common::tenant_namespace`]): a supervisor with its precompile cache in `artifacts`,
/// and a ConfigMap source over `ns` alone under `policy`. Keep the source: dropping it stops
/// the deliveries.
pub async fn tenant_host(
    cp: &testenv::ControlPlane,
    ns: &str,
    artifacts: &TempDir,
    policy: TenantPolicy,
) -> (Arc<Supervisor>, ConfigMapSource) {
    crate::common::tenant_namespace(cp, ns).await;
    let sup = supervisor_with(&cp.admin_config(), Some(artifacts));
    let source = ConfigMapSource::start(
        sup.factory(),
        sup.clone(),
        crate::common::only(&[ns], policy),
    )
    .unwrap();
    (sup, source)
}

/// Waits up to `timeout` for the `ModuleRejected` Event on ConfigMap `ns/configmap` whose
/// message contains `says`; the panic also says what `sup` last said of guest `guest` (a load
/// still on its way, an error with no Event).
pub async fn wait_rejected(
    sup: &Supervisor,
    client: &kube::Client,
    at: (&str, &str),
    guest: &str,
    says: &str,
    timeout: Duration,
) {
    let explain = || {
        format!(
            "; {guest} loading: {}, last error: {:?}, status: {:?}",
            sup.loading(guest),
            sup.last_error(guest),
            sup.status().guest(guest).cloned()
        )
    };
    crate::common::wait::wait_event_explained(client, at, "ModuleRejected", says, timeout, explain)
        .await;
}

/// Waits up to `timeout` until `sup` serves guest `name`; the panic says what `sup` last said of
/// it (a rejection, a load still on its way).
pub async fn wait_serving(sup: &Supervisor, name: &str, timeout: Duration) {
    let started = std::time::Instant::now();
    while sup.controller(name).is_none() {
        if started.elapsed() >= timeout {
            let shown = sup.status().guest(name).cloned();
            panic!(
                "{name} serving: not within {timeout:?}; loading: {}, last error: {:?}, status: {shown:?}",
                sup.loading(name),
                sup.last_error(name)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`supervisor_with`] and these options.
pub fn supervisor_options(
    config: &kube::Config,
    artifacts: Option<&TempDir>,
    options: supervisor::Options,
) -> Arc<Supervisor> {
    let runtime = match artifacts {
        Some(dir) => Runtime::new()
            .unwrap()
            .with_artifact_cache(&dir.0.join("compiled"))
            .unwrap(),
        None => Runtime::new().unwrap(),
    };
    let identities = Identities::new(config.clone()).unwrap();
    let factory = Arc::new(InformerFactory::new(
        identities.host().clone(),
        Options::default(),
    ));
    Arc::new(Supervisor::new(runtime, factory, identities, options))
}

/// Serves `sup`'s endpoints on a free loopback port, for as long as the test runs.
pub async fn serve(sup: &Arc<Supervisor>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let endpoints: Arc<dyn reconciled::ops::http::Endpoints> = sup.clone();
    tokio::spawn(reconciled::ops::http::serve(listener, endpoints));
    addr
}

/// A loopback address nothing listens on yet, for a child process to bind.
pub fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A ConfigMap `stamp` reconciles, with `data.v = v`.
pub fn stamped(name: &str, v: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(ENABLED.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        data: Some([("v".to_string(), v.to_string())].into()),
        ..Default::default()
    }
}

/// The `seen` annotation of `name`, if `stamp` wrote one.
pub async fn seen(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get(name)
        .await
        .unwrap()
        .metadata
        .annotations
        .and_then(|a| a.get(SEEN).cloned())
}

/// name → `seen` annotation of every ConfigMap `api` lists.
pub async fn seen_all(api: &Api<ConfigMap>) -> BTreeMap<String, Option<String>> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            let seen = c.metadata.annotations.and_then(|a| a.get(SEEN).cloned());
            (c.metadata.name.unwrap(), seen)
        })
        .collect()
}

/// A finished command's stdout, then its stderr, for assertions and failure messages.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every stamp a watch of `objects` saw, from when [`watch_stamps`] was called: when, on which
/// object, what (empty for none). The watch stops when this is dropped.
pub struct Stamps {
    seen: Arc<std::sync::Mutex<Vec<(std::time::Instant, String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stamps {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stamps {
    /// The writes whose stamp starts with `prefix`, as (when, object).
    pub fn by(&self, prefix: &str) -> Vec<(std::time::Instant, String)> {
        (self.seen.lock().unwrap().iter())
            .filter(|(_, _, s)| s.starts_with(prefix))
            .map(|(at, name, _)| (*at, name.clone()))
            .collect()
    }

    /// Whether a version of object `name` carrying `stamp` was seen.
    pub fn saw(&self, name: &str, stamp: &str) -> bool {
        (self.seen.lock().unwrap().iter()).any(|(_, n, s)| n == name && s == stamp)
    }

    /// Every stamp seen, in order.
    pub fn all(&self) -> Vec<String> {
        (self.seen.lock().unwrap().iter())
            .map(|(_, _, s)| s.clone())
            .collect()
    }
}

/// Watches every version of every ConfigMap of `objects` the API server stores from now on, and
/// records its stamp.
pub async fn watch_stamps(objects: &Api<ConfigMap>) -> Stamps {
    let from = (objects.list(&Default::default()).await.unwrap())
        .metadata
        .resource_version
        .unwrap();
    let seen: Arc<std::sync::Mutex<Vec<_>>> = Arc::default();
    let task = tokio::spawn({
        let (objects, seen) = (objects.clone(), seen.clone());
        async move {
            use futures::TryStreamExt;
            let params = kube::api::WatchParams::default().timeout(290);
            let mut events = std::pin::pin!(objects.watch(&params, &from).await.unwrap());
            while let Ok(Some(event)) = events.try_next().await {
                if let kube::api::WatchEvent::Added(cm) | kube::api::WatchEvent::Modified(cm) =
                    event
                {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    let stamp = cm.metadata.annotations.unwrap_or_default().remove(SEEN);
                    let stamp = stamp.unwrap_or_default();
                    seen.lock()
                        .unwrap()
                        .push((std::time::Instant::now(), name, stamp));
                }
            }
        }
    });
    Stamps { seen, task }
}

/// Delivers `module` as a tenant's reconciler `rec` of namespace `ns`: packed into a labelled
/// ConfigMap `rec`, as `reconciled pack` does.
pub async fn deliver(api: &Api<ConfigMap>, ns: &str, module: &[u8]) {
    let packed = reconciled::sources::configmap::pack(ns, "rec", "rec", module).unwrap();
    api.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(packed).unwrap(),
    )
    .await
    .unwrap();
}
