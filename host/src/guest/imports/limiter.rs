//! The per-call memory and table limiter, and the peak it saw.

/// Caps one call's memory across *all* its linear memories (a component may have several;
/// `StoreLimits` would cap each one separately), and its tables; remembers the most memory the
/// call held at once.
#[derive(Debug)]
pub struct Limiter {
    memory_used: usize,
    memory_max: usize,
    peak: usize,
}

/// Largest table a guest may grow (function references; a Rust guest needs a few thousand).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl Limiter {
    /// A limiter for one call, allowing `memory_max` bytes over all linear memories.
    pub fn new(memory_max: usize) -> Self {
        Self {
            memory_used: 0,
            memory_max,
            peak: 0,
        }
    }

    /// The most linear memory, over all the call's memories together, that the call held at
    /// once: its instantiation included, since creating a memory is a growth from zero.
    ///
    /// Where it may surprise: a growth the cap refused does not count (the guest never held
    /// that memory), so a call that failed for memory peaks just under its cap.
    pub fn peak(&self) -> usize {
        self.peak
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.memory_used - current.min(self.memory_used) + desired;
        if after > self.memory_max {
            return Ok(false);
        }
        self.memory_used = after;
        // Wasm memories never shrink, but the peak is kept apart from the running total so
        // that it stays right if a memory ever is released mid-call.
        self.peak = self.peak.max(after);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn the_peak_is_the_most_held_at_once_over_all_memories_and_a_refused_growth_is_not_held() {
        let mut l = Limiter::new(100);
        assert!(l.memory_growing(0, 30, None).unwrap(), "one memory created");
        assert!(l.memory_growing(0, 20, None).unwrap(), "a second one");
        assert!(l.memory_growing(30, 60, None).unwrap(), "the first grows");
        assert_eq!(l.peak(), 80, "60 + 20");
        assert!(
            !l.memory_growing(20, 50, None).unwrap(),
            "60 + 50 is over the cap"
        );
        assert_eq!(l.peak(), 80, "a refused growth was never held");
    }
}
