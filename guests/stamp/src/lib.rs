//! A tiny test guest for the host's hot-reload tests and benchmarks: it stamps its version on
//! labelled ConfigMaps, so a test can tell which build of the component reconciled last.
//!
//! It reconciles v1 ConfigMaps labelled [`SELECTOR`] (read-your-writes, every granted
//! namespace) and merge-patches the annotation [`SEEN`] to `<version>:<data.v>`, writing only
//! when the value changes so that reconciles converge. The version is the build's (below), unless
//! its settings say another: `{"version": "blue"}` stamps `blue:<data.v>`, so one build deployed
//! twice with different settings stamps differently. `{"fail_percent": 30}` makes the reconcile
//! of about 30% of the names fail, always the same ones: a bad revision. A missing ConfigMap is nothing to do;
//! any other host error is the reconcile's error (so the host retries). `map` maps nothing.
//!
//! Small on purpose (a reload test loads it many times): the ConfigMap is handled as raw JSON
//! (`serde_json::Value`), never as a `k8s_openapi` type, and the patch goes through the raw
//! bindings, which do not decode the answer.
//!
//! Each cargo feature builds a variant (`guests/build.sh` copies each to its own file):
//!
//! | feature         | file                | what changes                                        |
//! |-----------------|---------------------|-----------------------------------------------------|
//! | (none)          | `stamp_v1.wasm`     | stamps `v1:<data.v>`                                |
//! | `v2`            | `stamp_v2.wasm`     | stamps `v2:<data.v>`                                |
//! | `trap-describe` | `stamp_trap.wasm`   | `describe()` panics: the component traps at load time |
//! | `greedy`        | `stamp_greedy.wasm` | `describe()` also asks for namespace `kube-system` and owned v1 Secrets: more than a tenant is granted, so the host must refuse it |
//! | `cluster-scoped`| `stamp_cluster.wasm`| `describe()` also watches v1 Namespaces (cluster-scoped) through `map`: a guest confined to namespaces must be refused |
//! | `burn`          | `stamp_burn.wasm`   | `reconcile` spins through about 5 ms of CPU work (or `data.burn_ms`, at most 1000) and writes nothing: a CPU-heavy tenant for the fairness benchmark |
//! | `spin`          | `stamp_spin.wasm`   | `reconcile` loops until the host interrupts it at its deadline |
//! | `mark`          | `stamp_mark.wasm`   | stamps as `v1`, then records the reconcile as a ConfigMap `mark-…` labelled [`MARKER`]: the replica (`RECONCILED_REPLICA`), the key, and when it started and ended, in milliseconds since the epoch; for the replica tests, which check that no two replicas reconcile one guest at once |
//! | `big`           | `stamp_big.wasm`    | embeds 12 MB of incompressible ballast (from `build.rs`): a ~12 MB component, for benchmarks (built only by `build.sh --bench`) |

use std::hint::black_box;

use reconciled_guest::bindings::reconciled::runtime::client::{self as raw_client, PatchBody};
use reconciled_guest::k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use reconciled_guest::serde_json::{self, Value, json};
use reconciled_guest::{Description, Error, Kind, Outcome, Reconciler, Request, Result, describe};

/// The label selector for the ConfigMaps this guest reconciles.
const SELECTOR: &str = "stamp.reconciled.dev/enabled=true";
/// The annotation stamped on each ConfigMap: `<VERSION>:<data.v>`.
const SEEN: &str = "stamp.reconciled.dev/seen";
/// The label of the records the `mark` build writes, one per reconcile.
const MARKER: &str = "stamp.reconciled.dev/marker";
/// This build's version: `v2` with feature `v2`, else `v1`.
const VERSION: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

/// 12 MB of ballast with feature `big`, else empty (see `build.rs`).
static BALLAST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ballast.bin"));

struct Stamp;

/// What the settings may say.
#[derive(reconciled_guest::serde::Deserialize, Default)]
#[serde(crate = "reconciled_guest::serde", default)]
struct Settings {
    /// Stamped instead of the build's [`VERSION`].
    version: Option<String>,
    /// Fails the reconcile of about this share of the keys (0 to 100), always the same ones:
    /// a bad revision, for the rollout tests.
    fail_percent: u32,
}

