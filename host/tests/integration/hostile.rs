//! Hostile guests against the real apiserver: every import called with names, namespaces, kinds
//! and bodies a tenant might send, declarations Kubernetes could not serve, and a `map` answer of
//! 10 000 requests. The guest is `guests/hostile` (see its crate docs for what each name prefix
//! and build does); it reports by annotation.

use crate::common;

use std::time::Duration;

use common::controllers::{start, wait_annotation};
use common::{cm, namespace};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use reconciled::controller::{self, Settings};
use reconciled::guest::grant::Grant;
use testenv::ControlPlane;

const RESULT: &str = "hostile.reconciled.dev/result";

/// One worker (so a worker lost to a panic would stop every later reconcile), uncached reads
/// granted (so the `api` import is exercised too), confined to `ns`.
fn settings(name: &str, ns: &str) -> Settings {
    Settings {
        grant: Grant {
            uncached_reads: true,
            ..Grant::namespaces([ns])
        },
        workers: 1,
        ..Settings::new(name)
    }
}

async fn result(api: &Api<ConfigMap>, name: &str) -> String {
    wait_annotation(api, name, RESULT, Duration::from_secs(60), |_| true).await
}

/// Every line logged during a reconcile names the guest, the key and the module serving it (the
/// reconcile's span), the guest's own lines included: the SDKs promise that a log line names its
/// request. The hostile guest's battery ends by logging text that tries to forge a host line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_line_a_guest_logs_names_its_guest_key_and_module() {
    common::logs::capture();
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "hostile-logs";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &cm("calls-1", &[]))
        .await
        .unwrap();
    let (c, _f, _r) = start(admin.clone(), "hostile_calls", settings("hostile-logs", ns))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    result(&api, "calls-1").await;
    // The span's first fields; the waits it records for traces follow them.
    let span = format!(
        "reconcile{{guest=hostile-logs key={ns}/calls-1 digest={} ",
        c.digest()
    );
    let line = common::logs::line_with(&[&span, "forged"]);
    let line = line.unwrap_or_else(|| panic!("no guest line in the span {span}"));
    assert!(line.contains(" guest: "), "the guest's own line: {line}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_call_is_a_typed_error_and_the_guest_then_reconciles_normally() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "hostile-calls";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &cm("calls-1", &[]))
        .await
        .unwrap();
    let (c, _f, _r) = start(
        admin.clone(),
        "hostile_calls",
        settings("hostile-calls", ns),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();

    let table = result(&api, "calls-1").await;
    let mut wrong = Vec::new();
    let mut calls = 0;
    for line in table.lines() {
        let [got, expected, call] = line.splitn(3, '\t').collect::<Vec<_>>()[..] else {
            panic!("not a result line: {line:?}");
        };
        calls += 1;
        // Every call in the battery is bad input: a typed error, never `ok`, never `other`.
        assert!(
            !matches!(expected, "ok" | "other"),
            "the guest expects {expected} for {call}"
        );
        if got != expected {
            wrong.push(format!("{call}: got {got}, expected {expected}"));
        }
    }
    assert!(calls > 250, "only {calls} calls recorded:\n{table}");
    assert!(
        wrong.is_empty(),
        "{} of {calls} calls got the wrong answer:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(c.last_error(&format!("{ns}/calls-1")), None);
    assert_eq!(c.snapshot().traps, 0, "{:?}", c.snapshot());

    // Nothing hostile landed: no object (but the namespace's CA bundle, if a controller manager
    // publishes one), no Event.
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    assert_eq!(names, ["calls-1"]);
    let events = Api::<Event>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(events.items.is_empty(), "{:?}", events.items);

    // The same guest, with its one worker, reconciles its next key normally.
    api.create(&PostParams::default(), &cm("normal-1", &[]))
        .await
        .unwrap();
    assert_eq!(result(&api, "normal-1").await, "seen");
    eprintln!("hostile calls: {calls} typed errors; {:?}", c.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_refused_as_too_large_spends_none_of_the_byte_budget() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "hostile-budget";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    // Three of about 950 KB: together past the 2 MiB budget, one well inside it.
    let blob = "b".repeat(950_000);
    for i in 0..3 {
        let mut filler = cm(&format!("filler-{i}"), &[("blob", &blob)]);
        filler.metadata.labels = Some(
            [(
                "hostile.reconciled.dev/filler".to_string(),
                "yes".to_string(),
            )]
            .into(),
        );
        api.create(&PostParams::default(), &filler).await.unwrap();
    }
    api.create(&PostParams::default(), &cm("budget-1", &[]))
        .await
        .unwrap();
    let mut s = settings("hostile-budget", ns);
    s.limits.bytes_out = 2 << 20;
    let (_c, _f, _r) = start(admin.clone(), "hostile_calls", s)
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    // cache list refused, cache get of one filler fine, api list refused, api get fine.
    assert_eq!(result(&api, "budget-1").await, "too-large,ok,too-large,ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_event_keeps_its_reason_and_its_message_is_cut_at_a_char_boundary() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "hostile-events";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    // 1201 bytes, of two-byte characters after the first: a cut at byte 1020 would split one.
    let message = format!("x{}", "é".repeat(600));
    api.create(
        &PostParams::default(),
        &cm("event-1", &[("message", &message)]),
    )
    .await
    .unwrap();
    let (_c, _f, _r) = start(
        admin.clone(),
        "hostile_calls",
        settings("hostile-events", ns),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
    assert_eq!(result(&api, "event-1").await, "ok");

    let events = Api::<Event>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let [event] = &events[..] else {
        panic!("expected one Event: {events:?}");
    };
    assert_eq!(event.reason.as_deref(), Some("HostileCheck"));
    assert_eq!(event.involved_object.name.as_deref(), Some("event-1"));
    let stored = event.message.as_deref().unwrap_or_default();
    assert!(stored.len() <= 1024, "{} bytes", stored.len());
    let kept = stored
        .strip_suffix(" ...")
        .expect("cut messages end with \" ...\"");
    assert!(
        message.starts_with(kept),
        "the kept part is the guest's own"
    );
    assert_eq!(
        kept.len(),
        1019,
        "cut back from 1020 to the character boundary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_declarations_are_refused_at_load_naming_the_bad_value() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    for (wasm, value) in [
        ("hostile_bad_namespace", "team-a/../team-b"),
        ("hostile_bad_kind", "a/b"),
        ("hostile_bad_selector", "a in ("),
        ("hostile_bad_index", "spec..name"),
    ] {
        // A tenant's grant: before, the namespace was "advice" to grant it.
        let s = settings(wasm, "hostile-describe");
        let Err((err, factory)) = start(admin.clone(), wasm, s).await else {
            panic!("{wasm} was loaded");
        };
        let message = err.to_string();
        assert!(
            matches!(err, controller::Error::Invalid { .. }),
            "{wasm}: {err:?}"
        );
        assert!(
            message.contains(&format!("{value:?}")) && message.contains("is not valid"),
            "{wasm}: the rejection names the value: {message}"
        );
        assert!(!message.contains("add "), "{wasm}: no advice: {message}");
        assert!(
            factory.active().is_empty(),
            "{wasm}: no informer was started for it"
        );
        eprintln!("{wasm}: {message}");
    }
}

fn secret_for(name: &str, primary: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(
                [(
                    "hostile.reconciled.dev/for".to_string(),
                    primary.to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_answer_of_ten_thousand_hostile_requests_queues_only_the_valid_one() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "hostile-map";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let secrets = Api::<Secret>::namespaced(admin.clone(), ns);
    for name in ["mapped-1", "mapped-2"] {
        api.create(&PostParams::default(), &cm(name, &[]))
            .await
            .unwrap();
    }
    let (c, _f, _r) = start(admin.clone(), "hostile_map", settings("hostile-map", ns))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    let wait = async |name: &str, want: &str| {
        wait_annotation(&api, name, RESULT, Duration::from_secs(30), |v| v == want).await
    };
    wait("mapped-1", "secrets:0").await;
    wait("mapped-2", "secrets:0").await;
    let before = c
        .counters()
        .started
        .load(std::sync::atomic::Ordering::Relaxed);

    // Each Secret's `map` answers its primary first, then 9 999 requests that can never be
    // reconciled. The count can only move if the valid one was queued.
    secrets
        .create(&PostParams::default(), &secret_for("s-1", "mapped-1"))
        .await
        .unwrap();
    wait("mapped-1", "secrets:1").await;
    // The handler survived the first answer and maps the next.
    secrets
        .create(&PostParams::default(), &secret_for("s-2", "mapped-2"))
        .await
        .unwrap();
    wait("mapped-2", "secrets:1").await;

    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = c
        .counters()
        .started
        .load(std::sync::atomic::Ordering::Relaxed)
        - before;
    assert!(
        started <= 10,
        "{started} reconciles for two Secrets: hostile keys were queued"
    );
    let snapshot = c.snapshot();
    assert_eq!((snapshot.queued, snapshot.traps), (0, 0), "{snapshot:?}");
}

/// Two guests spinning on both of the runtime's workers, each until its 30 s deadline: the
/// host's sockets are still read within milliseconds. A guest used to yield by waking itself,
/// which tokio runs again at once, and a worker that always has a task polls its sockets only
/// every 61 polls: 300 ms for each read with guests spinning 5 ms a poll, which stalled
/// informers and Lease renewals under CPU-bound guests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_guests_on_every_worker_do_not_starve_the_hosts_sockets() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "hostile-spin";
    namespace(&client, ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &common::host::stamped("spin", "1"))
        .await
        .unwrap();
    // Two guests, each alone in its fair share (which gives one guest one slot of two), so that
    // two reconciles spin at once.
    let gate = reconciled::controller::gate::Gate::open();
    let mut spinners = Vec::new();
    for name in ["spinner-a", "spinner-b"] {
        let mut settings = Settings {
            grant: Grant::namespaces([ns]),
            ..Settings::new(name)
        };
        settings.limits.deadline = Duration::from_secs(30);
        let started =
            common::controllers::start_gated(client.clone(), "stamp_spin", settings, gate.clone());
        spinners.push(started.await.unwrap());
    }
    common::wait::wait_until("both guests spin", Duration::from_secs(20), || {
        gate.running() == 2
    })
    .await;

    let echo = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 16];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut trips = Vec::new();
    for i in 0..20u8 {
        let sent = std::time::Instant::now();
        socket.send_to(&[i], echo_addr).await.unwrap();
        let mut buf = [0u8; 16];
        let (n, _) = tokio::time::timeout(Duration::from_secs(10), socket.recv_from(&mut buf))
            .await
            .expect("an echo within 10 s")
            .unwrap();
        assert_eq!(&buf[..n], &[i]);
        trips.push(sent.elapsed());
    }
    assert_eq!(gate.running(), 2, "the guests spun throughout");
    trips.sort();
    let median = trips[trips.len() / 2];
    assert!(
        median < Duration::from_millis(100),
        "a loopback round trip took {median:?} (median of 20) with guests spinning: {trips:?}"
    );
    for (controller, _, _) in spinners {
        controller.stop().await;
    }
}
