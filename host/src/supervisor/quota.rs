//! The tenants' guest quota: how many guests one namespace may have serving, who waits for a
//! seat, and the limits a tenant source sets.
//!
//! A *seat* is held by a tenant's guest that serves, or whose load is under way; only a
//! [`Offer::Load`] of a guest that holds none needs one. So rejected guests never count, a
//! reload of a serving guest never waits, and a load is counted from the moment it is offered,
//! so two ConfigMaps created at once cannot both take the last seat. A load refused for want
//! of a seat is a rejection like any other (log line, `/status`, Event on its ConfigMap), and
//! its offer is kept: it is offered again, in name order, as soon as a seat frees up in its
//! namespace (a guest there unloads, or a load there ends without serving), with no edit of its
//! ConfigMap.
//!
//! Where it may surprise:
//! - Seats are given and freed by the offer queue, so a guest unloaded by calling
//!   [`Supervisor::remove`] directly, not through an [`Offer::Remove`], keeps its seat until its
//!   name is offered again.
//! - A waiting offer keeps what its source handed over (for a ConfigMap, the packed module, at
//!   most the API server's 1 MiB per ConfigMap; for a `.wasm.ref`, the pulled module, up to
//!   `max_module_bytes`) until it loads or a newer offer replaces it.
//! - Each offer refused is one more rejection, with its Event: a tenant editing a waiting
//!   guest's ConfigMap gets one per edit.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Load, Offer, Reason, Rejection, Source, Supervisor};

/// What tenant namespaces may use, over all their guests. Set by the tenants' source (see
/// [`Supervisor::set_tenant_limits`]); the default limits nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantLimits {
    /// Guests one namespace may have serving (or loading) at once.
    pub max_guests_per_namespace: Option<usize>,
    /// Cache bytes one namespace's guests may be attributed (see `supervisor/memory.rs`: shared
    /// informers are split between their readers).
    pub max_cached_bytes_per_namespace: Option<u64>,
}

/// The seats of every namespace, and the offers waiting for one. Pure, so its rules are
/// unit-tested.
#[derive(Debug)]
pub(super) struct Seats<T> {
    /// Guest → its namespace, for every guest holding a seat.
    held: BTreeMap<String, String>,
    /// Guest → (its namespace, its latest offer) for every guest refused for want of a seat.
    waiting: BTreeMap<String, (String, T)>,
}

impl<T> Default for Seats<T> {
    fn default() -> Self {
        Self {
            held: BTreeMap::new(),
            waiting: BTreeMap::new(),
        }
    }
}

impl<T> Seats<T> {
    /// Seats held in `namespace`.
    pub(super) fn held_in(&self, namespace: &str) -> usize {
        self.held.values().filter(|ns| *ns == namespace).count()
    }

    /// Gives `guest` a seat in `namespace` if it holds none and fewer than `max` are held
    /// there; `Err` with how many are held when there is no room.
    pub(super) fn take(&mut self, namespace: &str, guest: &str, max: usize) -> Result<(), usize> {
        if self.held.contains_key(guest) {
            return Ok(());
        }
        let held = self.held_in(namespace);
        if held >= max {
            return Err(held);
        }
        self.held.insert(guest.to_string(), namespace.to_string());
        Ok(())
    }

    /// Gives `guest` a seat whatever the count: it serves already.
    pub(super) fn hold(&mut self, namespace: &str, guest: &str) {
        self.held.insert(guest.to_string(), namespace.to_string());
    }

    /// Frees `guest`'s seat, if it holds one.
    pub(super) fn release(&mut self, guest: &str) {
        self.held.remove(guest);
    }

    /// Keeps `item` as `guest`'s offer until a seat frees up, replacing an older one.
    pub(super) fn park(&mut self, namespace: &str, guest: &str, item: T) {
        self.waiting
            .insert(guest.to_string(), (namespace.to_string(), item));
    }

    /// Drops `guest`'s waiting offer: something newer was offered for it.
    pub(super) fn unpark(&mut self, guest: &str) -> Option<T> {
        self.waiting.remove(guest).map(|(_, item)| item)
    }

