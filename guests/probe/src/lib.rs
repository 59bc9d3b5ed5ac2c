//! A test guest for the host's integration tests: the request's name prefix picks a behaviour.
//!
//! It reconciles v1 ConfigMaps in every granted namespace and reports what happened by
//! merge-patching the annotation [`RESULT`] on the same ConfigMap, writing only when the value
//! changes so that reconciles converge.
//!
//! | name prefix    | behaviour                                                               |
//! |----------------|-------------------------------------------------------------------------|
//! | `loop-`        | spins forever (the host's deadline must interrupt it)                   |
//! | `alloc-`       | allocates and touches 1 GiB (the host's memory cap must trap it)        |
//! | `panic-`       | panics: a trap                                                          |
//! | `huge-list-`   | lists all ConfigMaps page by page, keeping them, until an error; returns it |
//! | `undeclared-`  | cache-gets a v1 Secret (not declared); records the error case           |
//! | `unindexed-`   | lists with a match on `data.unindexed` (no index); records the error case |
//! | `indexed-`     | lists with `data.indexed=yes` (declared index); records `ok:<count>`    |
//! | `forbidden-`   | creates a ConfigMap in data `target-namespace`; records `ok` or the case |
//! | `ryw-`         | 1000 (or data `iterations`) update-then-read rounds; records `stale:<n>`   |
//! | `leak-`        | records `v:<data.v> runs:<n> dirty:<bytes> pages:<p>`: how many reconciles this instance has run (a global), how many bytes of a fresh 1 MiB heap block were not zero, and the memory's size in 64 KiB pages at the start; then leaves its marks (the global, the block filled, 4 MiB leaked) for a next reconcile to find |
//! | anything else  | records `seen:<data.v>`                                                 |
//!
//! Error cases are recorded as the WIT spells them (`not-declared`, `forbidden`, ...).
//! `forbidden-` and `ryw-` have side effects, so they run once: when the annotation is already
//! there they do nothing. Delete the annotation to run them again.

use std::collections::BTreeMap;
use std::hint::black_box;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciled_guest::{
    Description, Error, Gvk, Kind, ListOptions, Outcome, Reconciler, Request, Result, cache,
    client, describe,
};
use serde_json::json;

/// The annotation the probe reports its result in.
const RESULT: &str = "probe.reconciled.dev/result";
/// On a ServiceAccount (label) or a Pod (annotation): the ConfigMap it belongs to.
const FOR: &str = "probe.reconciled.dev/for";

struct Probe;

impl Reconciler for Probe {
    fn describe() -> Description {
        describe::<ConfigMap>()
            .field_index::<ConfigMap>("data.indexed")
            // ServiceAccounts name their ConfigMap by label, Pods by annotation (through `map`).
            .watches_label::<ServiceAccount>(FOR)
            .watches_guest_map::<Pod>()
            .build()
    }

    fn map(_kind: Gvk, object: String) -> Vec<Request> {
        let Ok(pod) = serde_json::from_str::<Pod>(&object) else {
            return Vec::new();
        };
        let target = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(FOR))
            .cloned();
        match (pod.metadata.namespace, target) {
            (Some(ns), Some(name)) => vec![Request::new(ns, name)],
            _ => Vec::new(),
        }
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let name = req.name.as_str();
        if let Some(what) = name.strip_prefix("bench-") {
            return bench(&req.namespace, what);
        }
        if name.starts_with("loop-") {
            spin()
        } else if name.starts_with("alloc-") {
            alloc_1gib();
            Ok(Outcome::Done)
        } else if name.starts_with("panic-") {
            panic!("probe panic")
        } else if name.starts_with("huge-list-") {
            Err(huge_list())
        } else if name.starts_with("undeclared-") {
            let result = cache::get::<Secret>(&req.namespace, &req.name);
            record(&req, &case_or(result, |_| "ok".to_owned()))
        } else if name.starts_with("unindexed-") {
            record(&req, &list_matching(&req, "data.unindexed", "x"))
        } else if name.starts_with("indexed-") {
            record(&req, &list_matching(&req, "data.indexed", "yes"))
        } else if name.starts_with("forbidden-") {
            once(&req, forbidden)
        } else if name.starts_with("ryw-") {
            once(&req, read_your_writes)
        } else if name.starts_with("leak-") {
            let marks = leave_marks();
            let Some(cm) = cache::get_opt::<ConfigMap>(&req.namespace, &req.name)? else {
                return Ok(Outcome::Done);
            };
            let v = data(&cm, "v").unwrap_or_default();
            record_on(&cm, &format!("v:{v} {marks}"))
        } else if name.starts_with("watch-") {
            record(&req, &watched(&req)?)
        } else {
            let Some(cm) = cache::get_opt::<ConfigMap>(&req.namespace, &req.name)? else {
                return Ok(Outcome::Done);
            };
            let v = data(&cm, "v").unwrap_or_default();
            record_on(&cm, &format!("seen:{v}"))
        }
    }
}

