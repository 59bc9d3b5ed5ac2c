//! Idle guests' code given back to the kernel: the native code of a module no guest has called
//! for a while is unmapped from the host's resident set with `madvise(MADV_PAGEOUT)`.
//!
//! Why: a module's code is mapped from its precompile-cache artifact, and the kernel faults it in
//! 64 KiB at a time, so a dozen calls leave most of it resident: about 930 KiB a module, most of
//! a 1000-guest host's memory. These pages are clean and file-backed; the kernel would reclaim
//! them under pressure anyway, but until then they count against the host's memory limit and
//! make its resident set say nothing about what it needs.
//!
//! Where it may surprise:
//! - The first call after a page-out faults back in the code it runs, 64 KiB at a time, from
//!   the disk or the page cache: `fresh_instance`'s paged mode measured about 0.5 ms more for
//!   the Rust example and 4–5 ms more for its TypeScript and Python builds (`bench/RESULTS.md`).
//!   Its page faults count in the call's CPU time, as any page fault does.
//! - A module is paged out once per idle spell: a call ends the spell, and the next page-out
//!   waits for a new one.
//! - Only Linux has `MADV_PAGEOUT` (5.4 and later); elsewhere, or where the kernel refuses it,
//!   nothing is paged out and nothing fails.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Weak};
use std::time::{Duration, Instant};

/// How long a module goes uncalled before its code is paged out.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// How often the pager looks.
const PERIOD: Duration = Duration::from_secs(15);

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    START.elapsed().as_millis() as u64
}

/// When a module was last called, and whether its code was paged out since.
#[derive(Debug)]
pub(crate) struct CodeUse {
    last_call_ms: AtomicU64,
    paged_out: AtomicBool,
}

impl CodeUse {
    /// A module just loaded counts as just called: loading ran `describe`.
    pub(crate) fn new() -> Self {
        Self {
            last_call_ms: AtomicU64::new(now_ms()),
            paged_out: AtomicBool::new(false),
        }
    }

    /// Records a call (its start, and again its end, so a long call is never idle).
    pub(crate) fn touch(&self) {
        self.last_call_ms.store(now_ms(), Ordering::Relaxed);
        self.paged_out.store(false, Ordering::Relaxed);
    }
}

/// Whether code last called at `last_call_ms` should be paged out at `now_ms`: idle for at least
/// `idle`, and not paged out already in this idle spell.
pub(crate) fn should_page_out(
    now_ms: u64,
    last_call_ms: u64,
    paged_out: bool,
    idle: Duration,
) -> bool {
    !paged_out && now_ms.saturating_sub(last_call_ms) >= idle.as_millis() as u64
}

/// Pages out `code` if [`should_page_out`] says so; returns the bytes advised.
pub(crate) fn page_out_if_idle(code: &CodeUse, image: Range<*const u8>, idle: Duration) -> usize {
    let last = code.last_call_ms.load(Ordering::Relaxed);
    if !should_page_out(now_ms(), last, code.paged_out.load(Ordering::Relaxed), idle) {
        return 0;
    }
    // Marked first: a call racing this one clears the mark and so is never skipped for good.
    code.paged_out.store(true, Ordering::Relaxed);
    advise_page_out(image)
}

#[cfg(target_os = "linux")]
fn advise_page_out(image: Range<*const u8>) -> usize {
    let page = 4096;
    let start = (image.start as usize).next_multiple_of(page);
    let end = image.end as usize / page * page;
    if end <= start {
        return 0;
    }
    // SAFETY: the range lies within a mapping the caller's module owns and keeps alive for the
    // call; MADV_PAGEOUT changes no contents, only what is resident, so code running from it
    // meanwhile faults the pages back in.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
    if r == 0 { end - start } else { 0 }
}

#[cfg(not(target_os = "linux"))]
fn advise_page_out(_image: Range<*const u8>) -> usize {
    0
}

/// Starts the pager thread: every [`PERIOD`] it calls `sweep` on whatever `registry` still
/// holds, and ends once the registry is dropped.
pub(crate) fn start<T: Send + Sync + 'static>(registry: Weak<T>, sweep: fn(&T)) {
    let spawned = std::thread::Builder::new()
        .name("code-pager".into())
        .spawn(move || {
            loop {
                std::thread::sleep(PERIOD);
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                sweep(&registry);
            }
        });
    if let Err(e) = spawned {
        // Paging out is an economy, never needed for correctness.
        tracing::warn!(error = %e, "cannot start the code pager; idle guests' code stays resident");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_paged_out_once_per_idle_spell() {
        let idle = Duration::from_secs(60);
        assert!(!should_page_out(59_999, 0, false, idle));
        assert!(should_page_out(60_000, 0, false, idle));
        assert!(!should_page_out(90_000, 0, true, idle), "already paged out");
        assert!(
            !should_page_out(10, 1_000, false, idle),
            "a clock behind the call"
        );
    }

    #[test]
    fn a_call_ends_the_idle_spell() {
        let code = CodeUse::new();
        code.last_call_ms.store(0, Ordering::Relaxed);
        let buf = vec![0u8; 1 << 16];
        let range = buf.as_ptr_range();
        let zero = Duration::ZERO;
        page_out_if_idle(&code, range.clone(), zero);
        assert!(code.paged_out.load(Ordering::Relaxed));
        assert_eq!(
            page_out_if_idle(&code, range.clone(), zero),
            0,
            "once a spell"
        );
        code.touch();
        assert!(!code.paged_out.load(Ordering::Relaxed));
        page_out_if_idle(&code, range, zero);
        assert!(code.paged_out.load(Ordering::Relaxed));
    }
}
