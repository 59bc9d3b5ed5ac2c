//! Starting a guest from a built `.wasm` as a controller, and reading what it reports in an
//! annotation.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use reconciled::controller::fair_share::Share;
use reconciled::controller::gate::Gate;
use reconciled::controller::{self, Controller, Settings};
use reconciled::guest::Runtime;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;

/// A controller running guest `wasm` (a file stem from guests/build.sh), with its factory and
/// runtime, which must outlive it. A declaration the host refuses is the `Err`.
pub async fn start(
    client: kube::Client,
    wasm: &str,
    settings: Settings,
) -> Result<
    (Arc<Controller>, Arc<InformerFactory>, Runtime),
    (controller::Error, Arc<InformerFactory>),
> {
    start_gated(client, wasm, settings, Gate::open()).await
}

/// [`start`], its reconciles passing through `gate`.
pub async fn start_gated(
    client: kube::Client,
    wasm: &str,
    settings: Settings,
    gate: Arc<Gate>,
) -> Result<
    (Arc<Controller>, Arc<InformerFactory>, Runtime),
    (controller::Error, Arc<InformerFactory>),
> {
    let runtime = Runtime::new()
        .unwrap()
        .with_artifact_cache(&compiled())
        .unwrap();
    let module = runtime
        .compile(std::fs::read(super::guests::wasm(wasm)).unwrap())
        .await
        .unwrap();
    let factory = Arc::new(InformerFactory::new(client.clone(), Options::default()));
    let share = Share::alone(&settings.name);
    match Controller::start(&factory, client, module.clone(), settings, share, gate).await {
        Ok(controller) => {
            if let Some(stored) = module.persist_artifact() {
                stored.await.unwrap();
            }
            Ok((controller, factory, runtime))
        }
        Err(e) => Err((e, factory)),
    }
}

/// The precompile cache of the controllers [`start`] runs, kept beside the test binaries
/// between runs: a TypeScript or Python guest takes 10 to 20 s of CPU to compile, and many
/// tests run each. Tests of compiling itself, and of the cache, keep caches of their own.
fn compiled() -> std::path::PathBuf {
    shared_cache().join("compiled")
}

/// The suite's `RECONCILED_CACHE_DIR`, shared by [`start`]'s controllers and by the host
/// processes of tests that opt in ([`super::replica::Replica::share_compiled`]): its
/// `compiled/` is the precompile cache. Writers in several processes are safe, as they are for
/// the host (each artifact is written aside and renamed into place).
pub fn shared_cache() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-cache")
}

/// Annotation `key` of ConfigMap `name`, if set.
pub async fn annotation(api: &Api<ConfigMap>, name: &str, key: &str) -> Option<String> {
    api.get(name)
        .await
        .unwrap()
        .metadata
        .annotations
        .and_then(|a| a.get(key).cloned())
}

/// Waits until annotation `key` of ConfigMap `name` satisfies `done`, and returns it.
pub async fn wait_annotation(
    api: &Api<ConfigMap>,
    name: &str,
    key: &str,
    timeout: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let value = annotation(api, name, key).await;
        if let Some(v) = value.as_deref().filter(|v| done(v)) {
            return v.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "annotation {key} of {name} not as awaited after {timeout:?}: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
