//! A host upgrade never breaks a module: guests built against `reconciled:runtime@0.1.0`, `@0.1.1`
//! and `@0.1.2` when each was current, kept as the components they were (`guests/compat/`), run
//! beside one built against the current WIT, on one host; a module built against a newer version
//! runs if it uses nothing new, and is refused, naming both versions, if it does.

use crate::common;

use std::time::Duration;

use common::guests::compat;
use common::host::{seen_all, stamped, supervisor_with};
use common::namespace;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use reconciled::guest::settings::GuestSettings;
use reconciled::guest::wit_version::SERVED;
use reconciled::guest::{LoadError, Runtime};
use reconciled::supervisor::{Applied, Source};
use testenv::ControlPlane;

fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(common::guests::wasm(name)).unwrap()
}

fn settings(name: &str, ns: &str) -> Settings {
    Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new(name)
    }
}

/// Whether `bytes` name `text` (import names are plain strings in a component).
fn names(bytes: &[u8], text: &str) -> bool {
    bytes.windows(text.len()).any(|w| w == text.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_built_against_wit_0_1_0_0_1_1_and_0_1_2_run_beside_one_built_against_the_current_wit()
 {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    // (guest, the version its imports name, its namespace, what it stamps); every one but the
    // current is the component guests/compat/ keeps.
    let guests = [
        ("v0-1-0", "0.1.0", "wit-0-1-0", "wit-0.1.0:1"),
        // Its settings name the version to stamp: the interface 0.1.1 added, still served.
        ("v0-1-1", "0.1.1", "wit-0-1-1", "compat-0.1.1:1"),
        ("v0-1-2", "0.1.2", "wit-0-1-2", "compat-0.1.2:1"),
        ("current", SERVED, "wit-current", "v1:1"),
    ];
    let sup = supervisor_with(&cp.admin_config(), None);
    for (name, version, ns, _) in guests {
        namespace(&client, ns).await;
        let (module, bytes) = if version == SERVED {
            ("stamp_v1".to_string(), wasm("stamp_v1"))
        } else {
            (format!("compat-{version}"), compat(version))
        };
        // The modules are what they claim: each imports only its own version.
        for other in ["0.1.0", "0.1.1", "0.1.2", SERVED] {
            let imported = names(&bytes, &format!("reconciled:runtime/cache@{other}"));
            assert_eq!(imported, other == version, "{module} imports cache@{other}");
        }
        let mut settings = settings(name, ns);
        if version == "0.1.1" || version == "0.1.2" {
            let stamp = format!(r#"{{"version": "compat-{version}"}}"#);
            settings.guest_settings = GuestSettings::parse(&stamp).unwrap();
        }
        let source = Source::File(format!("{module}.wasm").into());
        let applied = sup.apply(name, source, settings, bytes).await;
        assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.create(&PostParams::default(), &stamped("work", "1"))
            .await
            .unwrap();
    }

    let mut last = Vec::new();
    let stamped_all = async {
        loop {
            last.clear();
            for (_, _, ns, _) in guests {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                last.push(seen_all(&api).await.remove("work").flatten());
            }
            let want = guests.map(|(.., stamp)| Some(stamp.to_owned()));
            if last == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let done = tokio::time::timeout(Duration::from_secs(30), stamped_all).await;
    assert!(
        done.is_ok(),
        "every module reconciles on one host; saw {last:?}"
    );
    sup.shutdown().await;
}

#[tokio::test]
async fn a_module_that_needs_a_newer_wit_is_refused_naming_both_versions() {
    let served = format!("reconciled:runtime/cache@{SERVED}");
    let newer = format!("reconciled:runtime/cache@0.1.{}", 9);
    // Built against a newer 0.1.x but using nothing new: it links and runs.
    let module = rename(wasm("stamp_v1"), &served, &newer);
    let loaded = Runtime::new().unwrap().compile(module).await;
    assert!(
        loaded.is_ok(),
        "a newer SDK alone needs nothing new: {loaded:?}"
    );
    // Needing an interface this host does not have (a later 0.1.x's addition): refused, and
    // told why in versions rather than as a missing import.
    let settings = format!("reconciled:runtime/settings@{SERVED}");
    let addition = format!("reconciled:runtime/addition@0.1.{}", 9);
    assert_eq!(settings.len(), addition.len());
    let module = rename(wasm("stamp_v1"), &settings, &addition);
    let e = Runtime::new()
        .unwrap()
        .compile(module)
        .await
        .expect_err("a module that needs a newer host is refused");
    assert!(matches!(e, LoadError::WitVersion { .. }), "{e:?}");
    let message = e.to_string();
    assert!(
        message.contains("reconciled:runtime@0.1.9") && message.contains(SERVED),
        "names both versions: {message}"
    );
}

/// `bytes` with every `from` replaced by `to`, of the same length: import names are plain
/// strings in a component, so the rename keeps it valid.
fn rename(mut bytes: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len(), "the rename keeps the binary's layout");
    let mut renamed = 0;
    let mut at = 0;
    while let Some(i) = (bytes[at..].windows(from.len())).position(|w| w == from.as_bytes()) {
        let i = at + i;
        bytes[i..i + to.len()].copy_from_slice(to.as_bytes());
        renamed += 1;
        at = i + to.len();
    }
    assert!(renamed > 0, "the module names {from}");
    bytes
}
