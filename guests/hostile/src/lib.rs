//! A test guest for the host's hardening tests: it calls every import with what a hostile tenant
//! might send, and records which error case each call got. The request's name prefix picks a
//! behaviour.
//!
//! It reconciles v1 ConfigMaps in every granted namespace and reports by merge-patching the
//! annotation [`RESULT`] on the reconciled ConfigMap.
//!
//! | name prefix | behaviour                                                                     |
//! |-------------|-------------------------------------------------------------------------------|
//! | `calls-`    | every import with hostile names, namespaces, kinds and bodies (below); once   |
//! | `budget-`   | pages through ConfigMaps labelled [`FILLER`] (cache, then api), then reads `filler-0` after each refused page |
//! | `event-`    | records an Event on itself with reason `HostileCheck` and data `message`      |
//! | `mapped-`   | records `secrets:<n>`: the Secrets in its namespace annotated [`FOR`] with its name |
//! | `escalate-` | tries what a tenant should not get through the host (below); once             |
//! | anything else | records `seen`                                                              |
//!
//! `calls-` records one line per call, `<got>\t<expected>\t<call>`, where `got` and `expected`
//! are error cases as the WIT spells them (`invalid`, `too-large`, `not-declared`) or `ok`, and
//! `call` says what was called with what (Debug-quoted, shortened). Every call in it is bad
//! input: `expected` is never `ok` or `other`. The log import answers nothing; it is called with
//! hostile text before the results are written, so a trap there shows as no result at all.
//! `calls-` and `event-` have side effects (a 10 MB allocation per body, an Event), so they run
//! once: when the annotation is there they do nothing.
//!
//! `escalate-` (in the `escalate` variant, which declares the kinds) deletes the Deployment named
//! by data `deployment`, reads the Secret named by data `secret` uncached, and creates a
//! RoleBinding `escalated` of the Role named by data `role` to the ServiceAccount named by data
//! `subject`, all in its own namespace. It records one line per call,
//! `<call>\t<case>\t<message>` (`ok` and no message on success; never the Secret's content).
//!
//! `budget-` records `<cache list>,<cache get>,<api list>,<api get>` as cases; with a byte budget
//! smaller than the filler ConfigMaps together but larger than one, a host that charges what it
//! delivers answers `too-large,ok,too-large,ok`.
//!
//! Each cargo feature builds a variant (`guests/build.sh` copies each to its own file):
//!
//! | feature             | file                        | `describe()` / `map()` answers              |
//! |---------------------|-----------------------------|---------------------------------------------|
//! | (none)              | `hostile_calls.wasm`        | ConfigMaps, every granted namespace         |
//! | `map`               | `hostile_map.wasm`          | also watches Secrets via `map`, which answers 10 000 requests, one valid |
//! | `describe-namespace`| `hostile_bad_namespace.wasm`| namespace `team-a/../team-b`                |
//! | `describe-kind`     | `hostile_bad_kind.wasm`     | owns a kind named `a/b`                     |
//! | `describe-selector` | `hostile_bad_selector.wasm` | label selector `a in (`                     |
//! | `describe-index`    | `hostile_bad_index.wasm`    | field index `spec..name` on ConfigMaps      |
//! | `escalate`          | `hostile_escalate.wasm`     | also owns Deployments, Secrets, RoleBindings |

use reconciled_guest::bindings::reconciled::runtime::client::{ApplyPatch, PatchBody};
use reconciled_guest::bindings::reconciled::runtime::log::Level;
use reconciled_guest::bindings::reconciled::runtime::{api, cache, client, log, trace};
use reconciled_guest::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use reconciled_guest::serde_json::{self, Value, json};
use reconciled_guest::{
    Description, Error, EventType, Gvk, Kind, ListOptions, Outcome, Reconciler, Request, Result,
    describe,
};

/// The annotation the guest reports in.
const RESULT: &str = "hostile.reconciled.dev/result";
/// On a Secret: the ConfigMap it belongs to (for `map`).
const FOR: &str = "hostile.reconciled.dev/for";
/// The label of the big ConfigMaps `budget-` pages through.
const FILLER: &str = "hostile.reconciled.dev/filler=yes";

