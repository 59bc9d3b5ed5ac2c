//! Guest runtime: one wasmtime engine, each digest compiled once into an `InstancePre` shared
//! by every guest that runs it, and a fresh store per call with its own limits.
//!
//! A fresh store per reconcile (about 30–40 µs for a small Rust guest) means a buggy guest
//! cannot carry state, corrupted memory or leaked allocations from one reconcile into the next.
//! Every call is bounded: a wall deadline through epoch interruption, a memory cap, a host-call
//! cap and a byte budget (see [`Limits`]). Whatever goes wrong inside a call (trap, panic,
//! deadline, out of memory) is a [`CallError`] for that call only.

pub mod artifact_cache;
pub mod bindings;
mod call;
mod code_pager;
pub mod divergence;
mod engine;
pub mod grant;
pub mod identity;
pub mod imports;
mod loaded;
pub mod read_your_writes;
pub mod settings;
pub mod tape;
pub mod wit_version;
pub mod world;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::path::Path;

use sha2::Digest;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

pub use call::{Blame, CallError, Usage};

use crate::guest::artifact_cache::{ArtifactCache, Origin};
use crate::guest::bindings::{
    Description, GuestError, Gvk, Outcome, Reconciler, ReconcilerPre, Request,
};
use crate::guest::engine::{Instances, Ticker};
use crate::guest::imports::{GuestContext, HostState, Limits};
use crate::guest::loaded::{Compiled, Loaded};

/// Errors from loading a module.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a component, or not valid wasm at all.
    #[error(
        "not a valid wasm component ({size} bytes, sha256 {digest}): {reason}; build it for wasm32-wasip2 (cargo build --target wasm32-wasip2)"
    )]
    Invalid {
        /// Module size.
        size: usize,
        /// Its sha256.
        digest: String,
        /// What wasmtime said.
        reason: String,
    },
    /// A component, but not of the `reconciled:runtime/reconciler` world.
    #[error(
        "the component (sha256 {digest}) does not fit the reconciled:runtime@{} `reconciler` world: {reason}; build it against wit/runtime.wit",
        wit_version::SERVED
    )]
    WrongWorld {
        /// Its sha256.
        digest: String,
        /// What is missing or mismatched.
        reason: String,
    },
    /// A component of the world that does not link here, built against a version of it this
    /// host cannot serve (a newer one, whose additions it uses, or another major one).
    #[error("the component (sha256 {digest}) cannot run here: {mismatch}")]
    WitVersion {
        /// Its sha256.
        digest: String,
        /// Which import, and why.
        mismatch: wit_version::Mismatch,
    },
    /// A component one instance of which needs more core instances, memories or tables than
    /// the host's whole instance pool holds: it could never run.
    #[error(
        "the component (sha256 {digest}) needs {core_instances} core instances, {memories} memories and {tables} tables for one instance, more than the host's instance pool holds for all guests together ({}); build it with fewer",
        engine::POOL_LIMITS
    )]
    TooBig {
        /// Its sha256.
        digest: String,
        /// Core module instantiations one instance makes.
        core_instances: u32,
        /// Memories they define.
        memories: u32,
        /// Tables they define.
        tables: u32,
    },
    /// The engine failed: it could not be set up, or a compile task died (a host problem, not
    /// the guest's).
    #[error("the wasm engine failed: {0}")]
    Engine(String),
}

/// What one `reconcile` call came to, and where its time went.
#[derive(Debug, Clone)]
pub struct Reconciled {
    /// The guest's answer, or why the call failed.
    pub result: Result<Result<Outcome, GuestError>, CallError>,
    /// Where the time went.
    pub usage: Usage,
    /// What the call did, when its guest is recorded or taped (see [`tape`]).
    pub recording: Option<tape::Recording>,
}

impl Reconciled {
    /// Whose doing a failure was; `None` for a success. An error the guest returned is the
    /// guest's, unless its last API request failed because of the cluster: the guest passing on
    /// a 503 is not the guest's bug.
    pub fn blame(&self) -> Option<Blame> {
        match &self.result {
            Ok(Ok(_)) => None,
            Ok(Err(_)) if self.usage.cluster_failed => Some(Blame::Cluster),
            Ok(Err(_)) => Some(Blame::Guest),
            Err(e) => Some(e.blame()),
        }
    }
}

