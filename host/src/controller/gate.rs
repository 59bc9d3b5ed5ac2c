//! Gate: whether a guest's reconciles may run in this process at all. Every guest has one; a
//! host running alone keeps it open for good, and a host among replicas shares one gate among
//! the guests of each shard and opens it only while it holds that shard's Lease.
//!
//! Closing the gate is a fence, not a pause: a reconcile in flight is cancelled at its next
//! await (a running guest yields every 5 ms), and [`Gate::drained`] says when none is left, so
//! that whoever closed it may hand the shard to another replica knowing that nothing here still
//! writes for it.

use std::sync::Arc;

use tokio::sync::watch;

/// Whether reconciles may run (`None`) or why not (`Some`), and how many are running.
///
/// Where it may surprise: a closed gate does not stop events from queueing keys, and it does
/// not stop informers, so a gate opened later serves from a warm cache without a relist; keys
/// queued meanwhile are reconciled then.
#[derive(Debug)]
pub struct Gate {
    closed: watch::Sender<Option<String>>,
    running: watch::Sender<usize>,
}

impl Gate {
    /// A gate that starts open: a guest that shares its work with no other replica.
    pub fn open() -> Arc<Self> {
        Arc::new(Self {
            closed: watch::Sender::new(None),
            running: watch::Sender::new(0),
        })
    }

    /// A gate that starts closed, saying why.
    pub fn closed(why: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            closed: watch::Sender::new(Some(why.into())),
            running: watch::Sender::new(0),
        })
    }

    /// Opens the gate; returns whether it was closed.
    pub fn set_open(&self) -> bool {
        self.closed.send_if_modified(|c| c.take().is_some())
    }

    /// Closes the gate, or changes why it is closed; returns whether it was open. Reconciles in
    /// flight are cancelled by their workers, which watch the gate.
    pub fn close(&self, why: impl Into<String>) -> bool {
        let why = why.into();
        let mut was_open = false;
        self.closed.send_if_modified(|c| {
            was_open = c.is_none();
            let changed = c.as_deref() != Some(why.as_str());
            *c = Some(why);
            changed
        });
        was_open
    }

    /// Why the gate is closed, if it is.
    pub fn reason(&self) -> Option<String> {
        self.closed.borrow().clone()
    }

    /// Whether reconciles may run now.
    pub fn is_open(&self) -> bool {
        self.closed.borrow().is_none()
    }

    /// How many reconciles hold a [`Pass`] now.
    pub fn running(&self) -> usize {
        *self.running.borrow()
    }

    /// Waits until the gate is open.
    pub async fn wait_open(&self) {
        let mut rx = self.closed.subscribe();
        // The sender lives in `self`, which outlives this borrow: the wait cannot fail.
        let _ = rx.wait_for(Option::is_none).await;
    }

    /// Waits until the gate is closed, and says why.
    pub async fn wait_closed(&self) -> String {
        let mut rx = self.closed.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// A pass for one reconcile, or `None` if the gate is closed. Counted until dropped, so
    /// [`Gate::drained`] waits for it.
    pub fn enter(self: &Arc<Self>) -> Option<Pass> {
        if !self.is_open() {
            return None;
        }
        self.running.send_modify(|n| *n += 1);
        let pass = Pass(self.clone());
        // Closed between the check and the count: whoever closed it may already have seen
        // nothing running, so this reconcile must not start.
        if !self.is_open() {
            return None;
        }
        Some(pass)
    }

    /// Waits until no reconcile holds a pass. Only meaningful once the gate is closed: an open
    /// gate may let another one in at once.
    pub async fn drained(&self) {
        let mut rx = self.running.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// Leave to run one reconcile through a [`Gate`]; dropping it says the reconcile is over.
#[derive(Debug)]
pub struct Pass(Arc<Gate>);

impl Drop for Pass {
    fn drop(&mut self) {
        self.0.running.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_closed_gate_gives_no_pass_and_an_open_one_counts_each() {
        let gate = Gate::closed("shard 3 is held by replica b");
        assert!(gate.enter().is_none());
        assert_eq!(
            gate.reason().as_deref(),
            Some("shard 3 is held by replica b")
        );
        assert!(gate.set_open());
        assert!(!gate.set_open(), "opening an open gate changes nothing");
        let a = gate.enter().expect("open");
        let b = gate.enter().expect("open");
        assert_eq!(gate.running(), 2);
        drop(a);
        assert_eq!(gate.running(), 1);
        drop(b);
        assert_eq!(gate.running(), 0);
    }

    #[test]
    fn close_says_whether_it_was_open_and_keeps_the_latest_reason() {
        let gate = Gate::open();
        assert!(gate.close("released"));
        assert!(!gate.close("lost"));
        assert_eq!(gate.reason().as_deref(), Some("lost"));
    }

    #[tokio::test]
    async fn drained_waits_for_every_pass_given_before_the_close() {
        let gate = Gate::open();
        let pass = gate.enter().unwrap();
        gate.close("released");
        let drained = tokio::spawn({
            let gate = gate.clone();
            async move { gate.drained().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!drained.is_finished(), "a reconcile still holds its pass");
        drop(pass);
        tokio::time::timeout(Duration::from_secs(1), drained)
            .await
            .expect("drained once the pass is dropped")
            .unwrap();
    }

    #[tokio::test]
    async fn wait_closed_wakes_a_worker_when_the_gate_closes() {
        let gate = Gate::open();
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait_closed().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        gate.close("renew deadline passed");
        let why = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(why, "renew deadline passed");
    }
}
