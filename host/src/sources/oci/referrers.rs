//! Any manifest's signature and attached artifacts: what `reconciled sign`, `attach` and
//! `verify` do for the host's own image (or a module) in a registry.
//!
//! An attached artifact, such as an SBOM, is an OCI image manifest with an `artifactType`, the
//! empty config and one layer, whose `subject` names the manifest it describes: the
//! distribution spec 1.1's referrers, as `oras attach` writes them. A registry that serves the
//! referrers API indexes it on push; for one that does not, the referrers tag (`sha256-<hex>`,
//! an image index) is kept as well, as the spec asks of clients, so `oras discover`, `crane` and
//! `cosign tree` find it either way. Signatures are cosign's key-pair, tag-based form (see
//! [`super::signature`]).
//!
//! Where it may surprise:
//! - The referrers tag is read, extended and written back: two clients attaching to one image
//!   at once, on a registry without the referrers API, can lose one entry (the spec's fallback
//!   has the same race). A registry with the API has none.
//! - Listing reads every referrer's manifest to learn its `artifactType`: an index entry may
//!   omit it, and a registry's server-side filter is only a hint.

use std::collections::BTreeMap;

use oci_client::manifest::{ImageIndexEntry, OciImageIndex};
use p256::ecdsa::{SigningKey, VerifyingKey};

use super::credentials::Login;
use super::error::classify;
use super::{Error, ModuleRef, Registry, manifest_of, signature};

/// The media types a subject's manifest may have: an image, an image index, or Docker's two.
const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The config of an artifact with none: `{}`, as the image spec 1.1 defines it.
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// Largest manifest read: real ones are a few KiB.
const MAX_MANIFEST: usize = 4 << 20;

/// A manifest as a registry holds it: what a descriptor of it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Its media type (an image manifest, an image index, or Docker's).
    pub media_type: String,
    /// Its size in bytes.
    pub size: i64,
    /// The images an index lists, in its order: each one's platform (`os/architecture`, with
    /// `/variant` when there is one; empty if the index gives none) and digest. Empty for a
    /// single image.
    pub manifests: Vec<(String, String)>,
}

impl Described {
    /// The digest of the image it lists for `platform` (`linux/arm64`, or with a variant);
    /// `None` if it lists none, or is a single image.
    pub fn image_for(&self, platform: &str) -> Option<&str> {
        self.manifests
            .iter()
            .find(|(p, _)| p == platform || p.starts_with(&format!("{platform}/")))
            .map(|(_, d)| d.as_str())
    }

    /// The platforms it lists, for messages.
    pub fn platforms(&self) -> Vec<&str> {
        self.manifests.iter().map(|(p, _)| p.as_str()).collect()
    }
}

/// An artifact to attach to a manifest.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// What it is, as a media type (`application/vnd.cyclonedx+json` for a CycloneDX SBOM).
    pub artifact_type: String,
    /// Its one layer's content.
    pub bytes: Vec<u8>,
    /// Annotations on its manifest (`org.opencontainers.image.created` and the like).
    pub annotations: BTreeMap<String, String>,
}

/// An artifact attached to a manifest, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    /// Its manifest's digest.
    pub digest: String,
    /// What it is.
    pub artifact_type: String,
    /// Its one layer's media type, digest and size, when it has exactly one.
    pub layer: Option<(String, String, i64)>,
}

impl Registry {
    /// Resolves `reference` (a tag, or a digest it checks) to its manifest, as `login`.
    pub async fn describe(
        &self,
        reference: &ModuleRef,
        login: Option<&Login>,
    ) -> Result<Described, Error> {
        let (client, auth) = self.client(login)?;
        let (body, digest) = manifest_of(&client, &auth, reference, login, MANIFEST_TYPES).await?;
        described(reference, &body, digest)
    }

    /// Signs manifest `subject` (pinned) with `key`, as `cosign sign --key` would: the
    /// signature is added beside any already there, so every key that signed verifies.
    pub async fn sign(
        &self,
        subject: &ModuleRef,
        login: Option<&Login>,
        key: &SigningKey,
    ) -> Result<(), Error> {
        let digest = pinned(subject)?;
        let (client, auth) = self
            .client_for(subject, login, oci_client::RegistryOperation::Push)
            .await?;
        signature::sign(&client, &auth, subject, digest, key)
            .await
            .map_err(|e| classify(e, subject, login))
    }