    /// Waiting guests for whom there is room now, in name order, each given its seat.
    pub(super) fn admit(&mut self, max: usize) -> Vec<(String, T)> {
        let ready: Vec<String> = self.waiting.keys().cloned().collect();
        let mut admitted = Vec::new();
        for guest in ready {
            let namespace = self.waiting[&guest].0.clone();
            if self.take(&namespace, &guest, max).is_ok() {
                let (_, item) = self.waiting.remove(&guest).expect("it was waiting");
                admitted.push((guest, item));
            }
        }
        admitted
    }

    /// Forgets everything waiting: the host is stopping.
    pub(super) fn clear_waiting(&mut self) {
        self.waiting.clear();
    }
}

/// A refusal for quota, to record once the locks are released.
struct Refusal {
    source: Source,
    settings: crate::controller::Settings,
    message: String,
}

impl Supervisor {
    /// Sets what tenant namespaces may use; see [`TenantLimits`]. The tenants' source calls it
    /// when it starts, before its first offer.
    pub fn set_tenant_limits(&self, limits: TenantLimits) {
        *self.tenant_limits.lock().unwrap() = limits;
    }

    /// What tenant namespaces may use.
    pub fn tenant_limits(&self) -> TenantLimits {
        *self.tenant_limits.lock().unwrap()
    }

    /// Queues `offer` for `name` if it needs no seat or gets one; otherwise keeps it until a
    /// seat frees up and records the refusal. Returns whether a drain task must be started.
    ///
    /// Lock order: offers, then seats; the guests' lock is taken before or after, never inside.
    pub(super) fn submit_seated(&self, name: &str, offer: Offer) -> bool {
        let serving = self.controller(name).is_some();
        let max = self.tenant_limits().max_guests_per_namespace;
        let mut refusal = None;
        let start = {
            let mut offers = self.offers.lock().unwrap();
            let mut seats = self.seats.lock().unwrap();
            // The newest offer for a guest wins, a waiting one included.
            seats.unpark(name);
            match (&offer, max) {
                (
                    Offer::Load {
                        source: source @ Source::ConfigMap { namespace, .. },
                        settings,
                        ..
                    },
                    Some(max),
                ) if !offers.is_closed() => {
                    let seated = if serving {
                        seats.hold(namespace, name);
                        Ok(())
                    } else {
                        seats.take(namespace, name, max)
                    };
                    if let Err(held) = seated {
                        refusal = Some(Refusal {
                            source: source.clone(),
                            settings: settings.clone(),
                            message: format!(
                                "namespace {namespace} already has {held} tenant guests serving or loading, the most the host allows (tenants.max_guests_per_namespace = {max}); guest {name} loads by itself once one of them is removed or rejected, or ask the host's operator to raise tenants.max_guests_per_namespace"
                            ),
                        });
                        let namespace = namespace.clone();
                        seats.park(&namespace, name, offer);
                        offers.unsettle(name);
                        false
                    } else {
                        offers.submit(name, offer)
                    }
                }
                _ => offers.submit(name, offer),
            }
        };
        if let Some(r) = refusal {
            let refused = Rejection::passing(Reason::Quota, r.message);
            Load::of_digest(self, name, r.source, r.settings, "").reject(refused);
        }
        start
    }

    /// After `name`'s offer was carried out: frees its seat if it does not serve and nothing
    /// newer waits for it, and queues the waiting guests that now have room. Returns the names
    /// whose drain tasks must be started.
    pub(super) fn reseat(&self, name: &str) -> Vec<String> {
        let serving = self.controller(name).is_some();
        let Some(max) = self.tenant_limits().max_guests_per_namespace else {
            return Vec::new();
        };
        let mut offers = self.offers.lock().unwrap();
        let mut seats = self.seats.lock().unwrap();
        if !serving && !offers.has_newer(name) {
            seats.release(name);
        }
        if offers.is_closed() {
            return Vec::new();
        }
        let mut start = Vec::new();
        for (guest, offer) in seats.admit(max) {
            tracing::info!(guest = %guest, "a seat freed up in its namespace: loading the guest refused for quota");
            if offers.submit(&guest, offer) {
                start.push(guest);
            }
        }
        start
    }

