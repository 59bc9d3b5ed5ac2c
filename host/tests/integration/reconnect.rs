//! Reconnecting after outages, on the real apiserver: once the API server answers again, every
//! informer is current again within seconds, however many failures came before and however far
//! its backoff had grown. These cut and restart the apiserver, so they run one at a time on a
//! control plane of their own (`common::faulty_control_plane`).
//!
//! Each test prints its measured figures (`--nocapture` shows them).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{cm, namespace};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use reconciled::informer::factory::InformerFactory;
use reconciled::informer::{
    Informer, InformerKey, Namespaces, Options, Scope, State, Subscription,
};
use serde::de::DeserializeOwned;
use testenv::Proxy;
use tokio::time::Instant;

/// How soon after the server is back every informer must be current again.
const RECOVERY_BOUND: Duration = Duration::from_secs(3);

/// Changes an annotation on `name` and returns the object's new resourceVersion. Retries for a
/// few seconds: right after an apiserver restart the first request on a pooled connection may
/// still fail.
async fn bump<K>(api: &Api<K>, name: &str) -> u64
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "metadata": {"annotations": {"bumped": fastrand::u64(..).to_string()}}
    });
    for attempt in 0.. {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(o) => return o.resource_version().unwrap().parse().unwrap(),
            Err(e) if attempt < 100 => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot change {name}: {e}"),
        }
    }
    unreachable!()
}

/// One informer under test and the objects (store key, least resourceVersion) it must hold.
struct Watched {
    name: &'static str,
    informer: Arc<Informer>,
    _sub: Subscription,
    must_hold: Vec<(String, u64)>,
}

impl Watched {
    /// Holding every write it must.
    fn holds(&self) -> bool {
        self.must_hold.iter().all(|(key, rv)| {
            self.informer
                .store()
                .get(key)
                .and_then(|o| o.resource_version_number())
                .is_some_and(|have| have >= *rv)
        })
    }

    /// Synced (not Degraded), and holding every write it must.
    fn current(&self) -> bool {
        self.informer.status().state == State::Synced && self.holds()
    }

    fn describe(&self) -> String {
        let held: Vec<_> = self
            .must_hold
            .iter()
            .map(|(key, rv)| {
                let have = self
                    .informer
                    .store()
                    .get(key)
                    .map(|o| o.resource_version().to_string());
                format!("{key} want {rv} have {have:?}")
            })
            .collect();
        format!(
            "{}: {} [{}] {:?} {:?}",
            self.name,
            self.informer.status(),
            held.join(", "),
            self.informer.staleness(),
            self.informer.stats()
        )
    }
}

/// Waits until every informer is current; returns how long each took, from `since`.
async fn wait_all_current(watched: &[Watched], since: Instant, limit: Duration) -> Vec<Duration> {
    wait_all(watched, Watched::current, since, limit).await
}