reconciled_guest::export_reconciler!(Probe);

/// Benchmark bodies, called directly by `bench/` (never through a controller): `noop` returns at
/// once; `get-<n>` reads ConfigMap `bench-target` n times; `list-<n>` lists the ConfigMaps with
/// `data.indexed=hot` n times. Raw JSON calls, so that guest-side decoding does not blur the cost
/// of the boundary itself. `typed-get-<n>` reads it n times as a `k8s_openapi` `ConfigMap`, as a
/// guest written with the SDK does: the boundary and the decoding.
fn bench(namespace: &str, what: &str) -> Result<Outcome> {
    let kind = ConfigMap::gvk();
    let count = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| Error::Invalid(format!("bad bench count {s:?}")))
    };
    if let Some(n) = what.strip_prefix("get-") {
        for _ in 0..count(n)? {
            black_box(cache::get_raw(&kind, namespace, "bench-target")?);
        }
    } else if let Some(n) = what.strip_prefix("typed-get-") {
        for _ in 0..count(n)? {
            black_box(cache::get::<ConfigMap>(namespace, "bench-target")?);
        }
    } else if let Some(n) = what.strip_prefix("list-") {
        let options = ListOptions::default()
            .in_namespace(namespace)
            .field("data.indexed", "hot");
        for _ in 0..count(n)? {
            black_box(cache::list_raw(&kind, &options)?);
        }
    } else if what != "noop" {
        // A misspelt body would otherwise time an empty call and report reads as free.
        return Err(Error::Invalid(format!("unknown bench body {what:?}")));
    }
    Ok(Outcome::Done)
}

/// What belongs to `req` among the watched kinds: `sa:<n>,pod:<n>`. A change to either kind
/// must trigger a reconcile of `req` for the count to move.
fn watched(req: &Request) -> Result<String> {
    let accounts = cache::list::<ServiceAccount>(
        ListOptions::default()
            .in_namespace(&req.namespace)
            .labels(format!("{FOR}={}", req.name)),
    )?;
    let pods = cache::list::<Pod>(ListOptions::default().in_namespace(&req.namespace))?;
    let mine = pods
        .iter()
        .filter(|p| p.metadata.annotations.as_ref().and_then(|a| a.get(FOR)) == Some(&req.name))
        .count();
    Ok(format!("sa:{},pod:{mine}", accounts.len()))
}

/// Spins forever: `black_box` keeps the optimizer from proving the loop empty.
fn spin() -> ! {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocates 1 GiB and writes every byte (a non-zero fill, so that no page stays untouched).
/// Beyond the host's memory cap, the allocation fails and the guest aborts: a trap.
fn alloc_1gib() {
    const SIZE: usize = 1 << 30;
    let buf = vec![1u8; SIZE];
    black_box(&buf);
}

/// Lists every ConfigMap of every namespace, 500 at a time, keeping every item, until the host
/// says no (expected: `too-large`, from the per-reconcile byte cap). After the last page it
/// starts again from the first, so without a cap it ends at the memory limit.
fn huge_list() -> Error {
    let mut kept: Vec<String> = Vec::new();
    let mut options = ListOptions::new().limit(500);
    loop {
        match cache::list_raw(&ConfigMap::gvk(), &options) {
            Ok(page) => {
                kept.extend(page.items);
                options.continue_token = page.continue_token;
            }
            Err(e) => {
                reconciled_guest::info!("huge-list: kept {} items, then: {e}", kept.len());
                return e;
            }
        }
    }
}

/// `ok:<count>` of the ConfigMaps in the request's namespace whose `path` is `value`, or the
/// error case.
fn list_matching(req: &Request, path: &str, value: &str) -> String {
    let options = ListOptions::new()
        .in_namespace(&req.namespace)
        .field(path, value);
    case_or(cache::list::<ConfigMap>(options), |items| {
        format!("ok:{}", items.len())
    })
}

/// Creates a ConfigMap named after the request in the namespace its data `target-namespace`
/// names; `ok` or the error case.
fn forbidden(cm: &ConfigMap) -> String {
    let target = ConfigMap {
        metadata: ObjectMeta {
            name: cm.metadata.name.clone(),
            namespace: Some(data(cm, "target-namespace").unwrap_or_default()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("from".to_owned(), "probe".to_owned())])),
        ..ConfigMap::default()
    };
    case_or(client::create(&target), |_| "ok".to_owned())
}