/// The one engine, its linker, and the epoch ticker that enforces deadlines.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    ticker: Arc<Ticker>,
    instances: Instances,
    artifacts: Option<ArtifactCache>,
    loaded: Loaded,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// Configures the engine (component model, async, epoch interruption, pooled instances; see
    /// `engine::engine`), links WASI and the reconciled imports, and starts the epoch ticker
    /// thread, which ticks only while a guest call runs.
    pub fn new() -> Result<Self, LoadError> {
        let engine = engine::engine().map_err(|e| LoadError::Engine(format!("{e:#}; the pool of guest instances reserves about 1 TiB of address space (not memory): check `ulimit -v`")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| LoadError::Engine(e.to_string()))?;
        Reconciler::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Engine(e.to_string()))?;
        let ticker = Ticker::start(&engine).map_err(|e| LoadError::Engine(e.to_string()))?;
        let loaded = Loaded::default();
        loaded.start_code_pager();
        Ok(Self {
            engine,
            linker,
            ticker,
            instances: Instances::new(),
            artifacts: None,
            loaded,
        })
    }

    /// Keeps compiled modules in the precompile cache under `dir` (see [`ArtifactCache`]), so
    /// that loading a module seen before skips compilation.
    ///
    /// A directory that cannot be used is an error here; callers that prefer compiling every
    /// time to not starting should log it and carry on without the cache.
    pub fn with_artifact_cache(mut self, dir: &Path) -> Result<Self, artifact_cache::Error> {
        self.use_artifact_cache(dir)?;
        Ok(self)
    }

    /// [`Runtime::with_artifact_cache`] in place: on an error the runtime is unchanged and
    /// compiles every time.
    ///
    /// The cache never prunes the artifact of a module this runtime holds in memory.
    pub fn use_artifact_cache(&mut self, dir: &Path) -> Result<(), artifact_cache::Error> {
        let loaded = self.loaded.clone();
        let cache = ArtifactCache::open(dir, &self.engine)?.pinning(move |d| loaded.holds(d));
        self.artifacts = Some(cache);
        Ok(())
    }

    /// Compiles `bytes` (off the async runtime: a large component takes seconds) and links it.
    /// A digest this runtime already holds in memory shares that code (see
    /// [`Origin::Memory`]); with a precompile cache, a module seen before is loaded from it.
    pub async fn compile(&self, bytes: Vec<u8>) -> Result<Module, LoadError> {
        self.compile_digested(bytes, None).await
    }

    /// [`Runtime::compile`] for bytes whose sha256 the caller has already computed (hashing
    /// 12 MB takes about 8 ms; a reload should do it once). The digest is trusted: it names the
    /// precompiled artifact and the code in memory, so a wrong one would run another module.
    pub async fn compile_digested(
        &self,
        bytes: Vec<u8>,
        digest: Option<String>,
    ) -> Result<Module, LoadError> {
        let size = bytes.len();
        let engine = self.engine.clone();
        let artifacts = self.artifacts.clone();
        let loaded = self.loaded.clone();
        let (digest, (found, needs), compile_time) = tokio::task::spawn_blocking(move || {
            // The clock starts here, not before the hand-off: the tenant is charged for its
            // compile, not for the time the blocking pool was busy with other tenants' work.
            let started = Instant::now();
            let digest = digest.unwrap_or_else(|| digest_of(&bytes));
            let found = match loaded.get(&digest) {
                Some(held) => Ok(Found::Held(held)),
                None => compile_or_load(&engine, artifacts.as_ref(), &digest, &bytes),
            };
            let needs = match &found {
                Ok(Found::New(component, ..)) => engine::Needs::of(&bytes, component),
                _ => engine::Needs::default(),
            };
            (digest, (found, needs), started.elapsed())
        })
        .await
        .map_err(|e| LoadError::Engine(format!("the compile task failed: {e}")))?;
        let found = found.map_err(|e| LoadError::Invalid {
            size,
            digest: digest.clone(),
            reason: format!("{e:#}"),
        })?;
        let (compiled, origin) = match found {
            Found::Held(held) => (held, Origin::Memory),
            Found::New(component, origin, staged) => {
                let weight = engine::weight(needs).ok_or_else(|| LoadError::TooBig {
                    digest: digest.clone(),
                    core_instances: needs.core_instances,
                    memories: needs.memories,
                    tables: needs.tables,
                })?;
                let pre = self.link(&component, &digest)?;
                let image = component.image_range();
                let compiled = Arc::new(Compiled {
                    compiled_bytes: (image.end as usize).saturating_sub(image.start as usize),
                    component,
                    pre,
                    weight,
                    staged: std::sync::Mutex::new(staged),
                    code_use: code_pager::CodeUse::new(),
                });
                (self.loaded.insert(&digest, compiled), origin)
            }
        };
        Ok(Module {
            engine: self.engine.clone(),
            compiled,
            artifacts: self.artifacts.clone(),
            digest,
            size,
            compile_time,
            origin,
            ticker: self.ticker.clone(),
            instances: self.instances.clone(),
        })
    }

    /// Links `component` against the host's imports, or says why it cannot run here.
    fn link(
        &self,
        component: &Component,
        digest: &str,
    ) -> Result<ReconcilerPre<HostState>, LoadError> {
        // A module built against a newer 0.1.x that uses nothing this host lacks links and
        // runs; one that does fail to link is told which versions are at stake.
        let pre = self.linker.instantiate_pre(component).map_err(|e| {
            let ty = component.component_type();
            match wit_version::check(ty.imports(&self.engine).map(|(name, _)| name)) {
                Err(mismatch) => LoadError::WitVersion {
                    digest: digest.to_string(),
                    mismatch,
                },
                Ok(()) => LoadError::WrongWorld {
                    digest: digest.to_string(),
                    reason: format!("{e:#}"),
                },
            }
        })?;
        ReconcilerPre::new(pre).map_err(|e| LoadError::WrongWorld {
            digest: digest.to_string(),
            reason: format!("{e:#}"),
        })
    }
}

