//! Signatures on modules, in cosign's key-pair format: a tag `sha256-<manifest hex>.sig` in the
//! module's repository whose layers are simple-signing payloads naming the manifest digest,
//! each signed (ECDSA P-256, SHA-256, DER, base64) in the annotation
//! `dev.cosignproject.cosign/signature`.
//!
//! Why this format: it is what `cosign sign --key` writes and `cosign verify --key` and
//! Kubewarden's policy-server check, so a platform team signs with tools it already runs; the
//! key-pair mode needs no transparency log or OIDC issuer, which an offline or air-gapped
//! cluster cannot reach.
//!
//! Where it may surprise: the payload's `docker-reference` is not compared with the module's
//! repository (cosign does not either), so a signed module copied to another repository stays
//! signed. Only the key-pair, tag-based form is read (cosign 2 with
//! `--tlog-upload=false`, or `reconciled push --sign-key`). Keyless signatures and the newer
//! Sigstore bundles attached as OCI referrers are not, and a module carrying only those is
//! rejected as unsigned. Cosign's own encrypted private keys are not read by `push`: give it a
//! PKCS#8 PEM key (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`).

use std::path::Path;

use base64::Engine as _;
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};

use super::reference::ModuleRef;

/// The media type of a simple-signing payload layer.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Largest payload read: a real one is a few hundred bytes.
const MAX_PAYLOAD: i64 = 64 << 10;

/// Why a signature check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] OciDistributionError),
    /// There is no valid signature: why, without advice (the caller knows what was signed and
    /// how to sign it).
    #[error("{0}")]
    Invalid(String),
}

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read {what}{path}: {source}")]
    Read {
        /// `verify_key ` for the public key, empty for a signing key.
        what: &'static str,
        /// The file.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Not a public key of the kind cosign writes.
    #[error(
        "verify_key {path} is not a PEM ECDSA P-256 public key ({reason}); use cosign.pub from `cosign generate-key-pair`"
    )]
    NotPublicKey {
        /// The file.
        path: String,
        /// What the PEM reader said.
        reason: String,
    },
    /// cosign's own encrypted private key, which is not read.
    #[error(
        "{0} is cosign's encrypted key format, which reconciled does not read; sign with `cosign sign --key` instead, or use a PKCS#8 key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)"
    )]
    CosignEncrypted(String),
    /// Not a PKCS#8 private key of the right curve.
    #[error("{path} is not a PKCS#8 PEM ECDSA P-256 private key ({reason})")]
    NotPrivateKey {
        /// The file.
        path: String,
        /// What the PEM reader said.
        reason: String,
    },
}

/// Reads a PEM public key (`-----BEGIN PUBLIC KEY-----`, as `cosign.pub`).
pub fn read_public_key(path: &Path) -> Result<VerifyingKey, KeyError> {
    let shown = path.display().to_string();
    let pem = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        what: "verify_key ",
        path: shown.clone(),
        source,
    })?;
    VerifyingKey::from_public_key_pem(&pem).map_err(|e| KeyError::NotPublicKey {
        path: shown,
        reason: e.to_string(),
    })
}

/// Reads a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`).
pub fn read_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let shown = path.display().to_string();
    let pem = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        what: "",
        path: shown.clone(),
        source,
    })?;
    if pem.contains("ENCRYPTED SIGSTORE PRIVATE KEY") || pem.contains("ENCRYPTED COSIGN") {
        return Err(KeyError::CosignEncrypted(shown));
    }
    SigningKey::from_pkcs8_pem(&pem).map_err(|e| KeyError::NotPrivateKey {
        path: shown,
        reason: e.to_string(),
    })
}

