//! Sharded list and watch (KEP-5866): informers scoped to complementary hash ranges of one
//! namespace, on a control plane with the `ShardedListAndWatch` gate on, hold every object
//! exactly once between them, in the range its uid hashes to, through their sync and the watch
//! after it. On a server without the gate, a sharded informer caches nothing and says which gate
//! to turn on.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::wait::wait_until;
use common::{cm, namespace, sharded_control_plane};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams};
use reconciled::informer::shard::{ShardKey, ShardRange};
use reconciled::informer::store::Query;
use reconciled::informer::{Informer, InformerKey, Options, Scope};
use testenv::ControlPlane;

fn shard_informer(client: &kube::Client, ns: &str, shard: ShardRange) -> Arc<Informer> {
    Informer::start(
        client.clone(),
        InformerKey::new(
            "",
            "v1",
            "ConfigMap",
            Scope {
                shard: Some(shard.into()),
                ..Scope::namespace(ns)
            },
        ),
        Options::default(),
    )
}

fn names(i: &Informer) -> BTreeSet<String> {
    i.store()
        .list(&Query::default())
        .unwrap()
        .iter()
        .map(|o| o.name().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_hold_every_object_once_in_the_range_its_uid_hashes_to() {
    let cp = sharded_control_plane();
    let client = cp.admin_client();
    let ns = "sharded";
    namespace(&client, ns).await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for i in 0..40 {
        api.create(&PostParams::default(), &cm(&format!("c{i:02}"), &[]))
            .await
            .unwrap();
    }
    let shards = [0, 1].map(|i| ShardRange::nth(ShardKey::Uid, i, 2).unwrap());
    let informers = shards.map(|s| shard_informer(&client, ns, s));
    for i in &informers {
        i.wait_synced(Duration::from_secs(30)).await.unwrap();
    }
    // Then through the watch: ten more.
    for i in 40..50 {
        api.create(&PostParams::default(), &cm(&format!("c{i:02}"), &[]))
            .await
            .unwrap();
    }
    let all = api.list(&ListParams::default()).await.unwrap().items;
    let total = all.len();
    assert!(total >= 50, "{total}");
    wait_until(
        "both shards hold every object",
        Duration::from_secs(30),
        || informers.iter().map(|i| i.store().len()).sum::<usize>() >= total,
    )
    .await;
    let held = informers.each_ref().map(|i| names(i));
    assert!(
        held.iter().all(|h| !h.is_empty()),
        "both shards hold some: {held:?}"
    );
    for obj in &all {
        let name = obj.metadata.name.as_deref().unwrap();
        let uid = obj.metadata.uid.as_deref().unwrap();
        let home: Vec<usize> = (0..2).filter(|&s| held[s].contains(name)).collect();
        let want = (0..2).find(|&s| shards[s].contains(uid)).unwrap();
        assert_eq!(
            home,
            [want],
            "{name} (uid {uid}) belongs to shard {want} alone"
        );
    }
    assert_eq!(held[0].len() + held[1].len(), total, "no object twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_a_sharded_informer_caches_nothing_and_names_the_gate() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "sharded-no-gate";
    namespace(&client, ns).await;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm("one", &[]))
        .await
        .unwrap();
    let informer = shard_informer(&client, ns, ShardRange::nth(ShardKey::Uid, 0, 2).unwrap());
    wait_until(
        "the informer names the gate",
        Duration::from_secs(30),
        || {
            informer
                .status()
                .message
                .is_some_and(|m| m.contains("ShardedListAndWatch"))
        },
    )
    .await;
    assert!(informer.wait_synced(Duration::from_secs(1)).await.is_err());
    assert_eq!(
        informer.store().len(),
        0,
        "a server that ignores the selector sends everything"
    );
    eprintln!("{}", informer.status());
}