/// What a load found: code already in memory, or a component loaded or compiled now (with the
/// temporary file a fresh compile is mapped from).
enum Found {
    Held(Arc<Compiled>),
    New(Component, Origin, Option<artifact_cache::Staged>),
}

/// `bytes` loaded from the precompile cache, or compiled; a fresh compile is mapped again from
/// a staged file, so that its code is file-backed from the start. Blocking.
fn compile_or_load(
    engine: &Engine,
    artifacts: Option<&ArtifactCache>,
    digest: &str,
    bytes: &[u8],
) -> wasmtime::Result<Found> {
    let Some(cache) = artifacts else {
        return Component::new(engine, bytes).map(|c| Found::New(c, Origin::Compiled, None));
    };
    let (component, origin) = cache.load_or_compile(engine, digest, bytes)?;
    if origin == Origin::Compiled
        && let Some((mapped, staged)) = cache.stage(engine, &component, digest)
    {
        return Ok(Found::New(mapped, origin, Some(staged)));
    }
    Ok(Found::New(component, origin, None))
}

/// The sha256 of a module, hex: how guests' versions are named everywhere.
pub fn digest_of(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A compiled, linked guest version. Cheap to clone; each call gets a fresh store.
///
/// Where it may surprise: modules of one digest loaded by one [`Runtime`] share their code,
/// whoever loaded them; each keeps its own [`origin`](Self::origin) and
/// [`compile_time`](Self::compile_time), those of its own load.
#[derive(Clone)]
pub struct Module {
    engine: Engine,
    compiled: Arc<Compiled>,
    artifacts: Option<ArtifactCache>,
    digest: String,
    size: usize,
    compile_time: Duration,
    origin: Origin,
    ticker: Arc<Ticker>,
    instances: Instances,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("digest", &self.digest)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Module {
    /// The module's sha256, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The module's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes of the native code image wasmtime holds for this module (machine code, its data
    /// and metadata: what the precompile cache stores), from [`Component::image_range`].
    ///
    /// Where it may surprise: it is usually several times [`size`](Self::size), and guests
    /// running one digest share one image, so each reports the same bytes: summing it over
    /// guests counts a shared image once per guest.
    pub fn compiled_bytes(&self) -> usize {
        self.compiled.compiled_bytes
    }

    /// Where the native code image lies in this process's address space: two modules share
    /// their code when the ranges are equal, and `/proc/self/maps` says what backs it.
    pub fn image_range(&self) -> std::ops::Range<usize> {
        let image = self.compiled.component.image_range();
        image.start as usize..image.end as usize
    }

    /// How long compiling (or loading from the precompile cache) took, hashing included.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Where this load found the native code: in memory, in the precompile cache, or nowhere
    /// (compiled now).
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Keeps the native code in the runtime's precompile cache, in the background, if it is
    /// not there yet. Call it once the module is validated: the cache holds only modules that
    /// loaded, so rejected uploads cannot fill the disk. Must be called inside a tokio runtime;
    /// await the handle when the process may exit before the store is done.
    ///
    /// A module sharing the code of another load of its digest keeps that load's staged
    /// artifact, so the one guest of several that passes validation is enough.
    pub fn persist_artifact(&self) -> Option<tokio::task::JoinHandle<()>> {
        let cache = self.artifacts.clone()?;
        let staged = self
            .compiled
            .staged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if staged.is_none() && self.origin != Origin::Compiled {
            return None;
        }
        let (component, digest) = (self.compiled.component.clone(), self.digest.clone());
        Some(tokio::task::spawn_blocking(move || match staged {
            Some(staged) => staged.keep(),
            None => cache.store(&component, &digest),
        }))
    }

    fn store(&self, ctx: Option<Arc<GuestContext>>, limits: Limits) -> Store<HostState> {
        let mut store = Store::new(&self.engine, HostState::new(ctx, limits));
        store.limiter(|s| &mut s.limits);
        arm_deadline(&mut store, limits.deadline);
        store
    }

    /// Pages out this module's code now, as the code pager does after an idle spell, and
    /// returns the bytes advised. **For benchmarks only** (the `bench` feature): `bench/` uses it
    /// to measure what the first call after a page-out costs.
    #[cfg(feature = "bench")]
    pub fn page_out_code(&self) -> usize {
        code_pager::page_out_if_idle(
            &self.compiled.code_use,
            self.compiled.component.image_range(),
            Duration::ZERO,
        )
    }

    #[cfg(feature = "bench")]
    /// An instance kept across calls. **For benchmarks only** (the `bench` feature): the host never reuses instances,
    /// since a guest's globals, heap growth and leaks would carry from one reconcile into the
    /// next. `bench/` uses this to measure what a fresh store per call costs.
    pub async fn reused_instance(
        &self,
        ctx: Arc<GuestContext>,
    ) -> Result<ReusedInstance, CallError> {
        let limits = ctx.limits;
        let permit = self.instances.permit(self.compiled.weight).await;
        let _running = self.ticker.running();
        let mut store = self.store(Some(ctx), limits);
        let instance = self
            .compiled
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| classify(e, &store, limits, &Usage::default()))?;
        Ok(ReusedInstance {
            store,
            instance,
            limits,
            ticker: self.ticker.clone(),
            _permit: permit,
        })
    }

    /// Runs `f` with a fresh instance in a fresh store, bounded by `limits`, classifies any
    /// failure and says where the time went.
    async fn call<R>(
        &self,
        ctx: Option<Arc<GuestContext>>,
        limits: Limits,
        f: impl AsyncFnOnce(&Reconciler, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> (Result<R, CallError>, Usage, Option<tape::Tape>) {
        // Waiting for room in the pool is not the guest's time; the permit outlives the store.
        let _permit = self.instances.permit(self.compiled.weight).await;
        let started = Instant::now();
        let _running = self.ticker.running();
        self.compiled.code_use.touch();
        let mut store = self.store(ctx, limits);
        // Host imports may wait (I/O, read-your-writes); the epoch only runs while wasm does,
        // so the whole call also gets a wall-clock bound (with grace for the last import).
        let (timed, cpu) = {
            let mut run = std::pin::pin!(async {
                let instance = self.compiled.pre.instantiate_async(&mut store).await?;
                f(&instance, &mut store).await
            });
            // The guest runs inside `poll`, on this thread (on a fiber of wasmtime's); an
            // import that waits returns Pending. So the CPU this thread spends in each poll is
            // the call's.
            let mut cpu = Duration::ZERO;
            let metered = std::future::poll_fn(|cx| {
                let before = thread_cpu();
                let polled = run.as_mut().poll(cx);
                cpu += thread_cpu().saturating_sub(before);
                polled
            });
            let bound = limits.deadline + Duration::from_secs(1);
            (tokio::time::timeout(bound, metered).await, cpu)
        };
        self.compiled.code_use.touch();
        let usage = usage_of(&store, started, cpu);
        if let Some(ctx) = &store.data().ctx {
            let peak = usage.memory_bytes as u64;
            ctx.metrics
                .peak_memory_bytes
                .fetch_max(peak, Ordering::Relaxed);
        }
        let result = match timed {
            Ok(r) => r.map_err(|e| classify(e, &store, limits, &usage)),
            // Only a host import can outlast the epoch deadline, but the guest may have spent
            // most of the time before it: whoever held most of it is to blame. The import cut
            // short has counted its wait.
            Err(_) => Err(CallError::Deadline {
                limit: limits.deadline,
                blame: usage.deadline_blame(),
            }),
        };
        let tape = store.data_mut().tape.take();
        (result, usage, tape)
    }

    /// Calls `describe()` in a fresh instance. Host imports are unavailable (they trap).
    pub async fn describe(&self, limits: Limits) -> Result<Description, CallError> {
        self.call(None, limits, async |r, s| r.call_describe(s).await)
            .await
            .0
    }

    /// Calls `reconcile(request)` in a fresh instance.
    ///
    /// With a recorder in `ctx`, what the call did is recorded once it ends.
    pub async fn reconcile(&self, ctx: Arc<GuestContext>, request: Request) -> Reconciled {
        let limits = ctx.limits;
        let started = (ctx.recorder.is_some() || ctx.taped).then(tape::now_rfc3339);
        let (result, usage, tape) = self
            .call(Some(ctx.clone()), limits, async |r, s| {
                r.call_reconcile(s, &request).await
            })
            .await;
        let recording = tape.map(|tape| {
            let (outcome, message) = tape::outcome_of(&result);
            tape::Recording {
                guest: ctx.name.clone(),
                module: self.digest.clone(),
                request: tape::RequestKey {
                    namespace: request.namespace.clone(),
                    name: request.name.clone(),
                },
                started: started.clone().unwrap_or_default(),
                seed: tape.seed,
                outcome,
                message,
                cut: tape.cut,
                reads: tape.reads,
                writes: tape.writes,
                events: tape.events,
                settings: (!ctx.settings.is_empty()).then(|| ctx.settings.clone()),
            }
        });
        if let (Some(recorder), Some(recording)) = (&ctx.recorder, &recording) {
            // Serialising and writing a file is no work for the reconcile's thread.
            let (recorder, recording) = (recorder.clone(), recording.clone());
            tokio::task::spawn_blocking(move || recorder.keep(recording));
        }
        Reconciled {
            result,
            usage,
            recording,
        }
    }

    /// Calls `map(kind, object)` in a fresh instance; says where the time went, as
    /// [`Module::reconcile`] does, so that its CPU is charged too.
    pub async fn map(
        &self,
        ctx: Arc<GuestContext>,
        kind: Gvk,
        object: String,
    ) -> (Result<Vec<Request>, CallError>, Usage) {
        let limits = ctx.limits;
        let (result, usage, _) = self
            .call(Some(ctx), limits, async |r, s| {
                r.call_map(s, &kind, &object).await
            })
            .await;
        (result, usage)
    }
}

/// Traps the guest once `after` has passed; until then yields to the async runtime every tick.
fn arm_deadline(store: &mut Store<HostState>, after: Duration) {
    let deadline = Instant::now() + after;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            // Yield every tick: a spinning guest shares its worker thread with the host. Through
            // tokio's `yield_now`, which puts the guest back only after the worker has looked
            // for I/O: a task waking itself (wasmtime's plain yield) is run again at once, and a
            // worker that always has a task to run polls its sockets only every 61 polls, which
            // with guests spinning 5 ms a poll left informers and Lease renewals waiting 300 ms
            // for each read.
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        }
    });
}