/// Why one signature layer is not a valid signature of the module's manifest.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    /// The annotation is not base64.
    #[error("the signature is not base64 ({0})")]
    NotBase64(#[source] base64::DecodeError),
    /// It decodes, but not to a DER ECDSA signature.
    #[error("the signature is not DER ECDSA ({0})")]
    NotDer(#[source] p256::ecdsa::Error),
    /// Another key signed it.
    #[error("a signature does not verify with the configured key")]
    WrongKey,
    /// The signed payload is not simple signing.
    #[error("a signed payload is not simple signing ({0})")]
    NotSimpleSigning(#[source] serde_json::Error),
    /// A valid signature of another module.
    #[error(
        "a valid signature is for {signed}, not this module's manifest {manifest}: it was copied from another module"
    )]
    OtherManifest {
        /// The manifest it signs.
        signed: String,
        /// This module's manifest.
        manifest: String,
    },
}

/// The tag cosign stores the signatures of manifest `digest` under.
pub fn tag_of(digest: &str) -> String {
    digest.replacen(':', "-", 1) + ".sig"
}

/// The simple-signing payload for `manifest` of `reference`'s repository.
fn payload(reference: &ModuleRef, manifest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": format!("{}/{}", reference.registry(), reference.repository())},
            "image": {"docker-manifest-digest": manifest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .expect("a JSON literal serializes")
}

/// Whether `payload`, signed by `signature` (base64 DER), is `key`'s signature of `manifest`.
pub fn check(
    payload: &[u8],
    signature: &str,
    manifest: &str,
    key: &VerifyingKey,
) -> Result<(), Mismatch> {
    let der = (base64::engine::general_purpose::STANDARD.decode(signature.trim()))
        .map_err(Mismatch::NotBase64)?;
    let sig = Signature::from_der(&der).map_err(Mismatch::NotDer)?;
    key.verify(payload, &sig).map_err(|_| Mismatch::WrongKey)?;
    #[derive(serde::Deserialize)]
    struct Payload {
        critical: Critical,
    }
    #[derive(serde::Deserialize)]
    struct Critical {
        image: Image,
    }
    #[derive(serde::Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    let p: Payload = serde_json::from_slice(payload).map_err(Mismatch::NotSimpleSigning)?;
    if p.critical.image.digest != manifest {
        return Err(Mismatch::OtherManifest {
            signed: p.critical.image.digest,
            manifest: manifest.to_string(),
        });
    }
    Ok(())
}

/// The signature manifest of manifest `digest` of `reference` (its `.sig` tag), as the registry
/// holds it; `None` when there is none yet.
async fn signatures(
    client: &oci_client::Client,
    auth: &RegistryAuth,
    reference: &ModuleRef,
    digest: &str,
) -> Result<Option<Vec<u8>>, OciDistributionError> {
    let at = reference.tagged(&tag_of(digest));
    match client
        .pull_manifest_raw(
            at.inner(),
            auth,
            &[
                "application/vnd.oci.image.manifest.v1+json",
                "application/vnd.docker.distribution.manifest.v2+json",
            ],
        )
        .await
    {
        Ok((body, _)) => Ok(Some(body.to_vec())),
        Err(OciDistributionError::RegistryError { envelope, .. })
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, oci_client::errors::OciErrorCode::ManifestUnknown)) =>
        {
            Ok(None)
        }
        Err(OciDistributionError::ServerError { code: 404, .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Checks that manifest `digest` of `reference` carries a signature by `key`. Works for any
/// manifest: a module's, an image's or an image index's.
pub(super) async fn verify(
    client: &oci_client::Client,
    auth: &RegistryAuth,
    reference: &ModuleRef,
    digest: &str,
    key: &VerifyingKey,
) -> Result<(), Failure> {
    let at = reference.tagged(&tag_of(digest));
    let unsigned = Failure::Invalid;
    let Some(body) = signatures(client, auth, reference, digest).await? else {
        return Err(unsigned(format!("no signature tag {}", tag_of(digest))));
    };
    let m: oci_client::manifest::OciImageManifest = serde_json::from_slice(&body).map_err(|e| {
        unsigned(format!(
            "tag {} is not a signature manifest ({e})",
            tag_of(digest)
        ))
    })?;
    let mut last = "it holds no simple-signing layer".to_string();
    for layer in m
        .layers
        .iter()
        .filter(|l| l.media_type == PAYLOAD_MEDIA_TYPE)
    {
        let Some(sig) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        if !(0..=MAX_PAYLOAD).contains(&layer.size) {
            last = format!(
                "a payload of {} bytes is not a signature payload",
                layer.size
            );
            continue;
        }
        // Read no more than a payload may be, whatever the registry declared or sends.
        let mut stream = client.pull_blob_stream(at.inner(), layer).await?;
        let mut payload = Vec::new();
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            payload.extend_from_slice(&chunk.map_err(OciDistributionError::from)?);
            if payload.len() as i64 > MAX_PAYLOAD {
                break;
            }
        }
        if payload.len() as i64 > MAX_PAYLOAD
            || format!("sha256:{}", crate::guest::digest_of(&payload)) != layer.digest
        {
            last = "a signature payload does not match its digest".to_string();
            continue;
        }
        match check(&payload, sig, digest, key) {
            Ok(()) => return Ok(()),
            Err(why) => last = why.to_string(),
        }
    }
    Err(unsigned(last))
}

/// Adds `key`'s signature of manifest `digest` of `reference` to its signature manifest, as
/// `cosign sign --key` lays it out: one simple-signing layer per signature, beside those already
/// there (by other keys, kept as they are, their annotations included). A key that has signed
/// already adds nothing: ECDSA here is deterministic (RFC 6979), so its layer is the same.
///
/// Where it may surprise: the manifest is read, then written again; two signers at the same
/// instant may each write theirs over the other's, as with cosign.
pub(super) async fn sign(
    client: &oci_client::Client,
    auth: &RegistryAuth,
    reference: &ModuleRef,
    digest: &str,
    key: &SigningKey,
) -> Result<(), OciDistributionError> {
    let at = reference.tagged(&tag_of(digest));
    let payload = payload(reference, digest);
    let sig: Signature = key.sign(&payload);
    let sig = base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes());
    let payload_digest = format!("sha256:{}", crate::guest::digest_of(&payload));
    // The layers already there, as they are (an unreadable manifest is replaced).
    let mut layers: Vec<serde_json::Value> =
        match signatures(client, auth, reference, digest).await? {
            Some(body) => serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|m| m.get("layers").and_then(|l| l.as_array()).cloned())
                .unwrap_or_default(),
            None => Vec::new(),
        };
    let ours = serde_json::json!({
        "mediaType": PAYLOAD_MEDIA_TYPE, "digest": payload_digest, "size": payload.len(),
        "annotations": {SIGNATURE_ANNOTATION: sig},
    });
    if layers.contains(&ours) {
        return Ok(());
    }
    layers.push(ours);
    let diff_ids: Vec<&serde_json::Value> = layers.iter().filter_map(|l| l.get("digest")).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "", "os": "", "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .expect("a JSON literal serializes");
    let config_digest = format!("sha256:{}", crate::guest::digest_of(&config));
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": layers,
    }))
    .expect("a JSON literal serializes");
    client
        .push_blob(at.inner(), payload, &payload_digest)
        .await?;
    client.push_blob(at.inner(), config, &config_digest).await?;
    client
        .push_manifest_raw(
            at.inner(),
            manifest,
            http::HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json"),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32].into()).unwrap()
    }

    #[test]
    fn a_signature_holds_only_for_its_key_and_its_manifest() {
        let r: ModuleRef = "r.example/team/rec:1".parse().unwrap();
        let m = "sha256:aaaa";
        let p = payload(&r, m);
        let sig: Signature = key(7).sign(&p);
        let b64 = base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes());
        let mine = VerifyingKey::from(&key(7));
        assert!(check(&p, &b64, m, &mine).is_ok());
        let theirs = VerifyingKey::from(&key(8));
        assert!(matches!(
            check(&p, &b64, m, &theirs),
            Err(Mismatch::WrongKey)
        ));
        let e = check(&p, &b64, "sha256:bbbb", &mine).unwrap_err();
        assert!(e.to_string().contains("copied from another module"), "{e}");
        assert!(matches!(
            check(&p, "!!", m, &mine),
            Err(Mismatch::NotBase64(_))
        ));
        assert_eq!(tag_of("sha256:abc"), "sha256-abc.sig");
    }
}
