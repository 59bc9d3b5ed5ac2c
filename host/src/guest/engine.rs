//! The engine's configuration (pooled instances with copy-on-write memory images), the epoch
//! ticker that enforces deadlines, and the bound on instances alive at once.
//!
//! Every reconcile still gets a fresh instance: the pool only keeps the *slots* (address space,
//! tables, fiber stacks) from one instance to the next, and wasmtime resets a slot's memory to
//! the module's initial image before reuse, so no global or heap byte of one reconcile is seen
//! by the next (`tests/isolation.rs` proves it). What pooling saves is the `mmap`, `mprotect`
//! and `munmap` of a fresh 4 GiB reservation per call. Pages beyond what is kept resident are
//! still given back and faulted in again by the next instance: a quarter of an empty reconcile
//! (see `bench/RESULTS.md`).

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

/// Core instances, memories and tables a component may hold, on average, within the pool.
/// A Rust guest has 1–3 core instances and 1 memory; a componentize-py one about 15 core
/// instances and a few memories. The pool reserves address space, not memory, for each.
///
/// Where it may surprise: [`Instances`] counts components, not these, so [`INSTANCES`]
/// components all above the average at once (64 Python guests running together, far beyond
/// the default slots) would exhaust the memories first and fail to instantiate, as a trap of
/// that reconcile, rather than wait.
const CORE_PER_COMPONENT: u32 = 16;
const MEMORIES_PER_COMPONENT: u32 = 4;

/// Slots freed before their memory is given back in one go (see `config`).
const DECOMMIT_BATCH: usize = 16;

/// Elements per table: CPython's function table is larger than wasmtime's default of 20 000.
const TABLE_ELEMENTS: usize = 200_000;

/// The engine's configuration: the component model, async calls, epoch interruption and the
/// pooling instance allocator.
///
/// Where it may surprise: the pool reserves its address space when the engine is made (about
/// 4 GiB per memory slot, [`INSTANCES`] × 4 of them, so about 1 TiB of virtual space and no
/// memory). A process limited by `ulimit -v` cannot make the engine; [`Runtime::new`] then
/// says so.
///
/// [`Runtime::new`]: super::Runtime::new
pub(crate) fn config() -> wasmtime::Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(INSTANCES)
        .total_core_instances(INSTANCES * CORE_PER_COMPONENT)
        .total_memories(INSTANCES * MEMORIES_PER_COMPONENT)
        .total_tables(INSTANCES * CORE_PER_COMPONENT)
        .total_stacks(INSTANCES)
        .max_tables_per_module(4)
        .table_elements(TABLE_ELEMENTS)
        // The first pages of each memory, table and stack stay mapped and are zeroed in place
        // on reuse, rather than given back to the kernel and faulted in again. Zeroing costs
        // too: 256 KiB of memory kept was an eighth of an empty reconcile in a profile, and
        // these sizes, with the batching below, took it from 28 to 19 µs (bench/RESULTS.md).
        .linear_memory_keep_resident(64 << 10)
        .table_keep_resident(16 << 10)
        .async_stack_keep_resident(64 << 10)
        // One madvise, and one TLB shootdown across the process's threads, per batch of freed
        // slots rather than per reconcile: in a profile they were a fifth of an empty reconcile.
        .decommit_batch_size(DECOMMIT_BATCH);
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// How many guest instances may be alive at once: one permit per instance, held for the
/// instance's whole life, so that the pool's component slots are never exhausted (see
/// `MEMORIES_PER_COMPONENT` for the one way its other limits can be).
#[derive(Clone)]
pub(crate) struct Instances(Arc<Semaphore>);

impl Instances {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Semaphore::new(INSTANCES as usize)))
    }

    /// Waits for room in the pool. The semaphore is never closed, so this cannot fail.
    pub(crate) async fn permit(&self) -> OwnedSemaphorePermit {
        self.0
            .clone()
            .acquire_owned()
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
        let engine = Engine::new(&config()).unwrap();
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

    #[test]
    fn the_ticker_is_freed_with_the_last_call_and_module() {
        let engine = Engine::new(&config()).unwrap();
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
