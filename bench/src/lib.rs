//! Shared pieces of the side-by-side benchmarks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// Creates namespace `ns` and `n` ConfigMaps `cm-000000…` in it, 32 requests at a time, with
/// progress on stderr. Each carries ~1 KiB of varied text (so no compression or interning could
/// flatter anyone), labels `app=bench` and `shard=<i % 10>`, plus `data.indexed` when `indexed(i)`
/// says so.
pub async fn fill(
    client: &kube::Client,
    ns: &str,
    n: usize,
    indexed: impl Fn(usize) -> Option<String>,
) -> anyhow::Result<()> {
    let meta = ObjectMeta {
        name: Some(ns.into()),
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta,
                ..Default::default()
            },
        )
        .await?;
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let started = Instant::now();
    let done = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let done = &done;
            let tag = indexed(i);
            async move {
                let payload: String = (0..1024)
                    .map(|j| (b'a' + ((i * 7 + j * 13) % 26) as u8) as char)
                    .collect();
                let mut data = std::collections::BTreeMap::from([("payload".to_string(), payload)]);
                if let Some(tag) = tag {
                    data.insert("indexed".to_string(), tag);
                }
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("cm-{i:06}")),
                        labels: Some(
                            [
                                ("app".to_string(), "bench".to_string()),
                                ("shard".to_string(), (i % 10).to_string()),
                            ]
                            .into(),
                        ),
                        ..Default::default()
                    },
                    data: Some(data),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await?;
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if d.is_multiple_of(10_000) {
                    eprintln!("filled {d}/{n} in {:.0?}", started.elapsed());
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await?;
    eprintln!(
        "filled {ns} with {n} ConfigMaps in {:.1?}",
        started.elapsed()
    );
    Ok(())
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Builds the wasm guests with `guests/build.sh` (its progress goes to stderr), passing `args`,
/// and returns each built `.wasm` by file stem (`probe`, `stamp_v1`, `stamp_burn`, ...).
///
/// With `RECONCILED_GUEST_WASMS` set (the paths, one a line, as `scripts/test.sh` exports them
/// after one build), nothing is built and those are returned, so that a benchmark run beside the
/// test suite does not rebuild every guest; a stem the list lacks is then an error naming it.
pub fn guest_wasms(args: &[&str]) -> anyhow::Result<HashMap<String, PathBuf>> {
    let listed = match std::env::var("RECONCILED_GUEST_WASMS") {
        Ok(paths) if !paths.trim().is_empty() => paths,
        _ => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/build.sh");
            let out = std::process::Command::new("bash")
                .arg(script)
                .args(args)
                .stderr(std::process::Stdio::inherit())
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "guests/build.sh {} failed",
                args.join(" ")
            );
            String::from_utf8(out.stdout)?
        }
    };
    Ok(listed
        .lines()
        .map(PathBuf::from)
        .map(|p| {
            let stem = p.file_stem().unwrap_or_default().to_string_lossy().into();
            (stem, p)
        })
        .collect())
}

/// `target/release/reconciled`, under `$CARGO_TARGET_DIR` if that is set: the host binary the
/// benchmarks that run it as a process start (build it first with
/// `cargo build --release -p reconciled`).
pub fn release_host_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("release/reconciled")
}

/// The `.wasm` named `stem` among `wasms` (from [`guest_wasms`]).
pub fn wasm(wasms: &HashMap<String, PathBuf>, stem: &str) -> anyhow::Result<PathBuf> {
    wasms
        .get(stem)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("guests/build.sh built no {stem}.wasm"))
}

/// Creates ConfigMaps `names` in `ns` (which must exist), 32 requests at a time, each labelled
/// `label=true` and holding `data.v = "0"`: the objects the stamp guest reconciles.
pub async fn fill_stamped(
    client: &kube::Client,
    ns: &str,
    label: &str,
    names: impl IntoIterator<Item = String>,
) -> anyhow::Result<()> {
    fill_stamped_sized(client, ns, label, names, 0).await
}

/// [`fill_stamped`], each object also holding `data.pad` of `pad` bytes, so that a LIST of them
/// costs what a LIST of real objects (about a KiB each) costs.
pub async fn fill_stamped_sized(
    client: &kube::Client,
    ns: &str,
    label: &str,
    names: impl IntoIterator<Item = String>,
    pad: usize,
) -> anyhow::Result<()> {
    let padding = "x".repeat(pad);
    let padding = &padding;
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let started = Instant::now();
    let done = &std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            async move {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name),
                        labels: Some([(label.to_string(), "true".to_string())].into()),
                        ..Default::default()
                    },
                    data: Some(
                        [("v".to_string(), "0".to_string())]
                            .into_iter()
                            .chain((pad > 0).then(|| ("pad".to_string(), padding.clone())))
                            .collect(),
                    ),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(10_000) {
                    eprintln!("{n} objects made in {:.0?}", started.elapsed());
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
}

/// Builds the peer with `bench/peers/build.sh` (progress on stderr) and returns its path.
pub fn build_peer() -> anyhow::Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed ({}); its output is above",
        script.display(),
        out.status
    );
    let path = String::from_utf8(out.stdout)?;
    let path = path.lines().last().unwrap_or_default();
    anyhow::ensure!(
        !path.is_empty(),
        "{} printed no binary path",
        script.display()
    );
    Ok(PathBuf::from(path))
}

/// What the bench's own watch saw of one labelled ConfigMap: when, its name, its `data.v`, and
/// its stamp annotation if any.
#[derive(Debug)]
pub struct Seen {
    /// When the watch delivered it (not when it was written).
    pub at: Instant,
    /// Its name.
    pub name: String,
    /// Its `data.v`, empty if none.
    pub v: String,
    /// Its stamp annotation, if it has one.
    pub stamp: Option<String>,
}

/// Watches the ConfigMaps of `ns` labelled `label=true` in a task of its own and hands `seen`
/// each one created or changed, with its annotation `stamp` (what the stamp guest and the
/// controller-runtime peer write). Deletions and watch errors are skipped: the watcher retries.
pub fn watch_stamps(
    client: &kube::Client,
    ns: &str,
    label: &str,
    stamp: &'static str,
    mut seen: impl FnMut(Seen) + Send + 'static,
) {
    use kube::runtime::watcher;
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let config = watcher::Config::default().labels(&format!("{label}=true"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, config));
        while let Some(event) = events.next().await {
            let cm = match event {
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => cm,
                _ => continue,
            };
            seen(Seen {
                at: Instant::now(),
                name: cm.metadata.name.unwrap_or_default(),
                v: cm.data.and_then(|mut d| d.remove("v")).unwrap_or_default(),
                stamp: cm.metadata.annotations.and_then(|mut a| a.remove(stamp)),
            });
        }
    });
}

/// Live heap bytes, counted by [`Counting`] when a benchmark makes it its global allocator.
pub static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// The system allocator, counting live bytes in [`LIVE`]: a binary opts in with
/// `#[global_allocator] static ALLOC: Counting = Counting;`.
#[derive(Debug)]
pub struct Counting;

// SAFETY: forwards to the system allocator and only counts.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

/// This process's resident set, from `/proc/self/status` (0 where there is none).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