    /// Checks that manifest `subject` (pinned) carries a cosign signature by `key`.
    pub async fn verify(
        &self,
        subject: &ModuleRef,
        login: Option<&Login>,
        key: &VerifyingKey,
    ) -> Result<(), Error> {
        let digest = pinned(subject)?;
        let (client, auth) = self.client(login)?;
        signature::verify(&client, &auth, subject, digest, key)
            .await
            .map_err(|f| match f {
                signature::Failure::Registry(e) => classify(e, subject, login),
                signature::Failure::Invalid(why) => Error::Signature {
                    reference: subject.clone(),
                    reason: format!(
                        "not signed by the key given: {why}; sign it with `reconciled sign --key` or `cosign sign --key cosign.key --tlog-upload=false`"
                    ),
                },
            })
    }

    /// Attaches `artifact` as a referrer to `described`, a manifest of `repository` as
    /// [`Registry::describe`] gave it; the referrer's manifest digest.
    pub async fn attach(
        &self,
        repository: &ModuleRef,
        described: &Described,
        login: Option<&Login>,
        artifact: Attachment,
    ) -> Result<String, Error> {
        let subject = &repository.at(&described.digest);
        let (client, _) = self
            .client_for(subject, login, oci_client::RegistryOperation::Push)
            .await?;
        let fail = |e| classify(e, subject, login);
        let layer_digest = format!("sha256:{}", crate::guest::digest_of(&artifact.bytes));
        let layer_size = artifact.bytes.len();
        let empty = b"{}".to_vec();
        let empty_digest = format!("sha256:{}", crate::guest::digest_of(&empty));
        let manifest = referrer_manifest(&artifact, described, &layer_digest, layer_size);
        let digest = format!("sha256:{}", crate::guest::digest_of(&manifest));
        client
            .push_blob(subject.inner(), artifact.bytes, &layer_digest)
            .await
            .map_err(fail)?;
        client
            .push_blob(subject.inner(), empty, &empty_digest)
            .await
            .map_err(fail)?;
        let size = manifest.len() as i64;
        client
            .push_manifest_raw(
                subject.at(&digest).inner(),
                manifest,
                http::HeaderValue::from_static(OCI_MANIFEST),
            )
            .await
            .map_err(fail)?;
        // A registry with the referrers API lists it now; one without needs the tag kept.
        let listed = client
            .pull_referrers(subject.inner(), None)
            .await
            .map_err(fail)?;
        if !listed.manifests.iter().any(|m| m.digest == digest) {
            let entry = ImageIndexEntry {
                media_type: OCI_MANIFEST.to_string(),
                digest: digest.clone(),
                size,
                platform: None,
                annotations: (!artifact.annotations.is_empty())
                    .then(|| artifact.annotations.clone()),
                artifact_type: Some(artifact.artifact_type.clone()),
            };
            self.add_to_referrers_tag(subject, login, &described.digest, entry)
                .await?;
        }
        Ok(digest)
    }

    /// Appends `entry` to the referrers tag of manifest `digest`, the fallback for registries
    /// without the referrers API.
    async fn add_to_referrers_tag(
        &self,
        subject: &ModuleRef,
        login: Option<&Login>,
        digest: &str,
        entry: ImageIndexEntry,
    ) -> Result<(), Error> {
        let (client, auth) = self.client(login)?;
        let fail = |e| classify(e, subject, login);
        let tag = subject.tagged(&digest.replacen(':', "-", 1));
        let mut index = match client
            .pull_manifest_raw(tag.inner(), &auth, &[OCI_INDEX])
            .await
        {
            Ok((body, _)) => {
                serde_json::from_slice::<serde_json::Value>(&body).map_err(|e| Error::Corrupt {
                    reference: tag.clone(),
                    reason: format!("the referrers tag is not an image index ({e})"),
                })?
            }
            Err(e) if is_not_found(&e) => serde_json::json!({
                "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [],
            }),
            Err(e) => return Err(fail(e)),
        };
        let Some(list) = index["manifests"].as_array_mut() else {
            return Err(Error::Corrupt {
                reference: tag,
                reason: "the referrers tag's index has no manifests list".to_string(),
            });
        };
        list.push(serde_json::to_value(&entry).expect("a descriptor serializes"));
        let body = serde_json::to_vec(&index).expect("a JSON value serializes");
        client
            .push_manifest_raw(tag.inner(), body, http::HeaderValue::from_static(OCI_INDEX))
            .await
            .map_err(fail)?;
        Ok(())
    }