/// A guest instance reused across calls; see [`Module::reused_instance`].
#[cfg(feature = "bench")]
pub struct ReusedInstance {
    store: Store<HostState>,
    instance: Reconciler,
    limits: Limits,
    ticker: Arc<Ticker>,
    // Declared after the store, so dropped after it: the pool slot is free only then.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

#[cfg(feature = "bench")]
impl std::fmt::Debug for ReusedInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReusedInstance").finish_non_exhaustive()
    }
}

#[cfg(feature = "bench")]
impl ReusedInstance {
    /// Calls `reconcile` on the kept instance, with fresh per-call budgets and deadline.
    pub async fn reconcile(
        &mut self,
        request: Request,
    ) -> Result<Result<Outcome, GuestError>, CallError> {
        let started = Instant::now();
        let _running = self.ticker.running();
        self.store.data_mut().reset_budgets();
        arm_deadline(&mut self.store, self.limits.deadline);
        let r = self
            .instance
            .call_reconcile(&mut self.store, &request)
            .await;
        // Not metered: benchmarks compare wall times of reused and fresh instances.
        let usage = usage_of(&self.store, started, Duration::ZERO);
        r.map_err(|e| classify(e, &self.store, self.limits, &usage))
    }
}

fn usage_of(store: &Store<HostState>, started: Instant, cpu: Duration) -> Usage {
    let state = store.data();
    Usage {
        elapsed: started.elapsed(),
        api_wait: state.api_wait(),
        host_wait: state.host_wait(),
        cluster_failed: state.cluster_failed(),
        memory_bytes: state.limits.peak(),
        cpu,
    }
}

