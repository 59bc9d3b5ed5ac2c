//! Runs a guest against one fixture case: the host's real informer stores (filled from the
//! case's objects, with the guest's field indexes), the real imports, and the in-memory
//! [`Server`] in place of the cluster; fixed clocks and randomness.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::controller::Settings;
use crate::controller::plan::{self, Plan};
use crate::guest::bindings::{Description, Gvk, Request};
use crate::guest::imports::{Declared, GuestContext, Limits};
use crate::guest::world::World;
use crate::guest::{CallError, Module, Reconciled};
use crate::informer::Informer;
use crate::offline::fixture::{Case, Outcome};
use crate::offline::kinds::Kinds;
use crate::offline::server::Server;

/// Why a guest cannot be run offline at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `describe()` failed.
    #[error("describe() failed: {0}")]
    Describe(#[from] CallError),
    /// The declaration is not one the host would run.
    #[error("{0}")]
    Plan(#[from] crate::controller::Error),
    /// A kind it declares cannot be served.
    #[error(transparent)]
    Kind(#[from] crate::offline::kinds::Error),
}

/// A guest ready to run cases: its module, declaration and plan.
#[derive(Debug)]
pub struct Subject {
    module: Module,
    plan: Plan,
    kinds: Kinds,
    limits: Limits,
}

/// One case's server and the guest's caches over it, kept across the calls of a run.
#[derive(Debug)]
pub struct Rig {
    /// The in-memory API server.
    pub server: Server,
    declared: HashMap<Gvk, Declared>,
}

impl Rig {
    /// Forgets what the guest wrote, as a restarted host does: read-your-writes waits for
    /// nothing written before.
    pub fn restart(&mut self) {
        for d in self.declared.values_mut() {
            d.floors = Arc::default();
        }
    }
}

/// What one case came to.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The outcome, writes and Events.
    pub outcome: Outcome,
    /// The guest's error message, or the trap's, when there is one: shown, not compared.
    pub message: Option<String>,
    /// What the offline server could not model for this case.
    pub notes: Vec<&'static str>,
    /// How long the reconcile took.
    pub took: Duration,
    /// The run as a recording: every read with its answer, as the imports saw it.
    pub recording: Option<crate::guest::tape::Recording>,
}

/// Why one case could not be run.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// An object or stale entry the server cannot hold.
    #[error("{0}")]
    Server(#[from] crate::offline::server::Error),
    /// A stale entry naming no object.
    #[error("stale: {0} is not among the objects of objects.yaml; name an object the case holds")]
    NoSuchObject(String),
}

impl Subject {
    /// Describes `module` and plans it as the host would, with a full grant; each declared kind
    /// must be in `kinds`.
    pub async fn new(module: Module, kinds: Kinds) -> Result<Self, Error> {
        let limits = Limits::default();
        let desc: Description = module.describe(limits).await?;
        let settings = Settings::new("test");
        let plan = plan::plan(&desc, &settings)?;
        for k in &plan.kinds {
            kinds.get(&k.kind)?;
        }
        Ok(Self {
            module,
            plan,
            kinds,
            limits,
        })
    }

    /// The module.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// Runs `case`: builds its server and caches, calls `reconcile` once and collects what
    /// happened.
    pub async fn run(&self, case: &Case) -> Result<Ran, CaseError> {
        let rig = self.rig(case)?;
        let started = Instant::now();
        let reconciled = self.reconcile(&rig, case, case.now).await;
        let took = started.elapsed();
        let (outcome, message) = crate::guest::tape::outcome_of(&reconciled.result);
        let server = &rig.server;
        Ok(Ran {
            outcome: Outcome {
                outcome,
                writes: server.writes(),
                events: server.events(),
            },
            message,
            notes: server.notes(),
            took,
            recording: reconciled.recording,
        })
    }

    /// Builds `case`'s server, with its objects, stale entries and faults, and the guest's
    /// caches over it.
    pub fn rig(&self, case: &Case) -> Result<Rig, CaseError> {
        let server = Server::new(self.kinds.clone(), case.now);
        for o in &case.objects {
            server.seed(o.clone())?;
        }
        let client = server.client();
        let mut declared = HashMap::new();
        for k in &self.plan.kinds {
            let kind = self
                .kinds
                .get(&k.kind)
                .expect("every planned kind was checked in Subject::new");
            let (informer, writer) =
                Informer::offline(client.clone(), k.key.clone(), kind.resource.clone());
            for index in &k.indexes {
                // Declared once per kind by the plan: a duplicate cannot happen here.
                let _ = informer.add_field_index(index);
            }
            server.attach(kind, k.key.scope.clone(), writer);
            declared.insert(
                k.kind.clone(),
                Declared {
                    informer,
                    floors: Arc::default(),
                    indexes: k.indexes.clone(),
                },
            );
        }
        for s in &case.setup.stale {
            if !server.advance(&s.api_version, &s.kind, &s.namespace, &s.name) {
                return Err(CaseError::NoSuchObject(format!(
                    "{}/{} {}/{}",
                    s.api_version, s.kind, s.namespace, s.name
                )));
            }
        }
        for f in &case.setup.faults {
            server.fail(f.clone());
        }
        Ok(Rig { server, declared })
    }

    /// Calls `reconcile` for `case`'s request once on `rig`, with the guest's clock at `now`
    /// (since the Unix epoch). Each call is a fresh instance, as live.
    pub async fn reconcile(&self, rig: &Rig, case: &Case, now: Duration) -> Reconciled {
        let ctx = Arc::new(GuestContext {
            name: case.name.clone(),
            client: rig.server.client(),
            identity: None,
            // Everything, uncached reads included: what a guest may do is the host config's
            // business, not the fixture's (recordings hold the guest's api reads).
            grant: crate::guest::grant::Grant {
                uncached_reads: true,
                ..Default::default()
            },
            declared: rig.declared.clone(),
            read_your_writes: self.plan.read_your_writes,
            limits: self.limits,
            metrics: Arc::default(),
            world: World::fixed(SystemTime::UNIX_EPOCH + now, case.setup.seed),
            settings: case.setup.settings.clone().unwrap_or_default(),
            recorder: None,
            taped: true,
        });
        let request = Request {
            namespace: case.setup.request.namespace.clone(),
            name: case.setup.request.name.clone(),
        };
        self.module.reconcile(ctx, request).await
    }

    /// Whether the guest waits for its own writes to reach the cache before reading
    /// (read-your-writes), or reads whatever the cache holds (eventual consistency).
    pub fn reads_its_writes(&self) -> bool {
        self.plan.read_your_writes
    }

    /// The kinds the guest caches, as `apiVersion/Kind`.
    pub fn cached_kinds(&self) -> Vec<String> {
        self.plan
            .kinds
            .iter()
            .filter_map(|k| self.kinds.get(&k.kind).ok())
            .map(|k| format!("{}/{}", k.resource.api_version, k.resource.kind))
            .collect()
    }
}
