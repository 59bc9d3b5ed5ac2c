//! `reconciled push module.wasm registry/repo:tag`: publishes a component as a Wasm OCI
//! artifact and prints the reference pinned by digest, ready for a `.wasm.ref` key or
//! `module = "oci://…"`. Also the registry options every command that speaks to a registry
//! takes.

use std::path::PathBuf;

use clap::Args;
use reconciled::sources::oci::credentials::Login;
use reconciled::sources::oci::{ModuleRef, Registry, Settings, signature};

/// How to reach a registry: the login, an extra CA, plain HTTP.
#[derive(Args)]
pub(crate) struct RegistryArgs {
    /// Registry user; the password is read from $RECONCILED_REGISTRY_PASSWORD. Without it,
    /// access is anonymous.
    #[arg(long, short = 'u')]
    username: Option<String>,
    /// PEM CA certificates to trust beside the system's.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Speak plain HTTP to this registry (a local one only).
    #[arg(long)]
    insecure: bool,
}

impl RegistryArgs {
    /// The login, with its password from the environment.
    pub(crate) fn login(&self) -> anyhow::Result<Option<Login>> {
        let Some(username) = &self.username else {
            return Ok(None);
        };
        Ok(Some(Login {
            username: username.clone(),
            password: std::env::var("RECONCILED_REGISTRY_PASSWORD").map_err(|_| {
                anyhow::anyhow!(
                    "--username {username} needs the password in $RECONCILED_REGISTRY_PASSWORD"
                )
            })?,
        }))
    }

    /// A client for `reference`'s registry.
    pub(crate) fn registry(&self, reference: &ModuleRef) -> anyhow::Result<Registry> {
        Ok(Registry::new(Settings {
            ca_file: self.ca_file.clone(),
            insecure: if self.insecure {
                vec![reference.registry().to_string()]
            } else {
                Vec::new()
            },
            ..Settings::default()
        })?)
    }
}

/// `reconciled push`.
#[derive(Args)]
pub(crate) struct PushArgs {
    /// The component (.wasm).
    module: PathBuf,
    /// Where: `registry/repository:tag` (`oci://` optional).
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Also push a cosign signature made with this PKCS#8 PEM ECDSA P-256 key, which hosts
    /// with the matching `[registry] verify_key` require.
    #[arg(long)]
    sign_key: Option<PathBuf>,
}

/// Runs `reconciled push`.
pub(crate) async fn push(args: PushArgs) -> anyhow::Result<()> {
    let reference: ModuleRef = args.reference.parse()?;
    if reference.pinned().is_some() {
        anyhow::bail!(
            "{reference} is pinned by digest; push to a tag (registry/repo:tag) and use the digest printed"
        );
    }
    let module = std::fs::read(&args.module)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.module.display()))?;
    // A core module or anything else would be refused by every host at load: say so now.
    if !module.starts_with(b"\0asm") || module.get(4..8) != Some(&[0x0d, 0x00, 0x01, 0x00]) {
        anyhow::bail!(
            "{} is not a WebAssembly component; build it for wasm32-wasip2 (Rust) or with guests/js or guests/python's build.sh",
            args.module.display()
        );
    }
    let login = args.registry.login()?;
    let sign = match &args.sign_key {
        Some(path) => Some(signature::read_signing_key(path)?),
        None => None,
    };
    let registry = args.registry.registry(&reference)?;
    eprintln!(
        "pushing {} ({} bytes) to {reference}{}",
        args.module.display(),
        module.len(),
        if sign.is_some() { ", signed" } else { "" }
    );
    let digest = registry
        .push(&reference, login.as_ref(), module, sign.as_ref())
        .await?;
    let pinned = reference.at(&digest);
    let tagged = args
        .reference
        .trim()
        .trim_start_matches("oci://")
        .to_string();
    // registry/repo:tag@sha256:…: the tag for people, the digest for the host.
    println!("{tagged}@{}", pinned.pinned().unwrap_or(&digest));
    Ok(())
}
