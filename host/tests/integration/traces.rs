//! Traces in a real Jaeger (v1.75, built from Go modules by `testenv`): a `reconciled run`
//! process given `--otlp-endpoint` sends a span per reconcile, with the guest, key, revision,
//! outcome and the time waited for a slot, the API server and the host, and under it a span per
//! host call (the cache read, the API write with its status) and the guest's own spans (the
//! `trace` interface, from each SDK), found through Jaeger's query API.

use crate::common;

use std::time::{Duration, Instant};

use common::guests::wasm;
use common::host::TempDir;
use common::replica::Replica;
use common::wait::wait_guest;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use reconciled::ops::status::GuestState;
use serde_json::Value;

/// How long the generators may take to serve: their cold compiles (a Python guest's is 10 to
/// 20 s of CPU) on a loaded machine, two at a time. The wait ends once all serve.
const GENERATORS_SERVING: Duration = Duration::from_secs(300);

/// The configmap-generator example in each SDK's language (file stems from guests/build.sh):
/// each opens a span of its own, `apply copies`, with the number of copies.
const GENERATORS: [&str; 4] = [
    "configmap_generator",
    "configmap_generator_ts",
    "configmap_generator_py",
    "configmap_generator_go",
];

/// The tag `key` of a Jaeger span, as text.
fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["tags"].as_array()?.iter().find(|t| t["key"] == key)?["value"].as_str()
}