/// CPU time the current thread has used, from the kernel (`CLOCK_THREAD_CPUTIME_ID`).
///
/// Why this and not wasmtime's fuel or epoch ticks: fuel counts wasm instructions, not time (a
/// `memory.copy` of a megabyte is one), costs a few percent on every call, and misses the host
/// work done inside imports for the guest; epoch ticks are 5 ms apart, so a 1 ms reconcile would
/// count as 0 or 5 ms. The kernel's per-thread clock is measured, not guessed, to about a
/// microsecond, and, read around each poll, counts only the time the call really ran: not
/// another task's, not the time preempted by another process.
///
/// Where it may surprise: each read is a system call (the vDSO serves only the wall clocks),
/// about 0.4 µs on the benchmark machine, so two per poll are about 4% of an empty Rust
/// reconcile (see `bench/RESULTS.md`). Zero where the clock is unavailable, which then
/// meters nothing.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call writes only into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn classify(
    e: wasmtime::Error,
    store: &Store<HostState>,
    limits: Limits,
    usage: &Usage,
) -> CallError {
    if let Some(wasmtime::Trap::Interrupt) = e.downcast_ref::<wasmtime::Trap>() {
        return CallError::Deadline {
            limit: limits.deadline,
            blame: usage.deadline_blame(),
        };
    }
    let message = format!("{e:#}");
    let stderr = store.data().stderr();
    // The limiter refuses the growth; Rust's allocator then aborts with this message.
    if stderr.contains("memory allocation of")
        || message.contains("forcing trap when growing memory")
    {
        return CallError::Memory(limits.memory_bytes);
    }
    CallError::Trap { message, stderr }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(elapsed: u64, api: u64, host: u64) -> Usage {
        Usage {
            elapsed: Duration::from_millis(elapsed),
            api_wait: Duration::from_millis(api),
            host_wait: Duration::from_millis(host),
            cluster_failed: false,
            memory_bytes: 0,
            cpu: Duration::ZERO,
        }
    }

    #[test]
    fn a_deadline_is_blamed_on_whoever_held_most_of_the_time() {
        assert_eq!(usage(10_000, 100, 0).deadline_blame(), Blame::Guest);
        assert_eq!(usage(10_000, 9_000, 500).deadline_blame(), Blame::Cluster);
        assert_eq!(usage(10_000, 500, 9_000).deadline_blame(), Blame::Host);
        assert_eq!(usage(10_000, 0, 0).guest_time(), Duration::from_secs(10));
    }

    #[test]
    fn thread_cpu_counts_this_threads_work_and_not_its_sleep() {
        let before = thread_cpu();
        std::thread::sleep(Duration::from_millis(30));
        let slept = thread_cpu() - before;
        let before = thread_cpu();
        let started = Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spun = thread_cpu() - before;
        assert!(slept < Duration::from_millis(5), "sleeping used {slept:?}");
        // Another process may take the core for a while; most of the spin is still ours.
        assert!(
            spun > Duration::from_millis(10),
            "spinning 30 ms used {spun:?}"
        );
        assert!(
            spun <= Duration::from_millis(31),
            "more than the wall time: {spun:?}"
        );
    }

    #[test]
    fn an_error_the_guest_returns_is_the_clusters_only_when_the_cluster_failed() {
        let mut r = Reconciled {
            result: Ok(Err(GuestError::Conflict("x".into()))),
            usage: usage(5, 1, 0),
            recording: None,
        };
        assert_eq!(r.blame(), Some(Blame::Guest));
        r.usage.cluster_failed = true;
        assert_eq!(r.blame(), Some(Blame::Cluster));
        r.result = Ok(Ok(Outcome::Done));
        assert_eq!(r.blame(), None, "a success has no blame");
        r.result = Err(CallError::Memory(1));
        assert_eq!(r.blame(), Some(Blame::Guest));
    }
}
