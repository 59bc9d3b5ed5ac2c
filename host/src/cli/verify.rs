//! `reconciled verify registry/repo:tag --key cosign.pub`: checks, before anything runs it, that
//! a manifest (the host's image, a module) is signed by the key and carries the artifacts asked
//! for (an SBOM); for an image index, that it lists the platforms asked for and that each of
//! those images is signed and carries them too. Exits non-zero naming the first thing missing.

use std::path::PathBuf;

use clap::Args;
use p256::ecdsa::VerifyingKey;
use reconciled::sources::oci::credentials::Login;
use reconciled::sources::oci::{ModuleRef, Registry, signature};

use super::attach::listed;
use super::push::RegistryArgs;

/// Largest attached artifact read to check its digest.
const MAX_ARTIFACT: usize = 64 << 20;

/// `reconciled verify`.
#[derive(Args)]
pub(crate) struct VerifyArgs {
    /// What: `registry/repository:tag` or `…@sha256:<hex>`. A tag is resolved once; what is
    /// checked, and printed, is the digest it named.
    reference: String,
    /// The PEM ECDSA P-256 public key (cosign.pub) it must be signed by.
    #[arg(long)]
    key: PathBuf,
    /// A platform (`linux/arm64`) the image index must list; repeatable. Each one's image is
    /// then checked as the index is: signed, and carrying every `--artifact`.
    #[arg(long, value_name = "OS/ARCH")]
    platform: Vec<String>,
    /// An artifact type it must carry as a referrer, such as `application/vnd.cyclonedx+json`;
    /// repeatable. Each is read and checked against its digest. With `--platform`, asked of
    /// each platform's image rather than of the index.
    #[arg(long, value_name = "MEDIA_TYPE")]
    artifact: Vec<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `reconciled verify`.
pub(crate) async fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let reference: ModuleRef = args.reference.parse()?;
    let key = signature::read_public_key(&args.key)?;
    let login = args.registry.login()?;
    let registry = args.registry.registry(&reference)?;
    let described = registry.describe(&reference, login.as_ref()).await?;
    let check = Check {
        registry: &registry,
        login: login.as_ref(),
        key: &key,
        key_file: &args.key,
        artifacts: &args.artifact,
    };
    let index = reference.at(&described.digest);
    if !described.manifests.is_empty() {
        println!(
            "{}: an image index of {}",
            shown(&index),
            listed(&described.platforms())
        );
    }
    check.signed(&index).await?;
    if args.platform.is_empty() {
        return check.carries(&index).await;
    }
    for platform in &args.platform {
        let Some(digest) = described.image_for(platform) else {
            anyhow::bail!(
                "{} lists no {platform} image (it lists: {}); push a manifest list with one",
                shown(&index),
                listed(&described.platforms())
            );
        };
        let image = reference.at(digest);
        println!("{platform}:");
        check.signed(&image).await?;
        check.carries(&image).await?;
    }
    Ok(())
}

/// What every manifest checked is held to.
struct Check<'a> {
    registry: &'a Registry,
    login: Option<&'a Login>,
    key: &'a VerifyingKey,
    key_file: &'a std::path::Path,
    artifacts: &'a [String],
}

impl Check<'_> {
    async fn signed(&self, at: &ModuleRef) -> anyhow::Result<()> {
        self.registry.verify(at, self.login, self.key).await?;
        println!("{}: signed by {}", shown(at), self.key_file.display());
        Ok(())
    }

    async fn carries(&self, at: &ModuleRef) -> anyhow::Result<()> {
        if self.artifacts.is_empty() {
            return Ok(());
        }
        let attached = self.registry.referrers(at, self.login, None).await?;
        for wanted in self.artifacts {
            let Some(found) = attached.iter().find(|r| &r.artifact_type == wanted) else {
                anyhow::bail!(
                    "{} carries no {wanted} artifact (it carries: {}); attach one with `reconciled attach {} --artifact-type {wanted} --file …`",
                    shown(at),
                    if attached.is_empty() {
                        "none".to_string()
                    } else {
                        attached
                            .iter()
                            .map(|r| r.artifact_type.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    shown(at)
                );
            };
            let bytes = self
                .registry
                .pull_referrer(at, self.login, found, MAX_ARTIFACT)
                .await?;
            println!(
                "{}: carries {wanted} {} ({} bytes, digest checked)",
                shown(at),
                found.digest,
                bytes.len()
            );
        }
        Ok(())
    }
}

/// A reference as people type it, without `oci://`.
fn shown(r: &ModuleRef) -> String {
    r.to_string().trim_start_matches("oci://").to_string()
}
