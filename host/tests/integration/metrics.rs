//! `/metrics` as Prometheus reads it: a host reconciles a guest against the real API server,
//! one of its reconciles panics in the host's worker (the `fault-injection` feature), and the
//! endpoint's answer, parsed by a strict OpenMetrics parser, must hold the controller-runtime,
//! workqueue and process families with values that agree with what happened.

use crate::common;

use common::host::{SEEN, serve, stamped, supervisor_with};

use std::time::Duration;

use common::controllers::wait_annotation;
use common::namespace;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use openmetrics_parser::{
    HistogramValue, MetricsExposition, OpenMetricsType, OpenMetricsValue, Sample,
};
use reconciled::controller::{Settings, fault};
use reconciled::guest::grant::Grant;
use reconciled::supervisor::{Applied, Source};
use testenv::ControlPlane;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Exposition = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

/// GETs `/metrics` as a scraper does and returns the content type and the body. HTTP/1.0, so
/// the body is never chunked and ends when the connection closes.
async fn scrape(addr: std::net::SocketAddr) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: prometheus\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (content_type, body.to_owned())
}

fn parse(text: &str) -> Exposition {
    openmetrics_parser::openmetrics::parse_openmetrics(text)
        .unwrap_or_else(|e| panic!("not OpenMetrics: {e}\n{text}"))
}

/// Scrapes until the guest is idle (no worker busy, no key waiting) and its adds and reconciles
/// have not moved since the scrape before: a scrape reads its counters one after another, and
/// only a quiet host makes them agree exactly.
async fn quiet_scrape(addr: std::net::SocketAddr, guest: &str) -> (String, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut before = None;
    loop {
        let (content_type, text) = scrape(addr).await;
        let x = parse(&text);
        let queue = [("name", guest)];
        let depth: f64 = x.families["workqueue_depth"]
            .iter_samples()
            .map(|s| match &s.value {
                OpenMetricsValue::Gauge(g) => g.as_f64(),
                other => panic!("{other:?}"),
            })
            .sum();
        let busy = value(
            &x,
            "controller_runtime_active_workers",
            &[("controller", guest)],
        );
        let now = (
            value(&x, "workqueue_adds", &queue),
            histogram(
                &x,
                "controller_runtime_reconcile_time_seconds",
                &[("controller", guest)],
            )
            .count,
        );
        if depth == 0.0 && busy == 0.0 && before == Some(now) {
            return (content_type, text);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never quiet:\n{text}"
        );
        before = Some(now);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The one sample of `family` whose labels include all of `labels`.
fn sample<'a>(
    x: &'a Exposition,
    family: &str,
    labels: &[(&str, &str)],
) -> &'a Sample<OpenMetricsValue> {
    let f = x
        .families
        .get(family)
        .unwrap_or_else(|| panic!("no family {family}"));
    let matching: Vec<_> = f
        .iter_samples()
        .filter(|s| {
            let set = s.get_labelset().unwrap();
            labels
                .iter()
                .all(|(k, v)| set.get_label_value(k) == Some(*v))
        })
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{family}{labels:?}: {} samples match",
        matching.len()
    );
    matching[0]
}

/// The value of a counter or gauge sample.
fn value(x: &Exposition, family: &str, labels: &[(&str, &str)]) -> f64 {
    match &sample(x, family, labels).value {
        OpenMetricsValue::Counter(c) => c.value.as_f64(),
        OpenMetricsValue::Gauge(g) => g.as_f64(),
        other => panic!("{family} is not a counter or gauge: {other:?}"),
    }
}

fn histogram<'a>(x: &'a Exposition, family: &str, labels: &[(&str, &str)]) -> &'a HistogramValue {
    match &sample(x, family, labels).value {
        OpenMetricsValue::Histogram(h) => h,
        other => panic!("{family} is not a histogram: {other:?}"),
    }
}

