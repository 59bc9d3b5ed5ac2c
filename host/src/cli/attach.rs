//! `reconciled attach registry/repo@sha256:… --artifact-type T --file F`: attaches a file (an
//! SBOM, an attestation) to a manifest as an OCI referrer, and prints the referrer's digest.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use reconciled::sources::oci::ModuleRef;
use reconciled::sources::oci::referrers::Attachment;

use super::push::RegistryArgs;

/// `reconciled attach`.
#[derive(Args)]
pub(crate) struct AttachArgs {
    /// What it describes: `registry/repository:tag` or `…@sha256:<hex>`. A tag is resolved
    /// once; the artifact names the digest.
    reference: String,
    /// What the file is, as a media type: `application/vnd.cyclonedx+json` for a CycloneDX
    /// SBOM, `application/spdx+json` for SPDX.
    #[arg(long)]
    artifact_type: String,
    /// The file.
    #[arg(long)]
    file: PathBuf,
    /// Attach it to the image an index lists for this platform (`linux/arm64`) rather than
    /// to the index: an SBOM describes one platform's binary.
    #[arg(long, value_name = "OS/ARCH")]
    platform: Option<String>,
    /// An annotation on the artifact's manifest, `key=value`; repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    annotation: Vec<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `reconciled attach`.
pub(crate) async fn attach(args: AttachArgs) -> anyhow::Result<()> {
    let reference: ModuleRef = args.reference.parse()?;
    let annotations = annotations(&args.annotation)?;
    let bytes = std::fs::read(&args.file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.file.display()))?;
    let login = args.registry.login()?;
    let registry = args.registry.registry(&reference)?;
    let described = registry.describe(&reference, login.as_ref()).await?;
    let subject = match &args.platform {
        None => described,
        Some(platform) => {
            let image = described.image_for(platform).ok_or_else(|| {
                anyhow::anyhow!(
                    "{reference} lists no {platform} image (it lists: {}); name a platform it has",
                    listed(&described.platforms())
                )
            })?;
            registry
                .describe(&reference.at(image), login.as_ref())
                .await?
        }
    };
    let size = bytes.len();
    let digest = registry
        .attach(
            &reference,
            &subject,
            login.as_ref(),
            Attachment {
                artifact_type: args.artifact_type.clone(),
                bytes,
                annotations,
            },
        )
        .await?;
    eprintln!(
        "attached {} ({size} bytes, {}) to {}",
        args.file.display(),
        args.artifact_type,
        subject.digest
    );
    println!("{digest}");
    Ok(())
}

/// Platforms for a message: `none, it is a single image` when there are none.
pub(crate) fn listed(platforms: &[&str]) -> String {
    if platforms.is_empty() {
        "none, it is a single image".to_string()
    } else {
        platforms.join(", ")
    }
}

/// `key=value` pairs as a map; a pair without `=` or with an empty key is refused.
fn annotations(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => anyhow::bail!("--annotation {pair:?} is not KEY=VALUE"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_key_value_pairs() {
        let a = annotations(&["a=1".into(), "b=x=y".into(), "c=".into()]).unwrap();
        assert_eq!(a["a"], "1");
        assert_eq!(a["b"], "x=y", "only the first = splits");
        assert_eq!(a["c"], "");
        assert!(annotations(&["novalue".into()]).is_err());
        assert!(annotations(&["=v".into()]).is_err());
    }
}
