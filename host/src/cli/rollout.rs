//! `reconciled rollout resume`: resumes a Reconciler's rollout from a pause (or a halt) by giving
//! `spec.rollout.resume` a new value, the time of asking, as `kubectl patch` would.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

/// `reconciled rollout`.
#[derive(Args)]
pub(crate) struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
}

#[derive(Subcommand)]
enum RolloutCommand {
    /// Resume a paused or halted rollout of Reconciler NAMESPACE/NAME.
    Resume(ResumeArgs),
}

#[derive(Args)]
struct ResumeArgs {
    /// The Reconciler, NAMESPACE/NAME.
    reconciler: String,
    /// The cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// Runs `reconciled rollout …`.
pub(crate) async fn rollout(args: RolloutArgs) -> anyhow::Result<()> {
    let RolloutCommand::Resume(args) = args.command;
    let Some((namespace, name)) = args.reconciler.split_once('/') else {
        anyhow::bail!(
            "{:?} is not NAMESPACE/NAME; name the Reconciler as `kubectl get reconcilers -A` lists it",
            args.reconciler
        );
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let client = kube::Client::try_from(config)?;
    let gvk = GroupVersionKind::gvk("reconciled.dev", "v1alpha1", "Reconciler");
    let api = kube::Api::<DynamicObject>::namespaced_with(
        client,
        namespace,
        &ApiResource::from_gvk(&gvk),
    );
    // To the nanosecond: two resumes in one second are two resumes.
    let token = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({ "spec": { "rollout": { "resume": token } } });
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| anyhow::anyhow!("could not resume Reconciler {namespace}/{name}: {e}"))?;
    let summary = patched.data["status"]["rollout"]["summary"]
        .as_str()
        .unwrap_or("no rollout recorded yet")
        .to_string();
    println!(
        "Reconciler {namespace}/{name}: asked to resume (spec.rollout.resume = {token}); it was {summary}"
    );
    Ok(())
}