/// The namespace given to the variants that refuse a hostile declaration.
const BAD_NAMESPACE: &str = "team-a/../team-b";

struct Hostile;

impl Reconciler for Hostile {
    fn describe() -> Description {
        let mut d = describe::<ConfigMap>();
        if cfg!(feature = "describe-namespace") {
            d = d.namespaces([BAD_NAMESPACE]);
        }
        if cfg!(feature = "describe-selector") {
            d = d.label_selector("a in (");
        }
        if cfg!(feature = "describe-index") {
            d = d.field_index::<ConfigMap>("spec..name");
        }
        if cfg!(feature = "map") {
            d = d.watches_guest_map::<Secret>();
        }
        if cfg!(feature = "escalate") {
            d = d
                .owns_gvk(gvk("apps", "v1", "Deployment"))
                .owns_gvk(gvk("", "v1", "Secret"))
                .owns_gvk(gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"));
        }
        let mut description = d.build();
        if cfg!(feature = "describe-kind") {
            description.owns.push(gvk("", "v1", "a/b"));
        }
        description
    }

    fn map(_kind: Gvk, object: String) -> Vec<Request> {
        let Ok(secret) = serde_json::from_str::<Value>(&object) else {
            return Vec::new();
        };
        let namespace = secret["metadata"]["namespace"].as_str().unwrap_or_default();
        let Some(target) = secret["metadata"]["annotations"][FOR].as_str() else {
            return Vec::new();
        };
        hostile_map(namespace, target)
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let name = req.name.as_str();
        let Some(cm) = get_json(&req)? else {
            return Ok(Outcome::Done);
        };
        let done = cm["metadata"]["annotations"][RESULT].is_string();
        let result = if name.starts_with("calls-") {
            if done {
                return Ok(Outcome::Done);
            }
            calls(&req)
        } else if name.starts_with("budget-") {
            budget(&req)
        } else if name.starts_with("event-") {
            if done {
                return Ok(Outcome::Done);
            }
            let message = cm["data"]["message"].as_str().unwrap_or_default();
            case_of(client::record_event(
                &ConfigMap::gvk(),
                &req.namespace,
                &req.name,
                EventType::Normal,
                "HostileCheck",
                message,
            ))
            .to_string()
        } else if name.starts_with("mapped-") {
            mapped_secrets(&req)?
        } else if name.starts_with("escalate-") {
            if done {
                return Ok(Outcome::Done);
            }
            escalate(&req, &cm)
        } else {
            "seen".to_string()
        };
        record(&req, &cm, &result)
    }
}

reconciled_guest::export_reconciler!(Hostile);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
    }
}

