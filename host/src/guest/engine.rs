//! The engine's configuration (pooled instances with copy-on-write memory images), the epoch
//! ticker that enforces deadlines, and the bound on instances alive at once.
//!
//! Every reconcile still gets a fresh instance: the pool only keeps the *slots* (address space,
//! tables, fiber stacks) from one instance to the next, and wasmtime resets a slot's memory to
//! the module's initial image before reuse, so no global or heap byte of one reconcile is seen
//! by the next (`tests/isolation.rs` proves it). What pooling saves is the `mmap`, `mprotect`
//! and `munmap` of a fresh 4 GiB reservation per call. Where the kernel can say which pages an
//! instance dirtied ([`Reset::Scan`]), the first MiB of each memory is restored in place and
//! stays resident; pages beyond what is kept are given back and faulted in again by the next
//! instance (see `bench/RESULTS.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Epoch tick: the granularity of deadlines, and how often a running guest yields to the async
/// runtime so that one busy guest cannot starve the host's other tasks.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// Guest instances alive at once, per runtime. A call beyond it waits for a slot (see
/// [`Instances`]) rather than fail.
///
/// Reconciles are bounded far below this by the host's fair-share slots (one per core by
/// default); `map` calls, shadow versions and benchmarks add a few more.
pub(crate) const INSTANCES: u32 = 64;

/// Core instances, memories and tables the pool holds per component slot: what one permit of
/// [`Instances`] stands for. A Rust guest has 1–3 core instances and 1 memory; a
/// componentize-py one about 15 core instances and a few memories. The pool reserves address
/// space, not memory, for each.
const CORE_PER_COMPONENT: u32 = 16;
const MEMORIES_PER_COMPONENT: u32 = 4;
const TABLES_PER_COMPONENT: u32 = 16;

/// The pool's totals, as an error message says them.
pub(crate) const POOL_LIMITS: &str = "1024 core instances, 256 memories, 1024 tables";

/// Slots freed before their memory is given back in one go (see `config`).
const DECOMMIT_BATCH: usize = 16;

/// Elements per table: CPython's function table is larger than wasmtime's default of 20 000.
const TABLE_ELEMENTS: usize = 200_000;

/// Bytes at the start of each linear memory kept mapped between instances when the kernel can
/// say which of them a guest dirtied (`PAGEMAP_SCAN`, Linux 6.7): only those are reset, in
/// place, and the next instance finds them resident rather than faulting them in again. A
/// componentize-js guest dirties hundreds of KiB at start; keeping them took its fresh call
/// from 565 to 312 µs (bench/RESULTS.md, issue #28).
const SCANNED_MEMORY_KEEP: usize = 1 << 20;

/// The same without `PAGEMAP_SCAN`: every kept byte is zeroed whether dirtied or not, so less
/// is kept. 256 KiB was an eighth of an empty reconcile in a profile; 64 KiB, with the batching
/// below, took it from 28 to 19 µs (bench/RESULTS.md).
const ZEROED_MEMORY_KEEP: usize = 64 << 10;

/// How a freed slot's memory is reset for the next instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reset {
    /// Pages the kernel reports dirtied, up to [`SCANNED_MEMORY_KEEP`], are restored in place.
    Scan,
    /// The first [`ZEROED_MEMORY_KEEP`] bytes are restored in place, the rest given back.
    Zero,
}

/// The engine: [`config`] with [`Reset::Scan`] where the kernel has `PAGEMAP_SCAN`, and with
/// [`Reset::Zero`] where it does not (wasmtime refuses the first there).
///
/// Where it may surprise: with [`Reset::Scan`], each memory slot a guest has used keeps up to
/// [`SCANNED_MEMORY_KEEP`] of the pages it dirtied resident while idle: resident memory traded
/// for calls that do not fault those pages in. At most the pool's memories' worth (256 MiB);
/// in practice the slots in use plus those wasmtime keeps warm for recently run modules (up to
/// 100 unused ones by default). The density benchmark's totals moved by under 2%.
pub(crate) fn engine() -> wasmtime::Result<Engine> {
    Engine::new(&config(Reset::Scan)).or_else(|_| Engine::new(&config(Reset::Zero)))
}

