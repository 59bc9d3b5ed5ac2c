//! One version of a guest's module and everything built from its declaration: its context, the
//! informers it reads, the roles of each kind, and its shadow.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::AbortHandle;

use super::plan::{Plan, Role, plan};
use super::settings::Settings;
use super::shadow::{self, Problem, Shadow};
use crate::guest::Module;
use crate::guest::bindings::Gvk;
use crate::guest::imports::{Declared, GuestContext, Metrics};
use crate::guest::read_your_writes::Floors;
use crate::guest::settings::GuestSettings;
use crate::informer::Informer;

/// One version of the guest: its module and everything built from its declaration. Swapped
/// whole, so a reconcile always sees a module with the context it declared.
pub(super) struct Version {
    pub(super) module: Module,
    pub(super) ctx: Arc<GuestContext>,
    pub(super) informers: Vec<Arc<Informer>>,
    /// Roles per kind, read by the handler tasks on every event.
    pub(super) roles: HashMap<Gvk, Vec<Role>>,
    pub(super) for_kind: Gvk,
    pub(super) loaded_at: std::time::SystemTime,
    pub(super) shadow: Option<Arc<shadow::Shadow>>,
}

/// A subscription of the guest's, drained by its handler task.
pub(super) struct Link {
    pub(super) informer: Arc<Informer>,
    pub(super) task: AbortHandle,
}

pub(super) fn build_version(
    settings: &Settings,
    client: &kube::Client,
    module: Module,
    plan: &Plan,
    subscriptions: &[crate::informer::Subscription],
    floors: &HashMap<Gvk, Arc<Floors>>,
    metrics: Arc<Metrics>,
) -> Version {
    let informers: Vec<Arc<Informer>> =
        subscriptions.iter().map(|s| s.informer().clone()).collect();
    build_version_from(
        settings,
        &settings.guest_settings,
        client,
        module,
        plan,
        &informers,
        floors,
        metrics,
    )
}

/// The version for `plan`, with `informers[i]` serving `plan.kinds[i]`. Read-your-writes
/// floors of kinds both versions read carry over: a write the old version made must still be
/// visible to the new one's reads.
#[expect(
    clippy::too_many_arguments,
    reason = "each is one input of a version, named at the call; a struct of them would be built once per call"
)]
pub(super) fn build_version_from(
    settings: &Settings,
    guest_settings: &GuestSettings,
    client: &kube::Client,
    module: Module,
    plan: &Plan,
    informers: &[Arc<Informer>],
    floors: &HashMap<Gvk, Arc<Floors>>,
    metrics: Arc<Metrics>,
) -> Version {
    let mut declared = HashMap::new();
    let mut roles = HashMap::new();
    for (k, informer) in plan.kinds.iter().zip(informers) {
        declared.insert(
            k.kind.clone(),
            Declared {
                informer: informer.clone(),
                floors: floors.get(&k.kind).cloned().unwrap_or_default(),
                indexes: k.indexes.clone(),
            },
        );
        roles.insert(k.kind.clone(), k.roles.clone());
    }
    let ctx = Arc::new(GuestContext {
        name: settings.name.clone(),
        client: client.clone(),
        identity: settings.identity.clone(),
        grant: settings.grant.clone(),
        declared,
        read_your_writes: plan.read_your_writes,
        limits: settings.limits,
        metrics,
        world: crate::guest::world::World::real(&settings.environment),
        settings: guest_settings.clone(),
        recorder: settings.recorder.as_ref().map(|r| r.0.clone()),
        taped: settings.shadow.is_some(),
    });
    Version {
        module,
        ctx,
        informers: informers.to_vec(),
        roles,
        for_kind: plan.for_kind.clone(),
        loaded_at: std::time::SystemTime::now(),
        shadow: None,
    }
}

/// The shadow of `settings` ready beside `live`, if there is one that can run.
pub(super) async fn attach_shadow(
    settings: &Settings,
    live: &Version,
    client: &kube::Client,
    counts: &shadow::Counts,
) -> Option<Arc<shadow::Shadow>> {
    let prepared = prepare_shadow(settings, live, client).await?;
    counts.set_problem(
        &settings.name,
        prepared.as_ref().err().map(ToString::to_string),
    );
    prepared.ok().map(Arc::new)
}

/// Prepares `settings.shadow` to run beside `live`; the reason it cannot, otherwise.
async fn prepare_shadow(
    settings: &Settings,
    live: &Version,
    client: &kube::Client,
) -> Option<Result<Shadow, Problem>> {
    match settings.shadow.as_ref()?.0.clone() {
        Ok(module) => {
            Some(prepare_module(settings, &live.ctx.settings, live, client, module).await)
        }
        Err(e) => Some(Err(e)),
    }
}

/// `module` ready to run as a shadow of `live` with `guest_settings`, or why it cannot.
pub(super) async fn prepare_module(
    settings: &Settings,
    guest_settings: &GuestSettings,
    live: &Version,
    client: &kube::Client,
    module: Module,
) -> Result<Shadow, Problem> {
    let desc =
        (module.describe(settings.limits).await).map_err(|e| Problem::Describe(e.to_string()))?;
    let mut plan = plan(&desc, settings).map_err(|e| Problem::Plan(e.to_string()))?;
    // A guest whose keys are split across replicas reads the shards held here, as the live one.
    let live_shard =
        (live.ctx.declared.get(&live.for_kind)).and_then(|d| d.informer.key().scope.shard.clone());
    plan.shard_for_kind(live_shard);
    if plan.for_kind != live.for_kind {
        return Err(Problem::OtherKind {
            shadow: plan.for_kind.to_string(),
            live: live.for_kind.to_string(),
        });
    }
    let mut declared = HashMap::new();
    for k in &plan.kinds {
        let Some(d) = live.ctx.declared.get(&k.kind) else {
            return Err(Problem::OtherRead(k.kind.to_string()));
        };
        if d.informer.key() != &k.key {
            return Err(Problem::OtherScope(k.kind.to_string()));
        }
        for index in &k.indexes {
            // The informer is shared: an index the live version already declared is fine.
            let _ = d.informer.add_field_index(index);
        }
        declared.insert(
            k.kind.clone(),
            Declared {
                informer: d.informer.clone(),
                floors: Arc::default(),
                indexes: k.indexes.clone(),
            },
        );
    }
    let ctx = Arc::new(GuestContext {
        name: format!("{} (shadow)", settings.name),
        client: shadow::dry_run(client.clone()),
        identity: settings.identity.clone(),
        grant: settings.grant.clone(),
        declared,
        read_your_writes: false,
        limits: settings.limits,
        metrics: Arc::default(),
        world: crate::guest::world::World::real(&settings.environment),
        settings: guest_settings.clone(),
        recorder: None,
        taped: true,
    });
    Ok(Shadow::new(module, ctx))
}