/// A histogram's count, checked against its buckets: cumulative, the last (`+Inf`) equal to
/// the count.
fn consistent_count(h: &HistogramValue) -> u64 {
    let counts: Vec<f64> = h.buckets.iter().map(|b| b.count.as_f64()).collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{h:?}");
    let last = h.buckets.last().unwrap();
    assert_eq!(last.upper_bound, f64::INFINITY, "{h:?}");
    let count = h.count.unwrap();
    assert_eq!(last.count.as_f64(), count as f64, "{h:?}");
    assert!(h.sum.is_some_and(|s| s.as_f64() >= 0.0), "{h:?}");
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_openmetrics_and_agree_with_the_reconciles_done() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "metrics-scrape";
    namespace(&client, ns).await;
    let objects: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for name in ["a", "b", "c"] {
        objects
            .create(&PostParams::default(), &stamped(name, "1"))
            .await
            .unwrap();
    }
    let guest = "metrics-stamp";
    // The first reconcile of `a` panics in the host's worker: an error and a retry to count.
    fault::panic_worker(guest, &format!("{ns}/a"), 1);

    let sup = supervisor_with(&cp.admin_config(), None);
    let addr = serve(&sup).await;

    let settings = Settings {
        grant: Grant {
            namespaces: Some([ns.to_string()].into()),
            kinds: Some(["v1/ConfigMap".to_string()].into()),
            uncached_reads: false,
        },
        workers: 2,
        ..Settings::new(guest)
    };
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let applied = sup
        .apply(
            guest,
            Source::File("stamp_v1.wasm".into()),
            settings,
            module,
        )
        .await;
    assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");
    for name in ["a", "b", "c"] {
        wait_annotation(&objects, name, SEEN, Duration::from_secs(30), |v| {
            v == "v1:1"
        })
        .await;
    }
    // A change after the initial list: one more reconcile, of a user's edit.
    objects
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    wait_annotation(&objects, "b", SEEN, Duration::from_secs(30), |v| {
        v == "v1:2"
    })
    .await;

    let (content_type, text) = quiet_scrape(addr, guest).await;
    assert_eq!(
        content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "Prometheus picks its parser by this header"
    );
    let x = parse(&text);
    let controller = [("controller", guest)];
    let queue = [("name", guest)];

    // controller-runtime's families. Each object was reconciled at least once, `a` twice (the
    // panic, then its retry), `b` once more after the edit: at least five reconciles.
    let result = |r: &str| {
        value(
            &x,
            "controller_runtime_reconcile",
            &[("controller", guest), ("result", r)],
        )
    };
    let (success, error) = (result("success"), result("error"));
    assert!(success >= 4.0, "{text}");
    assert!(
        error >= 1.0,
        "the panic is an error, as controller-runtime counts one: {text}"
    );
    assert_eq!(
        (result("requeue"), result("requeue_after")),
        (0.0, 0.0),
        "stamp never requeues"
    );
    assert_eq!(
        value(&x, "controller_runtime_reconcile_errors", &controller),
        error
    );
    assert_eq!(
        value(&x, "controller_runtime_reconcile_panics", &controller),
        1.0
    );
    let reconciles = consistent_count(histogram(
        &x,
        "controller_runtime_reconcile_time_seconds",
        &controller,
    ));
    assert_eq!(
        reconciles as f64,
        success + error,
        "every finished reconcile is timed once: {text}"
    );
    assert_eq!(
        value(
            &x,
            "controller_runtime_max_concurrent_reconciles",
            &controller
        ),
        2.0
    );
    assert_eq!(
        value(&x, "controller_runtime_active_workers", &controller),
        0.0
    );

    // client-go's workqueue families.
    let adds = value(&x, "workqueue_adds", &queue);
    assert!(
        adds >= reconciles as f64,
        "every reconcile took a key that was added: {text}"
    );
    assert!(
        value(&x, "workqueue_retries", &queue) >= 1.0,
        "the panic was retried: {text}"
    );
    let waited = consistent_count(histogram(&x, "workqueue_queue_duration_seconds", &queue));
    let worked = consistent_count(histogram(&x, "workqueue_work_duration_seconds", &queue));
    assert_eq!(
        (waited, worked),
        (reconciles, reconciles),
        "each reconcile took a key once and handed it back once: {text}"
    );
    for priority in ["0", "-100"] {
        let depth = value(
            &x,
            "workqueue_depth",
            &[("name", guest), ("priority", priority)],
        );
        assert_eq!(depth, 0.0, "{text}");
    }
    assert_eq!(value(&x, "workqueue_unfinished_work_seconds", &queue), 0.0);
    assert_eq!(
        value(&x, "workqueue_longest_running_processor_seconds", &queue),
        0.0
    );

    // The process, and what only this host has.
    assert!(
        value(&x, "process_resident_memory_bytes", &[]) > 0.0,
        "{text}"
    );
    assert!(value(&x, "process_cpu_seconds", &[]) > 0.0, "{text}");
    assert!(value(&x, "process_open_fds", &[]) > 0.0, "{text}");
    assert!(
        value(&x, "process_start_time_seconds", &[]) > 1.5e9,
        "{text}"
    );
    assert_eq!(
        value(&x, "reconciled_guest_serving", &[("guest", guest)]),
        1.0
    );
    assert_eq!(
        value(&x, "reconciled_module_loads", &[("guest", guest)]),
        1.0
    );
    assert_eq!(
        value(
            &x,
            "reconciled_reconcile_errors",
            &[("guest", guest), ("blame", "host")]
        ),
        1.0,
        "a worker panic is the host's fault"
    );
    let info = sample(&x, "reconciled_guest", &[("guest", guest)]);
    assert_eq!(
        info.get_labelset().unwrap().get_label_value("source"),
        Some("file stamp_v1.wasm")
    );
    sup.shutdown().await;
}