/// The engine's configuration: the component model, async calls, epoch interruption and the
/// pooling instance allocator, resetting freed memories as `reset` says.
///
/// Where it may surprise: the pool reserves its address space when the engine is made (about
/// 4 GiB per memory slot, [`INSTANCES`] × 4 of them, so about 1 TiB of virtual space and no
/// memory). A process limited by `ulimit -v` cannot make the engine; [`Runtime::new`] then
/// says so.
///
/// [`Runtime::new`]: super::Runtime::new
pub(crate) fn config(reset: Reset) -> wasmtime::Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(INSTANCES)
        .total_core_instances(INSTANCES * CORE_PER_COMPONENT)
        .total_memories(INSTANCES * MEMORIES_PER_COMPONENT)
        .total_tables(INSTANCES * TABLES_PER_COMPONENT)
        .total_stacks(INSTANCES)
        .max_tables_per_module(4)
        .table_elements(TABLE_ELEMENTS)
        // The first pages of each memory, table and stack stay mapped and are reset in place
        // on reuse, rather than given back to the kernel and faulted in again.
        .table_keep_resident(16 << 10)
        .async_stack_keep_resident(64 << 10)
        // One madvise, and one TLB shootdown across the process's threads, per batch of freed
        // slots rather than per reconcile: in a profile they were a fifth of an empty reconcile.
        .decommit_batch_size(DECOMMIT_BATCH);
    match reset {
        Reset::Scan => pool
            .pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(SCANNED_MEMORY_KEEP),
        Reset::Zero => pool
            .pagemap_scan(wasmtime::Enabled::No)
            .linear_memory_keep_resident(ZEROED_MEMORY_KEEP),
    };
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// What one instance of a component takes from the pool besides its component slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Needs {
    /// Core module instantiations.
    pub(crate) core_instances: u32,
    /// Memories its modules define.
    pub(crate) memories: u32,
    /// Tables its modules define.
    pub(crate) tables: u32,
}

impl Needs {
    /// Counts what `component`, compiled from `bytes`, instantiates.
    ///
    /// Where it may surprise: core instances are counted from the binary (wasmtime does not say
    /// them), one per `instantiate` of a core module anywhere in it; a nested component
    /// instantiated twice is counted once. Bytes that do not parse count none: they were
    /// compiled, so that cannot happen short of a wasmparser and wasmtime disagreement.
    pub(crate) fn of(bytes: &[u8], component: &wasmtime::component::Component) -> Needs {
        let mut core_instances = 0u32;
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            let Ok(wasmparser::Payload::InstanceSection(section)) = payload else {
                continue;
            };
            for instance in section.into_iter().flatten() {
                if matches!(instance, wasmparser::Instance::Instantiate { .. }) {
                    core_instances = core_instances.saturating_add(1);
                }
            }
        }
        // `None` only for a component that imports core modules, which the host's world
        // does not offer, so such a component never links.
        let resources = component.resources_required();
        Needs {
            core_instances,
            memories: resources.as_ref().map_or(0, |r| r.num_memories),
            tables: resources.as_ref().map_or(0, |r| r.num_tables),
        }
    }
}

/// Permits of [`Instances`] one instance of a component holds: its share of the pool's
/// scarcest resource for it, so that however many instances are alive, their core instances,
/// memories and tables never exceed the pool's. `None` when one instance alone needs more
/// than the whole pool: it could never run, and waiting for it would wait forever.
pub(crate) fn weight(needs: Needs) -> Option<u32> {
    let weight = [
        1,
        needs.core_instances.div_ceil(CORE_PER_COMPONENT),
        needs.memories.div_ceil(MEMORIES_PER_COMPONENT),
        needs.tables.div_ceil(TABLES_PER_COMPONENT),
    ]
    .into_iter()
    .max()
    .unwrap_or(1);
    (weight <= INSTANCES).then_some(weight)
}

/// How many guest instances may be alive at once: [`INSTANCES`] permits, an instance holding
/// its module's [`weight`] of them for its whole life, so that no limit of the pool is ever
/// exhausted: a call beyond it waits rather than fail.
#[derive(Clone)]
pub(crate) struct Instances(Arc<Semaphore>);

impl Instances {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Semaphore::new(INSTANCES as usize)))
    }

    /// Waits for `weight` permits (at most [`INSTANCES`], as [`weight`] ensures). The
    /// semaphore is never closed, so this cannot fail. Tokio's semaphore is fair: a heavy
    /// instance waiting is not overtaken by light ones arriving after it.
    pub(crate) async fn permit(&self, weight: u32) -> OwnedSemaphorePermit {
        self.0
            .clone()
            .acquire_many_owned(weight.clamp(1, INSTANCES))
            .await
            .expect("the instance semaphore is never closed")
    }
}