/// The ConfigMap being reconciled, or `None` if it is gone.
fn get_json(req: &Request) -> Result<Option<Value>> {
    match cache::get(&ConfigMap::gvk(), &req.namespace, &req.name) {
        Ok(json) => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| Error::Other(format!("hostile: the host's ConfigMap is not JSON: {e}"))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `result` into the annotation, only when it changes (so reconciles converge).
fn record(req: &Request, cm: &Value, result: &str) -> Result<Outcome> {
    if cm["metadata"]["annotations"][RESULT].as_str() == Some(result) {
        return Ok(Outcome::Done);
    }
    let patch = json!({ "metadata": { "annotations": { RESULT: result } } });
    client::patch(
        &ConfigMap::gvk(),
        &req.namespace,
        &req.name,
        &PatchBody::Merge(patch.to_string()),
    )?;
    Ok(Outcome::Done)
}

/// What a tenant should get only if its own ServiceAccount may: one line per call.
fn escalate(req: &Request, cm: &Value) -> String {
    let data = |k: &str| cm["data"][k].as_str().unwrap_or_default().to_string();
    let ns = req.namespace.as_str();
    let line = |call: &str, r: Result<()>| match r {
        Ok(()) => format!("{call}\tok\t"),
        Err(e) => format!("{call}\t{}\t{}", e.case(), e.message()),
    };
    let binding = json!({
        "metadata": {"name": "escalated"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": data("role")},
        "subjects": [{"kind": "ServiceAccount", "name": data("subject"), "namespace": ns}],
    });
    [
        line(
            "delete-deployment",
            client::delete(&gvk("apps", "v1", "Deployment"), ns, &data("deployment")),
        ),
        // The Secret's content never goes into the result.
        line(
            "get-secret",
            api::get(&gvk("", "v1", "Secret"), ns, &data("secret")).map(|_| ()),
        ),
        line(
            "create-rolebinding",
            client::create(
                &gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
                ns,
                &binding.to_string(),
            )
            .map(|_| ()),
        ),
    ]
    .join("\n")
}

/// The WIT case of an answer, or `ok`.
fn case_of<T>(r: Result<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.case(),
    }
}

/// `s` for a result line: Debug-quoted, at most 24 characters of it.
fn short(s: &str) -> String {
    if s.chars().count() <= 24 {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(24).collect();
        format!("{head:?}…({} bytes)", s.len())
    }
}

/// Collects one line per call.
#[derive(Default)]
struct Table(Vec<String>);

impl Table {
    fn check<T>(&mut self, call: &str, expected: &str, r: Result<T>) {
        self.0.push(format!("{}\t{expected}\t{call}", case_of(r)));
    }
}

/// Object names Kubernetes refuses for a ConfigMap (a DNS-1123 subdomain kind).
fn bad_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "", ".", "..", "/", "a/b", "%2F", "a%2Fb", "a<b", "a>b", "a`b", "a\"b", "a\0b", "a\nb",
        "a b", "A",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("a".repeat(254));
    names
}

/// Namespace names Kubernetes refuses (a DNS-1123 label each), but not the empty one, which a
/// list may pass.
fn bad_namespaces() -> Vec<String> {
    let mut names: Vec<String> = [
        "..",
        "a/b",
        "%2F",
        "a<b",
        "a\0b",
        "a\nb",
        "A",
        "team-a/../team-b",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("n".repeat(300));
    names
}

/// Bodies no object may be: (label, body, expected case). Borrowed, so that the 10 MB one is
/// not copied more than each call needs (the guest's memory is capped at 64 MiB).
fn bad_bodies(ten_mb: &str) -> [(&'static str, &str, &'static str); 5] {
    [
        ("empty", "", "invalid"),
        ("not JSON", "{\"metadata\":", "invalid"),
        ("a raw NUL", "{\"a\":\"\0\"}", "invalid"),
        ("an array", "[]", "invalid"),
        ("10 MB", ten_mb, "too-large"),
    ]
}

/// Every import, called with hostile input; one line per call.
fn calls(req: &Request) -> String {
    let ns = req.namespace.as_str();
    let cm = ConfigMap::gvk();
    let mut t = Table::default();
    let ten_mb = format!("{{\"data\":{{\"x\":\"{}\"}}}}", "x".repeat(10 << 20));

    // Kinds that were never declared, or cannot exist.
    for kind in [
        gvk("", "v1", "a/b"),
        gvk("", "", ""),
        gvk("a/b", "v1", "ConfigMap"),
    ] {
        let label = format!("{}/{}/{}", kind.group, kind.version, kind.kind);
        t.check(
            &format!("cache.get kind={}", short(&label)),
            "not-declared",
            cache::get(&kind, ns, "x"),
        );
        t.check(
            &format!("client.delete kind={}", short(&label)),
            "not-declared",
            client::delete(&kind, ns, "x"),
        );
    }

    for name in bad_names() {
        let n = short(&name);
        t.check(
            &format!("cache.get name={n}"),
            "invalid",
            cache::get(&cm, ns, &name),
        );
        t.check(
            &format!("client.delete name={n}"),
            "invalid",
            client::delete(&cm, ns, &name),
        );
        t.check(
            &format!("client.patch(merge) name={n}"),
            "invalid",
            client::patch(&cm, ns, &name, &PatchBody::Merge("{}".into())),
        );
        t.check(
            &format!("client.patch(json) name={n}"),
            "invalid",
            client::patch(&cm, ns, &name, &PatchBody::Json("[]".into())),
        );
        t.check(
            &format!("client.patch(apply) name={n}"),
            "invalid",
            client::patch(&cm, ns, &name, &apply("{}", "hostile")),
        );
        t.check(
            &format!("client.patch-status(apply) name={n}"),
            "invalid",
            client::patch_status(&cm, ns, &name, &apply("{}", "hostile")),
        );
        let named = json!({"metadata": {"name": name}}).to_string();
        t.check(
            &format!("client.create name={n}"),
            "invalid",
            client::create(&cm, ns, &named),
        );
        t.check(
            &format!("client.update name={n}"),
            "invalid",
            client::update(&cm, ns, &named),
        );
        t.check(
            &format!("client.update-status name={n}"),
            "invalid",
            client::update_status(&cm, ns, &named),
        );
        t.check(
            &format!("client.record-event name={n}"),
            "invalid",
            client::record_event(&cm, ns, &name, EventType::Warning, "HostileCheck", "x"),
        );
        t.check(
            &format!("api.get name={n}"),
            "invalid",
            api::get(&cm, ns, &name),
        );
    }

    let mut namespaces = bad_namespaces();
    namespaces.push(String::new());
    for namespace in &namespaces {
        let n = short(namespace);
        t.check(
            &format!("cache.get ns={n}"),
            "invalid",
            cache::get(&cm, namespace, "x"),
        );
        t.check(
            &format!("client.delete ns={n}"),
            "invalid",
            client::delete(&cm, namespace, "x"),
        );
        t.check(
            &format!("client.create ns={n}"),
            "invalid",
            client::create(&cm, namespace, "{\"metadata\":{\"name\":\"x\"}}"),
        );
        t.check(
            &format!("client.record-event ns={n}"),
            "invalid",
            client::record_event(&cm, namespace, "x", EventType::Normal, "HostileCheck", "x"),
        );
        t.check(
            &format!("api.get ns={n}"),
            "invalid",
            api::get(&cm, namespace, "x"),
        );
    }
    for namespace in bad_namespaces() {
        let n = short(&namespace);
        let options = ListOptions::new().in_namespace(namespace.as_str());
        t.check(
            &format!("cache.list ns={n}"),
            "invalid",
            cache::list(&cm, &options),
        );
        t.check(
            &format!("api.list ns={n}"),
            "invalid",
            api::list(&cm, &options),
        );
    }

    for (label, body, expected) in bad_bodies(&ten_mb) {
        t.check(
            &format!("client.create body={label}"),
            expected,
            client::create(&cm, ns, body),
        );
        t.check(
            &format!("client.update body={label}"),
            expected,
            client::update(&cm, ns, body),
        );
        t.check(
            &format!("client.update-status body={label}"),
            expected,
            client::update_status(&cm, ns, body),
        );
        t.check(
            &format!("client.patch(merge) body={label}"),
            expected,
            client::patch(&cm, ns, &req.name, &PatchBody::Merge(body.to_string())),
        );
        t.check(
            &format!("client.patch(apply) body={label}"),
            expected,
            client::patch(&cm, ns, &req.name, &apply(body, "hostile")),
        );
        t.check(
            &format!("client.patch-status(apply) body={label}"),
            expected,
            client::patch_status(&cm, ns, &req.name, &apply(body, "hostile")),
        );
        // A JSON patch is an array: `[]` is a valid one, and an object stands in for the wrong
        // shape.
        let json_body = if body == "[]" { "{}" } else { body };
        t.check(
            &format!("client.patch(json) body={label}"),
            expected,
            client::patch(&cm, ns, &req.name, &PatchBody::Json(json_body.to_string())),
        );
    }
    t.check(
        "client.update body=no metadata.name",
        "invalid",
        client::update(&cm, ns, "{\"data\":{}}"),
    );
    t.check(
        "client.create body=another namespace",
        "invalid",
        client::create(
            &cm,
            ns,
            "{\"metadata\":{\"name\":\"x\",\"namespace\":\"kube-system\"}}",
        ),
    );

    for manager in ["", "a\nb", "a\0b", &"m".repeat(129)] {
        t.check(
            &format!("client.patch(apply) field-manager={}", short(manager)),
            "invalid",
            client::patch(&cm, ns, &req.name, &apply("{}", manager)),
        );
    }

    for reason in [
        "",
        "lowercase",
        "Has Space",
        "Nul\0",
        "New\nLine",
        &"R".repeat(129),
    ] {
        t.check(
            &format!("client.record-event reason={}", short(reason)),
            "invalid",
            client::record_event(&cm, ns, &req.name, EventType::Warning, reason, &ten_mb),
        );
    }

    for selector in ["a in (", "a=b\0", "<", "a=b,", &"k".repeat(300)] {
        let options = ListOptions::new().in_namespace(ns).labels(selector);
        let s = short(selector);
        t.check(
            &format!("cache.list labels={s}"),
            "invalid",
            cache::list(&cm, &options),
        );
        t.check(
            &format!("api.list labels={s}"),
            "invalid",
            api::list(&cm, &options),
        );
    }
    for field in ["", "a b", "a,b", "a=b", "a..b", "a\0"] {
        let options = ListOptions::new().in_namespace(ns).field(field, "x");
        let f = short(field);
        t.check(
            &format!("cache.list field={f}"),
            "invalid",
            cache::list(&cm, &options),
        );
        t.check(
            &format!("api.list field={f}"),
            "invalid",
            api::list(&cm, &options),
        );
    }
    // Past the 64 KiB a URL may hold: the host must answer, not fail to build the request.
    let options = ListOptions::new()
        .in_namespace(ns)
        .continue_from("c".repeat(100_000));
    t.check(
        "api.list continue=100 KB",
        "invalid",
        api::list(&cm, &options),
    );

    for text in ["a\0b", "forged\nline", &"l".repeat(10 << 20)] {
        log::log(Level::Warn, text);
    }
    // Spans: a 10 MB name, key, value and error, handles that name nothing, and more spans than
    // a call may open. Nothing of it may trap or fail the reconcile.
    let big = "s".repeat(10 << 20);
    let span = trace::open(&big);
    trace::set_attribute(span, &big, &big);
    for unknown in [0, 7_777, u32::MAX] {
        trace::set_attribute(unknown, "k", "v");
        trace::close(unknown, Some("forged\nline"));
    }
    for _ in 0..100 {
        trace::open("one too many");
    }
    trace::close(span, Some(&big));
    t.0.join("\n")
}

fn apply(body: &str, field_manager: &str) -> PatchBody {
    PatchBody::Apply(ApplyPatch {
        body: body.to_string(),
        field_manager: field_manager.to_string(),
        force: true,
    })
}

/// A refused page must not spend the budget of the reads after it.
fn budget(req: &Request) -> String {
    let cm = ConfigMap::gvk();
    let options = ListOptions::new()
        .in_namespace(&req.namespace)
        .labels(FILLER);
    [
        case_of(cache::list(&cm, &options)),
        case_of(cache::get(&cm, &req.namespace, "filler-0")),
        case_of(api::list(&cm, &options)),
        case_of(api::get(&cm, &req.namespace, "filler-0")),
    ]
    .join(",")
}

/// How many Secrets in the namespace say they belong to `req`.
fn mapped_secrets(req: &Request) -> Result<String> {
    let page = cache::list(
        &Secret::gvk(),
        &ListOptions::new().in_namespace(&req.namespace),
    )?;
    let mine = page
        .items
        .iter()
        .filter_map(|s| serde_json::from_str::<Value>(s).ok())
        .filter(|s| s["metadata"]["annotations"][FOR].as_str() == Some(req.name.as_str()))
        .count();
    Ok(format!("secrets:{mine}"))
}

/// The primaries a Secret maps to: the one valid request, first, then 9 999 that can never be
/// reconciled (names and namespaces Kubernetes refuses, namespaces outside the guest's, the
/// valid one again).
fn hostile_map(namespace: &str, target: &str) -> Vec<Request> {
    let mut requests = vec![Request::new(namespace, target)];
    let names = bad_names();
    let namespaces = bad_namespaces();
    let mut i = 0usize;
    while requests.len() < 10_000 {
        let r = match i % 5 {
            0 => Request::new(namespace, names[i % names.len()].clone()),
            1 => Request::new(namespaces[i % namespaces.len()].clone(), format!("x{i}")),
            2 => Request::new("kube-system", format!("x{i}")),
            3 => Request::new("", format!("x{i}")),
            _ => Request::new(namespace, target),
        };
        requests.push(r);
        i += 1;
    }
    requests
}
