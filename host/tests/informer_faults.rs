//! Informer recovery from faults on the real apiserver (WatchList on, the default): 410 Gone
//! after compaction, apiserver restarts, dropped connections. These restart the shared
//! apiserver, so they run one at a time in their own test binary.

mod common;

use common::scenarios;
use reconciled::informer::Options;
use testenv::ControlPlane;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_410_the_informer_relists_and_tombstones_what_was_deleted_in_the_gap() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let stats =
        scenarios::relist_after_410_tombstones_gap_deletes(cp, "gone", Options::default()).await;
    assert!(
        stats.watch_list_syncs >= 2,
        "relisted through WatchList: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_cache_equals_a_quorum_list_after_2000_operations_and_faults() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    scenarios::oracle_after_faults(cp, "oracle", Options::default()).await;
}