/// Waits until `done` holds for every informer; returns how long each took, from `since`.
async fn wait_all(
    watched: &[Watched],
    done: fn(&Watched) -> bool,
    since: Instant,
    limit: Duration,
) -> Vec<Duration> {
    let mut took: Vec<Option<Duration>> = vec![None; watched.len()];
    loop {
        for (w, t) in watched.iter().zip(took.iter_mut()) {
            if t.is_none() && done(w) {
                *t = Some(since.elapsed());
            }
        }
        if took.iter().all(Option::is_some) {
            return took.into_iter().map(Option::unwrap).collect();
        }
        if since.elapsed() > limit {
            let report: Vec<String> = watched.iter().map(Watched::describe).collect();
            panic!(
                "not every informer had caught up {limit:?} after the server returned:\n  {}",
                report.join("\n  ")
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_all_state(watched: &[Watched], state: State, limit: Duration) {
    for w in watched {
        common::wait_state(&w.informer, state.clone(), limit).await;
    }
}

fn key(ns: &str, kind: &str) -> InformerKey {
    InformerKey::new("", "v1", kind, Scope::namespace(ns))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_four_cuts_and_a_15_s_outage_every_informer_is_current_within_3_s() {
    let _serial = common::faults_serial().await;
    let cp = common::faulty_control_plane();
    let admin = cp.admin_client();
    let (a, b) = ("reconnect-a", "reconnect-b");
    for ns in [a, b] {
        namespace(&admin, ns).await;
        Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &cm("probe", &[]))
            .await
            .unwrap();
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("probe".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Secret>::namespaced(admin.clone(), a)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let cms_a = Api::<ConfigMap>::namespaced(admin.clone(), a);
    let cms_b = Api::<ConfigMap>::namespaced(admin.clone(), b);
    let secrets_a = Api::<Secret>::namespaced(admin.clone(), a);

    // Every informer reaches the apiserver only through the proxy, through one factory: five
    // watches on three resources' worth of informers, all cut off together.
    let proxy = Proxy::start(cp.server_addr()).await.unwrap();
    let client = kube::Client::try_from(proxy.config(&cp.admin_config())).unwrap();
    let factory = InformerFactory::new(client, Options::default());
    let both = Scope {
        namespaces: Namespaces::Only([a.to_string(), b.to_string()].into()),
        ..Scope::default()
    };
    let keys = [
        ("configmaps in a", key(a, "ConfigMap")),
        ("configmaps in b", key(b, "ConfigMap")),
        (
            "configmaps in a and b",
            InformerKey::new("", "v1", "ConfigMap", both),
        ),
        ("secrets in a", key(a, "Secret")),
    ];
    let mut watched: Vec<Watched> = keys
        .into_iter()
        .map(|(name, k)| {
            let sub = factory.subscribe(k, &[]).unwrap();
            Watched {
                name,
                informer: sub.informer().clone(),
                _sub: sub,
                must_hold: Vec::new(),
            }
        })
        .collect();
    for w in &watched {
        w.informer
            .wait_synced(Duration::from_secs(30))
            .await
            .unwrap();
    }

    // Four cuts, 3 s apart, each with a write the informers must pick up.
    let mut after_cuts = Vec::new();
    for _ in 0..4 {
        proxy.cut();
        let cut = Instant::now();
        let (ra, rb, rs) = (
            bump(&cms_a, "probe").await,
            bump(&cms_b, "probe").await,
            bump(&secrets_a, "probe").await,
        );
        set_expectations(&mut watched, a, b, ra, rb, rs);
        // Within 3 s, not counting the time the test's own writes took on a loaded server.
        let limit = Duration::from_secs(3) + cut.elapsed();
        let took = wait_all_current(&watched, cut, limit).await;
        after_cuts.push(*took.iter().max().unwrap());
        tokio::time::sleep_until(cut + Duration::from_secs(3)).await;
    }

    // A 15 s outage, with a write while it lasts.
    proxy.pause();
    let outage = Instant::now();
    let (ra, rb, rs) = (
        bump(&cms_a, "probe").await,
        bump(&cms_b, "probe").await,
        bump(&secrets_a, "probe").await,
    );
    wait_all_state(&watched, State::Degraded, Duration::from_secs(5)).await;
    let cut_off: Vec<_> = watched.iter().map(|w| w.informer.staleness()).collect();
    tokio::time::sleep_until(outage + Duration::from_secs(15)).await;
    let at_return: Vec<_> = watched.iter().map(|w| w.informer.staleness()).collect();

    // Back, and a write right after.
    proxy.resume();
    let back = Instant::now();
    set_expectations(&mut watched, a, b, ra, rb, rs);
    let (ra, rb, rs) = (
        bump(&cms_a, "probe").await,
        bump(&cms_b, "probe").await,
        bump(&secrets_a, "probe").await,
    );
    set_expectations(&mut watched, a, b, ra, rb, rs);
    let took = wait_all_current(&watched, back, RECOVERY_BOUND + back.elapsed()).await;

    eprintln!("reconnect: after each of 4 cuts, all current in {after_cuts:?}");
    for (i, w) in watched.iter().enumerate() {
        eprintln!(
            "reconnect: {:<22} current {:>5.0?} after a 15 s outage ended; staleness when cut off {:?}, at return {:?}, now {:?}; {:?}",
            w.name,
            took[i],
            cut_off[i],
            at_return[i],
            w.informer.staleness(),
            w.informer.stats()
        );
    }
    let worst = *took.iter().max().unwrap();
    eprintln!(
        "reconnect: every informer Synced and holding the outage's writes {worst:?} after connectivity returned (bound {RECOVERY_BOUND:?}); {} outage(s) ended",
        factory.connectivity().recoveries()
    );
    for s in &at_return {
        let silent = s
            .silent_for
            .expect("heard from the server before the outage");
        assert!(
            silent >= Duration::from_secs(14),
            "staleness shows the outage: {s:?}"
        );
    }
}

/// Records the writes each informer must hold: ConfigMaps in `a` at `ra`, in `b` at `rb`, the
/// Secret in `a` at `rs`.
fn set_expectations(watched: &mut [Watched], a: &str, b: &str, ra: u64, rb: u64, rs: u64) {
    let cm_a = (format!("{a}/probe"), ra);
    let cm_b = (format!("{b}/probe"), rb);
    for w in watched.iter_mut() {
        w.must_hold = match w.name {
            "configmaps in a" => vec![cm_a.clone()],
            "configmaps in b" => vec![cm_b.clone()],
            "configmaps in a and b" => vec![cm_a.clone(), cm_b.clone()],
            "secrets in a" => vec![(format!("{a}/probe"), rs)],
            other => unreachable!("{other}"),
        };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_apiserver_restart_the_cache_advances_within_about_2_s_of_the_server_being_ready()
{
    let _serial = common::faults_serial().await;
    let cp = common::faulty_control_plane();
    let admin = cp.admin_client();
    let ns = "reconnect-restart";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &cm("probe", &[]))
        .await
        .unwrap();

    // Through a proxy, so that an earlier outage can be staged: it leaves the reflector's
    // backoff grown (only a sync resets it, and resuming a watch is no sync), which is where a
    // restart used to leave the cache standing still long after the server was back.
    let proxy = Proxy::start(cp.server_addr()).await.unwrap();
    let client = kube::Client::try_from(proxy.config(&cp.admin_config())).unwrap();
    let factory = InformerFactory::new(client, Options::default());
    let sub = factory.subscribe(key(ns, "ConfigMap"), &[]).unwrap();
    let informer = sub.informer().clone();
    informer.wait_synced(Duration::from_secs(30)).await.unwrap();
    proxy.pause();
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.resume();
    let before = bump(&api, "probe").await;
    let mut watched = vec![Watched {
        name: "configmaps",
        informer: informer.clone(),
        _sub: sub,
        must_hold: vec![(format!("{ns}/probe"), before)],
    }];
    // Not the point here: an old backoff may take its time.
    wait_all(
        &watched,
        Watched::holds,
        Instant::now(),
        Duration::from_secs(40),
    )
    .await;

    let restarting = Instant::now();
    tokio::task::spawn_blocking(move || cp.restart_apiserver())
        .await
        .unwrap()
        .unwrap();
    // `restart_apiserver` returns once /readyz says ok (it polls every 100 ms).
    let ready = Instant::now();
    let written = bump(&api, "probe").await;
    let write_took = ready.elapsed();
    watched[0].must_hold = vec![(format!("{ns}/probe"), written)];
    // The bound does not count the write's own time (it may wait for the server's first answers).
    let took = wait_all(&watched, Watched::holds, ready, RECOVERY_BOUND + write_took).await[0];
    common::wait_state(&informer, State::Synced, Duration::from_secs(1)).await;
    eprintln!(
        "restart: apiserver down and back in {:?}; a write made {write_took:?} after it was ready was in the cache {took:?} after it was ready (bound {RECOVERY_BOUND:?}), so the cache stood still for {:?} in all; {:?}; {:?}",
        ready - restarting,
        ready - restarting + took,
        informer.staleness(),
        informer.stats()
    );
}
