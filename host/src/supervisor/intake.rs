//! How offers are taken in: each guest's offers run in a task of their own, so one tenant's
//! large module compiling does not hold up another's delivery. Per guest the latest offer wins:
//! offers that arrive while a load runs collapse into one more load of the newest. A source may
//! ask for a least interval between two loads of one guest (tenants' ConfigMaps do; the dev
//! folder does not).
//!
//! Where it may surprise: [`Supervisor::offer`] returns before anything is loaded; the outcome
//! shows in `/status`, the log and, for a ConfigMap, its Events.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::Supervisor;
use super::offers::{Offer, Unreadable};

impl Supervisor {
    /// Hands `offer` for guest `name` to its queue: see the module docs. A tenant's guest
    /// that would pass its namespace's quota waits instead (see `supervisor/quota.rs`).
    pub fn offer(self: &Arc<Self>, name: &str, offer: Offer) {
        if self.submit_seated(name, offer) {
            self.drain_all(vec![name.to_string()]);
        }
    }

    /// Whether every guest in `names` (at least one) settled from what was last offered (it
    /// serves those bytes, or they were already serving or lastingly rejected) with nothing
    /// offered since: offering the same bytes again would change nothing.
    pub fn offers_settled(&self, names: &BTreeSet<String>) -> bool {
        self.offers.lock().unwrap().all_settled(names)
    }

    /// Whether an offer for guest `name` is waiting or being carried out (a load on its way).
    ///
    /// Where it may surprise: a source still fetching the module (a pull, a read) has offered
    /// nothing yet, so this says `false` until it does.
    pub fn loading(&self, name: &str) -> bool {
        self.offers.lock().unwrap().is_pending(name)
    }

    /// Whether no offer is waiting or being carried out.
    pub fn offers_idle(&self) -> bool {
        self.offers.lock().unwrap().is_idle()
    }

    pub(super) async fn drain(self: Arc<Self>, name: String) {
        // A panic in a load would otherwise leave the name pending, and every later offer for
        // the guest would wait for a task that is gone.
        struct Abandon<'a>(&'a Supervisor, &'a str);
        impl Drop for Abandon<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let mut offers = self.0.offers.lock().unwrap_or_else(|e| e.into_inner());
                    offers.abandon(self.1);
                }
            }
        }
        let _abandon = Abandon(&self, &name);
        loop {
            let (mut offer, last_load) = {
                let mut offers = self.offers.lock().unwrap();
                let Some(offer) = offers.next(&name) else {
                    return;
                };
                (offer, offers.last_load(&name))
            };
            if let (Offer::Load { min_interval, .. }, Some(at)) = (&offer, last_load) {
                let wait = min_interval.saturating_sub(at.elapsed());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                    let mut offers = self.offers.lock().unwrap();
                    if offers.is_closed() {
                        return;
                    }
                    // Whatever arrived meanwhile supersedes it.
                    if let Some(newer) = offers.newer(&name) {
                        offer = newer;
                    }
                }
            }
            let started = match offer {
                Offer::Load { .. } => Some(Instant::now()),
                _ => None,
            };
            let removed = matches!(offer, Offer::Remove);
            if started.is_some() || removed {
                self.offers.lock().unwrap().loading(&name, started);
            }
            if self.take(&name, offer).await {
                self.offers.lock().unwrap().settle(&name);
            }
            let ready = self.reseat(&name);
            self.drain_all(ready);
        }
    }

    /// Carries `offer` out; returns whether the guest settled from it.
    async fn take(&self, name: &str, offer: Offer) -> bool {
        match offer {
            Offer::Remove => {
                self.remove(name).await;
                false
            }
            Offer::Unreadable {
                source,
                settings,
                unreadable,
            } => {
                self.reject_unreadable(
                    name,
                    source,
                    settings,
                    &unreadable.digest,
                    unreadable.message,
                )
                .await;
                false
            }
            Offer::Load {
                source,
                settings,
                read,
                ..
            } => {
                let read = tokio::task::spawn_blocking(read).await.unwrap_or_else(|e| {
                    Err(Unreadable {
                        digest: String::new(),
                        message: format!("reading the module failed: {e}"),
                    })
                });
                match read {
                    Ok((bytes, digest)) => self
                        .apply_digested(name, source, settings, bytes, digest)
                        .await
                        .settled(),
                    Err(u) => {
                        self.reject_unreadable(name, source, settings, &u.digest, u.message)
                            .await;
                        false
                    }
                }
            }
        }
    }
}