/// The epoch ticker's shared state: whether to stop, and how many guest calls are running.
///
/// The thread ticks only while a call runs and parks otherwise, so an idle host spends no CPU
/// on it (a tick every 5 ms was about 0.1 s of CPU per 20 s idle). It ends once the runtime and
/// every module are gone: a module outliving its runtime must still be interruptible.
pub(crate) struct Ticker {
    stop: AtomicBool,
    running: AtomicUsize,
    /// Ticks so far; the tests read it to prove an idle host is quiet.
    ticks: std::sync::atomic::AtomicU64,
    thread: std::thread::Thread,
}

impl Ticker {
    /// Starts the ticker thread for `engine`.
    pub(crate) fn start(engine: &Engine) -> std::io::Result<Arc<Self>> {
        // The thread needs the ticker (to see calls) and the ticker the thread (to wake it): the
        // thread is spawned first and told its ticker through a channel.
        let (tell, told) = std::sync::mpsc::channel::<std::sync::Weak<Ticker>>();
        let ticking = engine.clone();
        let thread = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                if let Ok(ticker) = told.recv() {
                    Ticker::tick(ticker, ticking);
                }
            })?;
        let ticker = Arc::new(Ticker {
            stop: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            ticks: Default::default(),
            thread: thread.thread().clone(),
        });
        // The thread waits in `recv` until this arrives or the sender drops: it cannot fail.
        let _ = tell.send(Arc::downgrade(&ticker));
        Ok(ticker)
    }

    /// Counts a guest call as running until the guard is dropped, waking the thread for the
    /// first one.
    pub(crate) fn running(self: &Arc<Self>) -> Running {
        if self.running.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Running(self.clone())
    }

    /// Ticks so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// The thread's loop: tick while something runs, park while nothing does.
    ///
    /// Holds only a `Weak`, so that dropping the last `Arc` ends it. A call that starts just
    /// as the thread parks has already unparked it, and `park` then returns at once: a running
    /// call never waits more than one `TICK` for its next tick.
    fn tick(me: std::sync::Weak<Ticker>, engine: Engine) {
        loop {
            let Some(t) = me.upgrade() else { return };
            if t.stop.load(Ordering::Relaxed) {
                return;
            }
            if t.running.load(Ordering::Acquire) == 0 {
                drop(t);
                std::thread::park();
            } else {
                drop(t);
                std::thread::sleep(TICK);
                engine.increment_epoch();
                if let Some(t) = me.upgrade() {
                    t.ticks.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.unpark();
    }
}

/// A guest call in progress, for the ticker; see [`Ticker::running`].
pub(crate) struct Running(Arc<Ticker>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits up to 5 s for `done`: a loaded machine may not run the ticker thread for a while.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if done() {
                return true;
            }
            std::thread::sleep(TICK);
        }
        false
    }

    #[test]
    fn the_epoch_advances_only_while_a_call_runs() {
        let engine = engine().unwrap();
        let ticker = Ticker::start(&engine).unwrap();
        std::thread::sleep(TICK * 10);
        assert_eq!(ticker.ticks(), 0, "ticked with nothing running");

        let running = ticker.running();
        assert!(
            eventually(|| ticker.ticks() > 0),
            "no tick while a call ran"
        );
        drop(running);
        // A tick already sleeping when the call ended may still land, once; after it, none.
        let ended = ticker.ticks();
        std::thread::sleep(TICK * 20);
        let settled = ticker.ticks();
        assert!(
            settled <= ended + 1,
            "ticked after the call ended: {ended} then {settled}"
        );
        std::thread::sleep(TICK * 20);
        assert_eq!(
            ticker.ticks(),
            settled,
            "still ticking with nothing running"
        );

        // And it wakes again for the next call.
        let again = ticker.running();
        assert!(
            eventually(|| ticker.ticks() > settled),
            "no tick for a second call"
        );
        drop(again);
    }

    /// A core module of one function, `bump(addr) -> i32`, that adds one to the i32 at `addr`
    /// of its 3 MiB memory and returns it.
    const BUMP: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // type 0: (i32) -> i32
        0x03, 0x02, 0x01, 0x00, // func 0: type 0
        0x05, 0x03, 0x01, 0x00, 0x30, // memory: 48 pages
        0x07, 0x08, 0x01, 0x04, b'b', b'u', b'm', b'p', 0x00, 0x00, // export "bump"
        0x0a, 0x16, 0x01, 0x14, 0x00, // code: one body of 20 bytes, no locals
        0x20, 0x00, 0x20, 0x00, 0x28, 0x02, 0x00, // addr, load(addr)
        0x41, 0x01, 0x6a, 0x36, 0x02, 0x00, // + 1, store
        0x20, 0x00, 0x28, 0x02, 0x00, 0x0b, // load(addr), end
    ];

    /// Whichever way a freed slot is reset, the next instance in it sees the module's initial
    /// memory: bytes within what is kept resident, and beyond it.
    #[test]
    fn a_reused_slot_s_memory_is_the_initial_image_however_it_is_reset() {
        let mut resets = vec![Reset::Zero];
        // The kernel decides whether scanning is possible; this machine's is checked by
        // `engine()` choosing it in `the_engine_scans_where_the_kernel_can`.
        if Engine::new(&config(Reset::Scan)).is_ok() {
            resets.push(Reset::Scan);
        }
        for reset in resets {
            let engine = Engine::new(&config(reset)).unwrap();
            let module = wasmtime::Module::new(&engine, BUMP).unwrap();
            for round in 0..DECOMMIT_BATCH * 3 {
                let mut store = wasmtime::Store::new(&engine, ());
                store.set_epoch_deadline(u64::MAX / 2);
                let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
                let bump = instance
                    .get_typed_func::<i32, i32>(&mut store, "bump")
                    .unwrap();
                for addr in [0, 70_000, 900_000, 2_500_000] {
                    assert_eq!(
                        bump.call(&mut store, addr).unwrap(),
                        1,
                        "{reset:?}, round {round}: byte {addr} kept an earlier instance's write"
                    );
                }
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_engine_scans_where_the_kernel_can() {
        // PAGEMAP_SCAN came in Linux 6.7.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>());
        let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
            panic!("unreadable kernel release {release:?}");
        };
        assert!(engine().is_ok());
        assert_eq!(
            Engine::new(&config(Reset::Scan)).is_ok(),
            (major, minor) >= (6, 7),
            "kernel {release:?}"
        );
    }

    #[test]
    fn the_pool_limits_said_in_errors_are_the_pool_s() {
        assert_eq!(
            POOL_LIMITS,
            format!(
                "{} core instances, {} memories, {} tables",
                INSTANCES * CORE_PER_COMPONENT,
                INSTANCES * MEMORIES_PER_COMPONENT,
                INSTANCES * TABLES_PER_COMPONENT
            )
        );
    }

    #[test]
    fn a_component_weighs_its_share_of_the_scarcest_pool_limit() {
        let needs = |core_instances, memories, tables| Needs {
            core_instances,
            memories,
            tables,
        };
        // A Rust guest: one slot.
        assert_eq!(weight(needs(2, 1, 1)), Some(1));
        assert_eq!(weight(Needs::default()), Some(1));
        // A componentize-py guest: its memories are the scarce ones.
        assert_eq!(weight(needs(15, 6, 9)), Some(2));
        assert_eq!(weight(needs(33, 1, 1)), Some(3));
        assert_eq!(weight(needs(1, 1, 40)), Some(3));
        // The whole pool, and beyond it.
        assert_eq!(
            weight(needs(INSTANCES * CORE_PER_COMPONENT, 0, 0)),
            Some(INSTANCES)
        );
        assert_eq!(
            weight(needs(0, INSTANCES * MEMORIES_PER_COMPONENT + 1, 0)),
            None
        );
    }

    /// Instances of heavy modules wait for each other rather than exhaust the pool: the permits
    /// held never exceed the pool's memories, however many are asked for.
    #[tokio::test]
    async fn heavy_instances_wait_for_permits_rather_than_overrun_the_pool() {
        let instances = Instances::new();
        let heavy = weight(Needs {
            core_instances: 15,
            memories: 6,
            tables: 9,
        })
        .unwrap();
        let mut held = Vec::new();
        for _ in 0..INSTANCES / heavy {
            held.push(instances.permit(heavy).await);
        }
        // The next heavy one waits until one is given back.
        let waiting = tokio::time::timeout(Duration::from_millis(50), instances.permit(heavy));
        assert!(waiting.await.is_err(), "a heavy instance overran the pool");
        held.pop();
        let next = tokio::time::timeout(Duration::from_secs(5), instances.permit(heavy));
        assert!(next.await.is_ok(), "no permit after one was given back");
    }

    #[test]
    fn the_ticker_is_freed_with_the_last_call_and_module() {
        let engine = engine().unwrap();
        let ticker = Ticker::start(&engine).unwrap();
        let running = ticker.running();
        let weak = Arc::downgrade(&ticker);
        drop(ticker);
        // A call in progress holds it.
        assert!(weak.upgrade().is_some());
        drop(running);
        assert!(weak.upgrade().is_none());
    }
}