/// The spans of `trace` whose parent is `parent`'s span.
fn children<'a>(trace: &'a Value, parent: &Value) -> Vec<&'a Value> {
    let id = &parent["spanID"];
    trace["spans"]
        .as_array()
        .map(|spans| {
            spans
                .iter()
                .filter(|s| {
                    s["references"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|r| r["spanID"] == *id))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciles_trace_with_its_host_calls_and_the_guests_own_spans_is_found_in_jaeger() {
    let jaeger = tokio::task::spawn_blocking(testenv::jaeger::Jaeger::start)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let cp = testenv::ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "traces";
    common::namespace(&client, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.create(&PostParams::default(), &common::host::stamped("work", "1"))
        .await
        .unwrap();

    common::install_example_crd(cp).await;

    let dir = TempDir::new("traces");
    let config = dir.0.join("host.toml");
    let mut toml = format!(
        "[[guest]]\nname = \"traced\"\nmodule = \"{}\"\n[guest.grant]\nnamespaces = [\"{ns}\"]\n",
        wasm("stamp_v1").display()
    );
    for stem in GENERATORS {
        let gen_ns = generator_namespace(stem);
        common::namespace(&client, &gen_ns).await;
        toml.push_str(&format!(
            "\n[[guest]]\nname = \"{stem}\"\nmodule = \"{}\"\n[guest.grant]\nnamespaces = [\"{gen_ns}\"]\n",
            wasm(stem).display()
        ));
    }
    std::fs::write(&config, toml).unwrap();
    let mut host = Replica::new_stopped(cp, &dir.0, "traced", &config).await;
    // The generators are the suite's own guests: compiled once for every test that loads them,
    // not again here beside the other tests' work.
    host.share_compiled();
    // As a Deployment would set it (`--otlp-endpoint` does the same).
    host.env
        .push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), jaeger.otlp_endpoint()));
    host.env
        .push(("OTEL_SERVICE_NAME".into(), "reconciled-traces-test".into()));
    host.start_with(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::host::seen(&cms, "work").await.as_deref() != Some("v1:1") {
        assert!(
            Instant::now() < deadline,
            "the guest never stamped its ConfigMap"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Spans leave in batches: poll the query API until the reconcile that wrote is there.
    let path = "/api/traces?service=reconciled-traces-test&operation=reconcile&limit=50";
    let deadline = Instant::now() + Duration::from_secs(30);
    let (trace, reconcile) = loop {
        let found = jaeger.get(path).and_then(|(status, body)| {
            assert_eq!(status, 200, "{body}");
            let doc: Value = serde_json::from_str(&body).unwrap();
            doc["data"].as_array()?.iter().find_map(|trace| {
                let reconcile = trace["spans"].as_array()?.iter().find(|s| {
                    s["operationName"] == "reconcile"
                        && tag(s, "guest") == Some("traced")
                        && tag(s, "key") == Some("traces/work")
                        && children(trace, s)
                            .iter()
                            .any(|c| c["operationName"] == "api")
                })?;
                Some((trace.clone(), reconcile.clone()))
            })
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no reconcile of traces/work with an API call in Jaeger after 30 s; Jaeger's log:\n{}",
            jaeger.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let calls = children(&trace, &reconcile);
    let names: Vec<&str> = calls
        .iter()
        .filter_map(|c| c["operationName"].as_str())
        .collect();
    eprintln!(
        "reconcile span {:?} with children {names:?}",
        reconcile["tags"]
    );
    assert_eq!(tag(&reconcile, "outcome"), Some("success"));
    assert_eq!(tag(&reconcile, "blame"), None, "a success blames no one");
    for waited in ["slot_wait_ms", "api_wait_ms", "host_wait_ms"] {
        let ms = reconcile["tags"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["key"] == waited))
            .and_then(|t| t["value"].as_f64());
        assert!(ms.is_some_and(|ms| ms >= 0.0), "{waited} on {reconcile}");
    }
    assert!(
        tag(&reconcile, "digest").is_some_and(|d| !d.is_empty()),
        "the revision's digest"
    );
    let cache = calls
        .iter()
        .find(|c| c["operationName"] == "cache")
        .expect("the guest's cache read");
    assert_eq!(tag(cache, "call"), Some("get"));
    let write = calls
        .iter()
        .find(|c| c["operationName"] == "api" && tag(c, "method") == Some("PATCH"))
        .expect("the guest's patch");
    assert_eq!(tag(write, "status"), Some("ok"));
    assert!(
        tag(write, "path").is_some_and(|p| p.ends_with("/namespaces/traces/configmaps/work")),
        "{write}"
    );

    // The guests' own spans: one generator in each language, each reconcile with its span.
    // Each generator must serve first: a cold compile of the Python one alone takes a minute of
    // a loaded machine, and the 90 s for its span start once it serves.
    let deadline = Instant::now() + GENERATORS_SERVING;
    for stem in GENERATORS {
        let left = deadline.saturating_duration_since(Instant::now());
        wait_guest(host.addr, stem, left, |g| g.state == GuestState::Serving).await;
    }
    let gvk = GroupVersionKind::gvk("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator");
    for stem in GENERATORS {
        let generators = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &generator_namespace(stem),
            &ApiResource::from_gvk(&gvk),
        );
        let generator: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.reconciled.dev/v1alpha1", "kind": "ConfigMapGenerator",
            "metadata": {"name": "spans"},
            "spec": {"copies": 2, "data": {"greeting": "hello"}}
        }))
        .unwrap();
        generators
            .create(&PostParams::default(), &generator)
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<&str> = GENERATORS.to_vec();
    while !missing.is_empty() {
        missing.retain(|stem| {
            let path =
                "/api/traces?service=reconciled-traces-test&operation=apply%20copies&limit=100";
            let found = jaeger.get(path).is_some_and(|(status, body)| {
                assert_eq!(status, 200, "{body}");
                let doc: Value = serde_json::from_str(&body).unwrap();
                doc["data"].as_array().is_some_and(|traces| {
                    traces
                        .iter()
                        .any(|trace| guest_span_under_reconcile(trace, stem))
                })
            });
            !found
        });
        assert!(
            Instant::now() < deadline || missing.is_empty(),
            "no `apply copies` span under a reconcile of {missing:?} in Jaeger after 90 s; Jaeger's log:\n{}",
            jaeger.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Where the generator built as `stem` runs.
fn generator_namespace(stem: &str) -> String {
    format!("traces-{}", stem.replace('_', "-"))
}

/// Whether `trace` holds a reconcile of guest `stem` whose children include its own span
/// `apply copies`, with the guest named and the two copies it applies.
fn guest_span_under_reconcile(trace: &Value, stem: &str) -> bool {
    let Some(spans) = trace["spans"].as_array() else {
        return false;
    };
    spans
        .iter()
        .filter(|s| s["operationName"] == "reconcile" && tag(s, "guest") == Some(stem))
        .any(|reconcile| {
            children(trace, reconcile).iter().any(|c| {
                c["operationName"] == "apply copies"
                    && tag(c, "guest") == Some(stem)
                    && tag(c, "copies") == Some("2")
            })
        })
}