    /// Starts a drain task for each of `names`.
    pub(super) fn drain_all(self: &Arc<Self>, names: Vec<String>) {
        for name in names {
            tokio::spawn(self.clone().drain(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_guest_does_not_count_against_the_quota_and_a_reload_never_does() {
        let mut s: Seats<u32> = Seats::default();
        assert_eq!(s.take("team-a", "a", 2), Ok(()));
        assert_eq!(s.take("team-a", "b", 2), Ok(()));
        assert_eq!(s.take("team-a", "c", 2), Err(2), "two held, none left");
        assert_eq!(
            s.take("team-a", "a", 2),
            Ok(()),
            "a reload of a seated guest"
        );
        assert_eq!(s.take("team-b", "x", 2), Ok(()), "namespaces count apart");
        s.release("b");
        assert_eq!(s.held_in("team-a"), 1, "a rejected guest frees its seat");
        assert_eq!(s.take("team-a", "c", 2), Ok(()));
    }

    #[test]
    fn a_serving_guest_is_held_over_the_quota_but_new_ones_wait() {
        let mut s: Seats<u32> = Seats::default();
        s.take("team-a", "a", 1).unwrap();
        s.hold("team-a", "b");
        assert_eq!(s.held_in("team-a"), 2);
        assert_eq!(s.take("team-a", "c", 2), Err(2));
    }

    #[test]
    fn a_guest_refused_for_quota_is_admitted_when_room_frees_up_in_name_order() {
        let mut s: Seats<u32> = Seats::default();
        s.take("team-a", "a", 1).unwrap();
        s.park("team-a", "c", 3);
        s.park("team-a", "b", 1);
        s.park("team-a", "b", 2);
        assert!(s.admit(1).is_empty(), "no room yet");
        s.release("a");
        assert_eq!(
            s.admit(1),
            vec![("b".to_string(), 2)],
            "the latest offer of b, first by name"
        );
        assert_eq!(s.held_in("team-a"), 1, "b holds the seat it was given");
        assert!(s.admit(1).is_empty(), "c still waits");
        s.release("b");
        assert_eq!(s.admit(1), vec![("c".to_string(), 3)]);
    }

    fn offline() -> Arc<Supervisor> {
        Arc::new(crate::supervisor::load::tests::offline())
    }

    fn load(cm: &str, read: super::super::Read) -> Offer {
        Offer::Load {
            source: Source::ConfigMap {
                namespace: "team-a".into(),
                name: cm.into(),
                key: "rec.wasm".into(),
                uid: format!("uid-{cm}"),
            },
            settings: crate::controller::Settings::new(&format!("team-a/{cm}/rec")),
            read,
            min_interval: std::time::Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn a_guest_refused_for_quota_loads_by_itself_when_a_load_in_its_namespace_is_rejected() {
        let sup = offline();
        sup.set_tenant_limits(TenantLimits {
            max_guests_per_namespace: Some(1),
            max_cached_bytes_per_namespace: None,
        });
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // x holds the namespace's one seat for as long as its bytes are being read.
        let slow = Box::new(move || {
            let _ = wait.recv();
            Ok((b"not a component".to_vec(), None))
        });
        sup.offer("team-a/x/rec", load("x", slow));
        let y = "team-a/y/rec";
        sup.offer(y, load("y", Box::new(|| Ok((b"nor this".to_vec(), None)))));
        let refusal = sup.last_error(y).expect("refused at once");
        assert!(
            refusal.contains("tenants.max_guests_per_namespace = 1"),
            "{refusal}"
        );
        release.send(()).unwrap();
        // x is rejected for what it is, which frees its seat; y is then loaded with no new
        // offer, and rejected for what it is too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let invalid = |e: String| e.contains("not a valid wasm component");
        while !(sup.last_error(y).is_some_and(invalid) && sup.offers_idle()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                sup.last_error(y)
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(
            sup.status().guest(y).unwrap().rejections,
            2,
            "quota, then invalid"
        );
        assert_eq!(
            sup.seats.lock().unwrap().held_in("team-a"),
            0,
            "nobody serves"
        );
    }

    #[test]
    fn a_newer_offer_or_a_removal_drops_a_waiting_one() {
        let mut s: Seats<u32> = Seats::default();
        s.take("team-a", "a", 1).unwrap();
        s.park("team-a", "b", 1);
        assert_eq!(s.unpark("b"), Some(1));
        s.release("a");
        assert!(s.admit(1).is_empty(), "nothing waits any more");
        s.park("team-a", "c", 1);
        s.clear_waiting();
        assert!(s.admit(1).is_empty());
    }
}