    /// The artifacts attached to manifest `subject` (pinned), of `artifact_type` if given.
    pub async fn referrers(
        &self,
        subject: &ModuleRef,
        login: Option<&Login>,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Referrer>, Error> {
        pinned(subject)?;
        let (client, auth) = self
            .client_for(subject, login, oci_client::RegistryOperation::Pull)
            .await?;
        let fail = |e| classify(e, subject, login);
        let index: OciImageIndex = client
            .pull_referrers(subject.inner(), artifact_type)
            .await
            .map_err(fail)?;
        let mut found = Vec::new();
        for entry in index.manifests {
            let at = subject.at(&entry.digest);
            let (body, _) = client
                .pull_manifest_raw(at.inner(), &auth, &[OCI_MANIFEST, OCI_INDEX])
                .await
                .map_err(|e| classify(e, &at, login))?;
            if body.len() > MAX_MANIFEST
                || format!("sha256:{}", crate::guest::digest_of(&body)) != entry.digest
            {
                return Err(Error::Corrupt {
                    reference: at,
                    reason: "a referrer's manifest does not match its digest".to_string(),
                });
            }
            let referrer = referrer_of(&entry.digest, &body);
            if artifact_type.is_none_or(|t| referrer.artifact_type == t) {
                found.push(referrer);
            }
        }
        Ok(found)
    }

    /// The one layer of attached artifact `referrer` of `subject`, checked against its digest;
    /// at most `max_bytes`.
    pub async fn pull_referrer(
        &self,
        subject: &ModuleRef,
        login: Option<&Login>,
        referrer: &Referrer,
        max_bytes: usize,
    ) -> Result<Vec<u8>, Error> {
        let Some((media_type, digest, size)) = &referrer.layer else {
            return Err(Error::Corrupt {
                reference: subject.at(&referrer.digest),
                reason: "the artifact has no single layer to read".to_string(),
            });
        };
        if *size < 0 || *size as u64 > max_bytes as u64 {
            return Err(Error::TooLarge {
                reference: subject.at(&referrer.digest),
                size: (*size).max(0) as u64,
                max: max_bytes as u64,
            });
        }
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        let (client, _) = self.client(login)?;
        let layer = oci_client::manifest::OciDescriptor {
            media_type: media_type.clone(),
            digest: digest.clone(),
            size: *size,
            ..Default::default()
        };
        self.pull_layer(&client, subject, login, &layer, hex, max_bytes)
            .await
    }
}

/// The digest `reference` is pinned to, or an error saying to pin it.
fn pinned(reference: &ModuleRef) -> Result<&str, Error> {
    reference.pinned().ok_or_else(|| Error::Signature {
        reference: reference.clone(),
        reason: "name the manifest by digest (registry/repo@sha256:…): a tag can move between the check and its use".to_string(),
    })
}

fn is_not_found(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    match e {
        E::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NotFound
            )
        }),
        E::ServerError { code: 404, .. } | E::ImageManifestNotFoundError(_) => true,
        _ => false,
    }
}

/// What manifest `body` (with `digest`) of `reference` is.
fn described(reference: &ModuleRef, body: &[u8], digest: String) -> Result<Described, Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Manifest {
        media_type: Option<String>,
        #[serde(default)]
        manifests: Vec<Entry>,
        layers: Option<serde_json::Value>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        digest: String,
        platform: Option<oci_client::manifest::Platform>,
    }
    let m: Manifest = serde_json::from_slice(body).map_err(|e| Error::MediaType {
        reference: reference.clone(),
        found: format!("its manifest is not JSON a registry serves ({e})"),
    })?;
    // The media type is optional in an OCI manifest; its shape says which it is.
    let media_type = m.media_type.unwrap_or_else(|| {
        if m.layers.is_some() {
            OCI_MANIFEST.to_string()
        } else {
            OCI_INDEX.to_string()
        }
    });
    let manifests = m
        .manifests
        .into_iter()
        .map(|e| {
            let platform = match &e.platform {
                Some(p) => match &p.variant {
                    Some(v) if !v.is_empty() => format!("{}/{}/{v}", p.os, p.architecture),
                    _ => format!("{}/{}", p.os, p.architecture),
                },
                None => String::new(),
            };
            (platform, e.digest)
        })
        .collect();
    Ok(Described {
        digest,
        media_type,
        size: body.len() as i64,
        manifests,
    })
}

