//! One digest, one native code image: every load of a module a runtime already holds shares
//! its code, a fresh compile is file-backed from the start, and the code is freed with its last
//! user. No cluster is needed: the runtime alone.

use crate::common;

use std::path::{Path, PathBuf};

use reconciled::guest::Runtime;
use reconciled::guest::artifact_cache::Origin;

/// The line of `/proc/self/maps` whose range holds `address`.
fn mapping_of(address: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find(|line| {
            let range = line.split(' ').next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            let start = usize::from_str_radix(start, 16).unwrap();
            let end = usize::from_str_radix(end, 16).unwrap();
            (start..end).contains(&address)
        })
        .unwrap_or_else(|| panic!("no mapping holds {address:#x}"))
        .to_string()
}

/// The files in the cache's engine directory (there is one).
fn files_in(cache: &Path) -> Vec<String> {
    let engine_dir = std::fs::read_dir(cache).unwrap().next().unwrap().unwrap();
    let mut names: Vec<String> = std::fs::read_dir(engine_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn cache_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "reconciled-sharing-{tag}-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_digest_is_compiled_once_mapped_from_a_file_and_shared_by_every_load() {
    let bytes = std::fs::read(common::guests::wasm("probe")).unwrap();
    let dir = cache_dir("shared");
    let runtime = Runtime::new().unwrap().with_artifact_cache(&dir).unwrap();

    let first = runtime.compile(bytes.clone()).await.unwrap();
    assert_eq!(first.origin(), Origin::Compiled);
    let mapping = mapping_of(first.image_range().start);
    assert!(
        mapping.contains(".tmp"),
        "a fresh compile's code is not mapped from its staged file: {mapping}"
    );

    let second = runtime.compile(bytes.clone()).await.unwrap();
    assert_eq!(second.origin(), Origin::Memory);
    assert_eq!(
        first.image_range(),
        second.image_range(),
        "two loads of one digest hold two images"
    );

    // Kept by the second load's persist: the first's staged file is the one shared.
    second.persist_artifact().unwrap().await.unwrap();
    let artifact = format!("{}.cwasm", first.digest());
    assert_eq!(files_in(&dir), std::slice::from_ref(&artifact));
    let mapping = mapping_of(first.image_range().start);
    assert!(
        mapping.ends_with(&artifact),
        "the code is not mapped from the kept artifact: {mapping}"
    );

    // Calls through either run the same code, each in a fresh instance.
    let limits = reconciled::guest::imports::Limits::default();
    let described = first.describe(limits).await.unwrap();
    assert_eq!(second.describe(limits).await.unwrap().for_, described.for_);

    drop((first, second));
    let third = runtime.compile(bytes).await.unwrap();
    assert_eq!(
        third.origin(),
        Origin::Cache,
        "the code outlived its last user, or the artifact was not kept"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_compile_never_kept_leaves_no_file_behind() {
    let bytes = std::fs::read(common::guests::wasm("probe")).unwrap();
    let dir = cache_dir("unkept");
    let runtime = Runtime::new().unwrap().with_artifact_cache(&dir).unwrap();
    let module = runtime.compile(bytes).await.unwrap();
    assert_eq!(files_in(&dir).len(), 1, "{:?}", files_in(&dir));
    drop(module);
    assert_eq!(files_in(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