/// Rounds of: read the ConfigMap from the cache, write data `counter` + 1 with a full update,
/// read it back from the cache at once. Returns `stale:<n>`, n being the read-backs that did
/// not show the write. A conflict skips the round (the next one re-reads).
///
/// 1000 rounds, or data `iterations`: each round is three host calls and two object reads, so
/// the host's per-reconcile caps must allow about 3000 calls.
fn read_your_writes(cm: &ConfigMap) -> String {
    let (namespace, name) = (namespace_of(cm), name_of(cm));
    let rounds = data(cm, "iterations")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(1000);
    let mut stale = 0u32;
    for _ in 0..rounds {
        let mut cm = match cache::get::<ConfigMap>(&namespace, &name) {
            Ok(cm) => cm,
            Err(e) => return e.case().to_owned(),
        };
        let next = data(&cm, "counter")
            .and_then(|c| c.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        cm.data
            .get_or_insert_default()
            .insert("counter".to_owned(), next.to_string());
        match client::update(&cm) {
            Ok(_) => {}
            Err(e) if e.is_conflict() => continue,
            Err(e) => return e.case().to_owned(),
        }
        match cache::get::<ConfigMap>(&namespace, &name) {
            Ok(read) if data(&read, "counter") == Some(next.to_string()) => {}
            Ok(_) => stale += 1,
            Err(e) => return e.case().to_owned(),
        }
    }
    format!("stale:{stale}")
}

/// Runs a one-shot behaviour: only while the ConfigMap has no result yet.
fn once(req: &Request, behaviour: fn(&ConfigMap) -> String) -> Result<Outcome> {
    let Some(cm) = cache::get_opt::<ConfigMap>(&req.namespace, &req.name)? else {
        return Ok(Outcome::Done);
    };
    if result_of(&cm).is_some() {
        return Ok(Outcome::Done);
    }
    let result = behaviour(&cm);
    record(req, &result)
}

/// Records `result` on the request's ConfigMap, unless it is gone or already says so.
fn record(req: &Request, result: &str) -> Result<Outcome> {
    match cache::get_opt::<ConfigMap>(&req.namespace, &req.name)? {
        Some(cm) => record_on(&cm, result),
        None => Ok(Outcome::Done),
    }
}

/// Records `result` on `cm` (as read from the cache), unless it already says so.
fn record_on(cm: &ConfigMap, result: &str) -> Result<Outcome> {
    if result_of(cm) != Some(result) {
        let patch = json!({ "metadata": { "annotations": { RESULT: result } } });
        client::merge_patch::<ConfigMap>(&namespace_of(cm), &name_of(cm), &patch)?;
    }
    Ok(Outcome::Done)
}

/// `ok` mapped from a success, or the error's case name.
fn case_or<T>(result: Result<T>, ok: impl FnOnce(T) -> String) -> String {
    result.map_or_else(|e| e.case().to_owned(), ok)
}

fn result_of(cm: &ConfigMap) -> Option<&str> {
    cm.metadata
        .annotations
        .as_ref()?
        .get(RESULT)
        .map(String::as_str)
}

fn data(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref()?.get(key).cloned()
}

fn namespace_of(cm: &ConfigMap) -> String {
    cm.metadata.namespace.clone().unwrap_or_default()
}

fn name_of(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

/// Reconciles run by this instance: a fresh instance per reconcile must always say 1.
static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Looks for what an earlier reconcile could have left in this instance, then leaves the same
/// marks for a later one: the `leak-` behaviour. Says `runs:<n> dirty:<bytes> pages:<p>`.
fn leave_marks() -> String {
    const BLOCK: usize = 1 << 20;
    let pages = core::arch::wasm32::memory_size(0);
    let runs = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let layout = std::alloc::Layout::from_size_align(BLOCK, 8).expect("a valid layout");
    // SAFETY: the layout is non-zero; the block is read as bytes, which any bit pattern is, and
    // is never freed (a leak on purpose).
    let dirty = unsafe {
        let block = std::alloc::alloc(layout);
        if block.is_null() {
            return format!("runs:{runs} dirty:unallocated pages:{pages}");
        }
        let dirty = (0..BLOCK).filter(|&i| *block.add(i) != 0).count();
        std::ptr::write_bytes(block, 0xCD, BLOCK);
        dirty
    };
    // Heap growth a reused instance would keep.
    std::mem::forget(black_box(vec![0xABu8; 4 << 20]));
    format!("runs:{runs} dirty:{dirty} pages:{pages}")
}
