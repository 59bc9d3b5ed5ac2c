//! A host in the test process: a supervisor (with a precompile cache in a temp dir that is
//! removed when the test binary's process ends), its endpoints on a free port, and the `stamp`
//! guest's vocabulary.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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