/// Whether `name` is among the `percent` of names that fail: FNV-1a of the name, mod 100. Not
/// the host's canary hash, so the failing keys and a canary share overlap only by chance.
fn fails(name: &str, percent: u32) -> bool {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h % 100 < percent
}

impl Reconciler for Stamp {
    fn describe() -> Description {
        if cfg!(feature = "trap-describe") {
            panic!("stamp: describe() refuses on purpose (trap-describe build)");
        }
        // An index the optimizer cannot see through: the whole ballast must stay in the binary.
        if let Some(byte) = BALLAST.get(black_box(BALLAST.len() / 2)) {
            black_box(*byte);
        }
        let mut description = describe::<ConfigMap>().label_selector(SELECTOR);
        if cfg!(feature = "greedy") {
            description = description.namespaces(["kube-system"]).owns::<Secret>();
        }
        if cfg!(feature = "cluster-scoped") {
            description = description.watches_guest_map::<Namespace>();
        }
        description.build()
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let started = now_ms();
        if cfg!(feature = "spin") {
            spin_until_interrupted();
        }
        let kind = ConfigMap::gvk();
        let json = match reconciled_guest::cache::get_raw(&kind, &req.namespace, &req.name) {
            Ok(json) => json,
            // Reconciles also run after a deletion: not found means nothing to do.
            Err(e) if e.is_not_found() => return Ok(Outcome::Done),
            Err(e) => return Err(e),
        };
        let cm: Value = serde_json::from_str(&json)
            .map_err(|e| Error::Other(format!("stamp: the host's ConfigMap is not JSON: {e}")))?;
        if cfg!(feature = "burn") {
            // The object may ask for another cost; capped so a typo cannot reach the deadline.
            let ms = cm["data"]["burn_ms"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(5)
                .min(1000);
            burn(ms);
            return Ok(Outcome::Done);
        }
        let v = cm["data"]["v"].as_str().unwrap_or_default();
        let settings: Settings = reconciled_guest::settings()?;
        if fails(&req.name, settings.fail_percent) {
            return Err(Error::Other(format!(
                "stamp: {} fails on purpose (settings.fail_percent {})",
                req.name, settings.fail_percent
            )));
        }
        let version = settings.version.as_deref().unwrap_or(VERSION);
        let desired = format!("{version}:{v}");
        if cm["metadata"]["annotations"][SEEN].as_str() != Some(desired.as_str()) {
            let patch = json!({ "metadata": { "annotations": { SEEN: desired } } });
            raw_client::patch(
                &kind,
                &req.namespace,
                &req.name,
                &PatchBody::Merge(patch.to_string()),
            )?;
        }
        if cfg!(feature = "mark") {
            mark(&req, v, started)?;
        }
        Ok(Outcome::Done)
    }
}

/// Milliseconds since the epoch, by the guest's (the host's) wall clock.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Records this reconcile: who ran it, on which key and value, from when to when (the end is
/// taken after the stamp was written, before the record is).
fn mark(req: &Request, v: &str, started: u128) -> Result<()> {
    let replica = std::env::var("RECONCILED_REPLICA").unwrap_or_default();
    let record = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "generateName": "mark-",
            "namespace": req.namespace,
            "labels": { MARKER: "true" },
        },
        "data": {
            "replica": replica,
            "key": format!("{}/{}", req.namespace, req.name),
            "v": v,
            "start": started.to_string(),
            "end": now_ms().to_string(),
        },
    });
    raw_client::create(&ConfigMap::gvk(), &req.namespace, &record.to_string())?;
    Ok(())
}

/// Iterations of [`burn`]'s loop that take about a millisecond of CPU on the 2-core machine
/// `bench/RESULTS.md` was measured on (the host reports what each call really used).
const ITERATIONS_PER_MS: u64 = 950_000;

/// Spins through a fixed amount of work, about `ms` milliseconds of CPU. Work, not the wall
/// clock: on a busy machine a wall-clock spin gets part of a core and uses less CPU, while this
/// uses the same CPU however long it takes.
fn burn(ms: u64) {
    let mut x = 0u64;
    for i in 0..ms * ITERATIONS_PER_MS {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    black_box(x);
}

/// Never returns: only the host's deadline ends the call.
fn spin_until_interrupted() -> ! {
    let mut x = 0u64;
    loop {
        x = black_box(x.wrapping_add(1));
    }
}

reconciled_guest::export_reconciler!(Stamp);
