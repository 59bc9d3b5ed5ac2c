//! `reconciled replay recording/ --guest new.wasm`: feeds recorded reconciles to another version
//! of the guest, offline, and reports per request what it would do differently.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use reconciled::offline::replay;

/// `reconciled replay`.
#[derive(Args)]
pub(crate) struct ReplayArgs {
    /// The folder `reconciled run --record` wrote.
    dir: PathBuf,
    /// The version to replay the recordings against (.wasm component).
    #[arg(long)]
    guest: PathBuf,
    /// A file of CustomResourceDefinitions of kinds the guest reads; repeatable.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// Differences that are expected, reported but not failing: `outcome`, `events`, `reads`,
    /// or the `apiVersion/Kind` of writes (e.g. `v1/ConfigMap`); repeatable.
    #[arg(long = "allow")]
    allow: Vec<String>,
}

/// Runs `reconciled replay`.
pub(crate) async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let recordings = replay::load(&args.dir)?;
    let subject = super::test::subject(&args.guest, None, &args.crds).await?;
    let (mut same, mut different, mut failing, mut broken) = (0, 0, 0, 0);
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for (path, recording) in &recordings {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let changes = match replay::replay(&subject, &name, recording).await {
            Ok(c) => c,
            Err(e) => {
                broken += 1;
                println!("BROKEN  {name}: {e}");
                continue;
            }
        };
        if changes.is_empty() {
            same += 1;
            continue;
        }
        different += 1;
        let r = &recording.request;
        let fails = changes
            .iter()
            .any(|c| !args.allow.iter().any(|a| *a == c.subject()));
        if fails {
            failing += 1;
        }
        println!(
            "{}  {name} ({}/{}): {} difference(s)",
            if fails { "DIFFERS" } else { "allowed" },
            r.namespace,
            r.name,
            changes.len()
        );
        for c in &changes {
            *counts.entry(kind_of(c)).or_default() += 1;
            for line in c.to_string().lines() {
                println!("    {line}");
            }
        }
    }
    let detail: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!(
        "replayed {} reconciles in {:.2} s: {same} the same, {different} different{}{}",
        recordings.len(),
        started.elapsed().as_secs_f64(),
        if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.join(", "))
        },
        if broken > 0 {
            format!(", {broken} could not be replayed")
        } else {
            String::new()
        }
    );
    if failing > 0 || broken > 0 {
        anyhow::bail!(
            "{failing} reconcile(s) differ beyond what --allow accepts, {broken} could not be replayed"
        );
    }
    Ok(())
}

fn kind_of(c: &replay::Change) -> &'static str {
    use replay::Change as C;
    match c {
        C::Outcome { .. } => "outcomes changed",
        C::WriteAdded(_) => "writes added",
        C::WriteRemoved(_) => "writes removed",
        C::WriteChanged { .. } => "writes changed",
        C::EventAdded(_) => "events added",
        C::EventRemoved(_) => "events removed",
        C::NewRead(_) => "new reads",
    }
}