/// The manifest of `artifact`, attached to `subject`.
fn referrer_manifest(
    artifact: &Attachment,
    subject: &Described,
    layer_digest: &str,
    layer_size: usize,
) -> Vec<u8> {
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact.artifact_type,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "digest": format!("sha256:{}", crate::guest::digest_of(b"{}")),
            "size": 2,
        },
        "layers": [{
            "mediaType": artifact.artifact_type,
            "digest": layer_digest,
            "size": layer_size,
        }],
        "subject": {
            "mediaType": subject.media_type,
            "digest": subject.digest,
            "size": subject.size,
        },
    });
    if !artifact.annotations.is_empty() {
        manifest["annotations"] =
            serde_json::to_value(&artifact.annotations).expect("string annotations serialize");
    }
    serde_json::to_vec(&manifest).expect("a JSON value serializes")
}

/// What referrer manifest `body` (with `digest`) says it is: its `artifactType`, or else its
/// config's media type, as the spec defines an artifact's type.
fn referrer_of(digest: &str, body: &[u8]) -> Referrer {
    let m: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let artifact_type = m["artifactType"]
        .as_str()
        .or_else(|| m["config"]["mediaType"].as_str())
        .unwrap_or_default()
        .to_string();
    let layer = match m["layers"].as_array().map(Vec::as_slice) {
        Some([one]) => match (
            one["mediaType"].as_str(),
            one["digest"].as_str(),
            one["size"].as_i64(),
        ) {
            (Some(t), Some(d), Some(s)) => Some((t.to_string(), d.to_string(), s)),
            _ => None,
        },
        _ => None,
    };
    Referrer {
        digest: digest.to_string(),
        artifact_type,
        layer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Described {
        Described {
            digest: format!("sha256:{}", "a".repeat(64)),
            media_type: OCI_INDEX.to_string(),
            size: 512,
            manifests: vec![],
        }
    }

    #[test]
    fn an_attached_artifact_names_its_subject_and_reads_back_as_its_type() {
        let artifact = Attachment {
            artifact_type: "application/vnd.cyclonedx+json".into(),
            bytes: b"{\"bomFormat\":\"CycloneDX\"}".to_vec(),
            annotations: BTreeMap::from([("org.opencontainers.image.created".into(), "x".into())]),
        };
        let body = referrer_manifest(&artifact, &subject(), "sha256:bb", 25);
        let m: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(m["subject"]["digest"], subject().digest);
        assert_eq!(m["subject"]["mediaType"], OCI_INDEX);
        assert_eq!(m["subject"]["size"], 512);
        assert_eq!(m["config"]["mediaType"], EMPTY_MEDIA_TYPE);
        assert_eq!(
            m["config"]["digest"],
            // sha256 of `{}`, the image spec's empty descriptor.
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        let r = referrer_of("sha256:cc", &body);
        assert_eq!(r.artifact_type, "application/vnd.cyclonedx+json");
        assert_eq!(
            r.layer,
            Some((
                "application/vnd.cyclonedx+json".into(),
                "sha256:bb".into(),
                25
            ))
        );
    }

    #[test]
    fn an_index_is_described_with_its_platforms() {
        let r: ModuleRef = "r.example/reconciled/host:1".parse().unwrap();
        let body = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": "sha256:1", "size": 1,
                 "platform": {"os": "linux", "architecture": "amd64"}},
                {"mediaType": OCI_MANIFEST, "digest": "sha256:2", "size": 1,
                 "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            ],
        }))
        .unwrap();
        let d = described(&r, &body, "sha256:x".into()).unwrap();
        assert_eq!(
            d.media_type, OCI_INDEX,
            "no mediaType and no layers: an index"
        );
        assert_eq!(d.platforms(), ["linux/amd64", "linux/arm64/v8"]);
        assert_eq!(d.image_for("linux/arm64"), Some("sha256:2"));
        assert_eq!(d.image_for("linux/amd64"), Some("sha256:1"));
        assert_eq!(d.image_for("linux/s390x"), None);
        let image =
            serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "layers": []})).unwrap();
        let d = described(&r, &image, "sha256:y".into()).unwrap();
        assert_eq!(d.media_type, OCI_MANIFEST);
        assert!(d.manifests.is_empty());
    }

    #[test]
    fn a_referrer_without_an_artifact_type_is_typed_by_its_config() {
        let body = serde_json::to_vec(&serde_json::json!({
            "config": {"mediaType": "application/vnd.example.sig"},
            "layers": [],
        }))
        .unwrap();
        let r = referrer_of("sha256:d", &body);
        assert_eq!(r.artifact_type, "application/vnd.example.sig");
        assert_eq!(r.layer, None);
    }
}
