//! Decoding a LIST of ConfigMaps, four ways, on the same bytes from the loopback API server:
//! - reconciled's protobuf reader, to the store's objects (what the reflector does);
//! - k8s-pb's generated prost types, decode only (what a typed protobuf cache would start from,
//!   before any conversion to JSON);
//! - reconciled's JSON path, to the store's objects (what it did before);
//! - k8s-openapi's typed JSON decode (what kube-rs does).
//!
//! Usage: `protobuf_decode [OBJECTS] [ROUNDS]` (10000 and 7 by default). Each figure is the
//! median of the rounds, per object, with ratios against k8s-pb in the same run.

use std::time::Instant;

use anyhow::{Context, bail};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use prost::Message;
use reconciled::informer::discovery::Resource;
use reconciled::object::{Object, Transform};

/// Times `f` over `rounds`, returning the median seconds; `f` returns how many objects it made,
/// which must be `n`.
fn time(
    rounds: usize,
    n: usize,
    mut f: impl FnMut() -> anyhow::Result<usize>,
) -> anyhow::Result<f64> {
    let mut xs = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let got = f()?;
        xs.push(started.elapsed().as_secs_f64());
        if got != n {
            bail!("decoded {got} objects, not {n}");
        }
    }
    Ok(reconciled_bench::median(&mut xs))
}

async fn get(client: &kube::Client, ns: &str, accept: &str) -> anyhow::Result<Vec<u8>> {
    let req = http::Request::get(format!("/api/v1/namespaces/{ns}/configmaps"))
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::from(Vec::new()))?;
    let res = client.send(req).await?;
    if !res.status().is_success() {
        bail!("LIST answered {}", res.status());
    }
    Ok(res.into_body().collect().await?.to_bytes().to_vec())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .first()
        .map_or(Ok(10_000), |a| a.parse())
        .context("OBJECTS")?;
    let rounds: usize = args.get(1).map_or(Ok(7), |a| a.parse()).context("ROUNDS")?;
    let cp = testenv::ControlPlane::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let _in_runtime = rt.enter();
    let client = cp.admin_client();
    let ns = format!("decode-{n}");
    let (pb, js) = rt.block_on(async {
        reconciled_bench::fill(&client, &ns, n, |_| None).await?;
        let pb = get(&client, &ns, "application/vnd.kubernetes.protobuf").await?;
        let js = get(&client, &ns, "application/json").await?;
        anyhow::Ok((pb, js))
    })?;
    eprintln!(
        "{n} ConfigMaps: {} bytes as protobuf, {} as JSON",
        pb.len(),
        js.len()
    );
    let resource = Resource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        namespaced: true,
    };
    let t = Transform::default();

    let ours_pb = time(rounds, n, || {
        let objects = reconciled::informer::protobuf::decode_list(&resource, &pb, &t)
            .context("ConfigMaps are read as protobuf")??;
        Ok(objects.len())
    })?;
    let k8s_pb = time(rounds, n, || {
        let body = pb.strip_prefix(b"k8s\0").context("magic")?;
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(body)?;
        let list = k8s_pb::api::core::v1::ConfigMapList::decode(unknown.raw())?;
        Ok(list.items.len())
    })?;
    let ours_json = time(rounds, n, || {
        let mut page: serde_json::Value = serde_json::from_slice(&js)?;
        let items = page["items"].take();
        let serde_json::Value::Array(items) = items else {
            bail!("no items")
        };
        let objects: Vec<Object> = items
            .into_iter()
            .map(|i| Object::from_value(i, &t, Some(("v1", "ConfigMap"))))
            .collect::<Result<_, _>>()?;
        Ok(objects.len())
    })?;
    let typed_json = time(rounds, n, || {
        let list: k8s_openapi::List<ConfigMap> = serde_json::from_slice(&js)?;
        Ok(list.items.len())
    })?;

    println!("| decoder | µs per object | ratio to k8s-pb |");
    println!("|---|---|---|");
    for (name, s) in [
        ("reconciled, protobuf to the store's objects", ours_pb),
        ("k8s-pb (prost), decode only", k8s_pb),
        ("reconciled, JSON to the store's objects", ours_json),
        ("k8s-openapi, typed JSON decode", typed_json),
    ] {
        println!("| {name} | {:.2} | {:.2} |", s * 1e6 / n as f64, s / k8s_pb);
    }
    Ok(())
}
