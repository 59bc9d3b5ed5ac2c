//! `reconciled sign registry/repo:tag --key cosign.key`: signs a manifest (the host's image, an
//! image index, a module) in cosign's key-pair format, by digest, and prints the reference
//! pinned by that digest.

use std::path::PathBuf;

use clap::Args;
use reconciled::sources::oci::{ModuleRef, signature};

use super::push::RegistryArgs;

/// `reconciled sign`.
#[derive(Args)]
pub(crate) struct SignArgs {
    /// What: `registry/repository:tag` or `…@sha256:<hex>`. A tag is resolved once, and the
    /// digest it named is what gets signed.
    reference: String,
    /// The PKCS#8 PEM ECDSA P-256 private key.
    #[arg(long)]
    key: PathBuf,
    /// For an image index (a multi-platform image), also sign every image it lists, as
    /// `cosign sign --recursive` does: a check by platform image then passes too.
    #[arg(long)]
    recursive: bool,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `reconciled sign`.
pub(crate) async fn sign(args: SignArgs) -> anyhow::Result<()> {
    let reference: ModuleRef = args.reference.parse()?;
    let key = signature::read_signing_key(&args.key)?;
    let login = args.registry.login()?;
    let registry = args.registry.registry(&reference)?;
    let described = registry.describe(&reference, login.as_ref()).await?;
    let pinned = reference.at(&described.digest);
    if args.recursive {
        for (platform, digest) in &described.manifests {
            registry
                .sign(&reference.at(digest), login.as_ref(), &key)
                .await?;
            eprintln!(
                "signed {digest} ({platform}) as {}",
                signature::tag_of(digest)
            );
        }
    }
    // The index last: whoever checks it finds every image it lists signed already.
    registry.sign(&pinned, login.as_ref(), &key).await?;
    eprintln!(
        "signed {} ({}) as {}",
        described.digest,
        described.media_type,
        signature::tag_of(&described.digest)
    );
    println!("{}", pinned.to_string().trim_start_matches("oci://"));
    Ok(())
}
