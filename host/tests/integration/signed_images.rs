//! `reconciled sign`, `attach` and `verify` against a real registry (go-containerregistry's, on
//! loopback with TLS and basic auth), once serving the OCI 1.1 referrers API and once not (the
//! client then keeps the referrers tag): a two-platform image index is signed recursively, each
//! platform's image given an SBOM, and `verify` passes only for the right key, the platforms the
//! index lists and the artifacts attached, naming what is missing otherwise.

use crate::common;
use crate::oci::{at, push_image};

use std::path::Path;
use std::process::Output;

use common::host::TempDir;
use testenv::registry::Registry as TestRegistry;

const SBOM: &str = "application/vnd.cyclonedx+json";

/// Runs `reconciled <args…>` as the registry's user.
fn cli(reg: &TestRegistry, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .args(args)
        .args(["-u", reg.user(), "--ca-file"])
        .arg(reg.ca_file())
        .env("RECONCILED_REGISTRY_PASSWORD", reg.password())
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn refused(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "passed: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn keys(dir: &Path, seed: u8) -> (String, String) {
    let (_, private, public) = common::keys::cosign_pair(dir, seed);
    (private.display().to_string(), public.display().to_string())
}

/// Pushes two images and an index listing them as linux/amd64 and linux/arm64, tagged `tag`.
async fn push_index(reg: &TestRegistry, repo: &str, tag: &str) -> (String, String, String) {
    // First: it installs the process's TLS provider, which the plain client below needs too.
    let registry = reconciled::sources::oci::Registry::new(reconciled::sources::oci::Settings {
        ca_file: Some(reg.ca_file()),
        ..Default::default()
    })
    .unwrap();
    let amd = push_image(reg, &format!("{repo}:amd64"), b"amd64 layer".to_vec()).await;
    let arm = push_image(reg, &format!("{repo}:arm64"), b"arm64 layer".to_vec()).await;
    let login = reconciled::sources::oci::credentials::Login {
        username: reg.user().into(),
        password: reg.password().into(),
    };
    let amd = registry.describe(&amd, Some(&login)).await.unwrap();
    let arm = registry.describe(&arm, Some(&login)).await.unwrap();
    let entry = |d: &reconciled::sources::oci::referrers::Described, arch: &str| {
        serde_json::json!({
            "mediaType": d.media_type, "digest": d.digest, "size": d.size,
            "platform": {"os": "linux", "architecture": arch},
        })
    };
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [entry(&amd, "amd64"), entry(&arm, "arm64")],
    }))
    .unwrap();
    let oci = oci_client::Client::new(oci_client::client::ClientConfig {
        extra_root_certificates: vec![oci_client::client::Certificate {
            encoding: oci_client::client::CertificateEncoding::Pem,
            data: std::fs::read(reg.ca_file()).unwrap(),
        }],
        ..Default::default()
    });
    let r: oci_client::Reference = format!("{}/{repo}:{tag}", reg.host()).parse().unwrap();
    oci.auth(
        &r,
        &oci_client::secrets::RegistryAuth::Basic(reg.user().into(), reg.password().into()),
        oci_client::RegistryOperation::Push,
    )
    .await
    .unwrap();
    oci.push_manifest_raw(
        &r,
        index.clone(),
        http::HeaderValue::from_static("application/vnd.oci.image.index.v1+json"),
    )
    .await
    .unwrap();
    (
        format!("sha256:{}", reconciled::guest::digest_of(&index)),
        amd.digest,
        arm.digest,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_signed_with_an_sbom_per_platform_verifies_with_and_without_the_referrers_api() {
    let dir = TempDir::new("signed-images");
    let (private, public) = keys(&dir.0, 7);
    let (_, other_public) = keys(&dir.0, 8);
    let sbom = dir.0.join("reconciled.cdx.json");
    std::fs::write(
        &sbom,
        br#"{"bomFormat":"CycloneDX","specVersion":"1.5","components":[]}"#,
    )
    .unwrap();
    let sbom = sbom.display().to_string();
    for api in [true, false] {
        let reg = if api {
            TestRegistry::start().unwrap()
        } else {
            TestRegistry::start_without_referrers_api().unwrap()
        };
        let host = reg.host().to_string();
        let (index, amd, arm) = push_index(&reg, "reconciled/host", "0.1.0").await;
        let tagged = format!("{host}/reconciled/host:0.1.0");
        let pinned = format!("{host}/reconciled/host@{index}");

        // Unsigned: refused, saying how to sign.
        let e = refused(&cli(&reg, &["verify", &tagged, "--key", &public]));
        assert!(
            e.contains("not signed by the key given: no signature tag sha256-")
                && e.contains("reconciled sign --key"),
            "{e}"
        );

        // Signed by tag: what was signed is the digest the tag named, printed pinned.
        let out = ok(&cli(
            &reg,
            &["sign", "--recursive", "--key", &private, &tagged],
        ));
        assert_eq!(out.trim(), pinned);
        for platform in ["linux/amd64", "linux/arm64"] {
            let digest = ok(&cli(
                &reg,
                &[
                    "attach",
                    &pinned,
                    "--platform",
                    platform,
                    "--artifact-type",
                    SBOM,
                    "--file",
                    &sbom,
                    "--annotation",
                    "org.opencontainers.image.revision=test",
                ],
            ));
            assert!(digest.trim().starts_with("sha256:"), "{digest}");
        }

        // The whole release checks out: the index and both images signed, each with its SBOM.
        let out = ok(&cli(
            &reg,
            &[
                "verify",
                &pinned,
                "--key",
                &public,
                "--platform",
                "linux/amd64",
                "--platform",
                "linux/arm64",
                "--artifact",
                SBOM,
            ],
        ));
        eprintln!("referrers API {api}:\n{out}");
        assert!(
            out.contains("an image index of linux/amd64, linux/arm64"),
            "{out}"
        );
        for image in [&amd, &arm] {
            assert!(
                out.contains(&format!("{host}/reconciled/host@{image}: signed by")),
                "{out}"
            );
            assert!(
                out.contains(&format!("{host}/reconciled/host@{image}: carries {SBOM}")),
                "{out}"
            );
        }

        // And fails, naming why, for another key, a platform not listed, an artifact missing.
        let e = refused(&cli(&reg, &["verify", &pinned, "--key", &other_public]));
        assert!(e.contains("does not verify with the configured key"), "{e}");
        let e = refused(&cli(
            &reg,
            &[
                "verify",
                &pinned,
                "--key",
                &public,
                "--platform",
                "linux/s390x",
            ],
        ));
        assert!(
            e.contains("lists no linux/s390x image (it lists: linux/amd64, linux/arm64)"),
            "{e}"
        );
        let e = refused(&cli(
            &reg,
            &[
                "verify",
                &pinned,
                "--key",
                &public,
                "--artifact",
                "application/spdx+json",
            ],
        ));
        assert!(
            e.contains("carries no application/spdx+json artifact"),
            "{e}"
        );
        let image = at(&reg, &format!("reconciled/host@{amd}"));
        let e = refused(&cli(
            &reg,
            &[
                "verify",
                image.to_string().trim_start_matches("oci://"),
                "--key",
                &public,
                "--platform",
                "linux/amd64",
            ],
        ));
        assert!(
            e.contains("lists no linux/amd64 image (it lists: none, it is a single image)"),
            "{e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_signed_by_two_keys_verifies_with_either_and_signing_again_adds_nothing() {
    let reg = TestRegistry::start().unwrap();
    let dir = TempDir::new("two-signers");
    let (a_key, a_pub) = keys(&dir.0, 1);
    let (b_key, b_pub) = keys(&dir.0, 2);
    let (_, c_pub) = keys(&dir.0, 3);
    let module = common::guests::wasm("stamp_v1");
    let tagged = format!("{}/team-a/signed:1", reg.host());
    let pushed = ok(&cli(
        &reg,
        &[
            "push",
            &module.display().to_string(),
            &tagged,
            "--sign-key",
            &a_key,
        ],
    ));
    let pinned = pushed.trim().lines().last().unwrap().to_string();
    assert!(pinned.contains("@sha256:"), "{pushed}");
    ok(&cli(&reg, &["sign", &tagged, "--key", &b_key]));
    for key in [&a_pub, &b_pub] {
        let said = ok(&cli(&reg, &["verify", &pinned, "--key", key]));
        assert!(said.contains("signed by"), "{said}");
    }
    let e = refused(&cli(&reg, &["verify", &pinned, "--key", &c_pub]));
    assert!(e.contains("does not verify with the configured key"), "{e}");

    // The same key again adds no second layer: the signature manifest stays as it was.
    let registry = reconciled::sources::oci::Registry::new(reconciled::sources::oci::Settings {
        ca_file: Some(reg.ca_file()),
        ..Default::default()
    })
    .unwrap();
    let login = reconciled::sources::oci::credentials::Login {
        username: reg.user().into(),
        password: reg.password().into(),
    };
    let digest = pinned.rsplit_once('@').unwrap().1;
    let signatures = at(
        &reg,
        &format!(
            "team-a/signed:{}",
            reconciled::sources::oci::signature::tag_of(digest)
        ),
    );
    let before = registry.describe(&signatures, Some(&login)).await.unwrap();
    ok(&cli(&reg, &["sign", &tagged, "--key", &a_key]));
    let after = registry.describe(&signatures, Some(&login)).await.unwrap();
    assert_eq!(before.digest, after.digest, "a second signature by one key");
}
