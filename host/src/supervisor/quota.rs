//! The tenants' guest quota: how many guests one namespace may have serving, who waits for a
//! seat, and the limits a tenant source sets.
//!
//! A *seat* is held by a tenant's guest that serves, or whose load is under way; only an
//! [`Offer::Load`](super::Offer::Load) of a guest that holds none needs one. So rejected guests
//! never count, a reload of a serving guest never waits, and a load is counted from the moment
//! it is offered, so two ConfigMaps created at once cannot both take the last seat. A load refused for want
//! of a seat is a rejection like any other (log line, `/status`, Event on its ConfigMap), and
//! its offer is kept: it is offered again, in name order, as soon as a seat frees up in its
//! namespace (a guest there unloads, or a load there ends without serving), with no edit of its
//! ConfigMap.
//!
//! Where it may surprise:
//! - Seats are given and freed by the offer queue (see `seating`), so a guest unloaded by
//!   calling [`Supervisor::remove`](super::Supervisor::remove) directly, not through an
//!   [`Offer::Remove`](super::Offer::Remove), keeps its seat until its name is offered again.
//! - A waiting offer keeps what its source handed over (for a ConfigMap, the packed module, at
//!   most the API server's 1 MiB per ConfigMap; for a `.wasm.ref`, the pulled module, up to
//!   `max_module_bytes`) until it loads or a newer offer replaces it.
//! - Each offer refused is one more rejection, with its Event: a tenant editing a waiting
//!   guest's ConfigMap gets one per edit.

use std::collections::BTreeMap;

/// What tenant namespaces may use, over all their guests. Set by the tenants' source (see
/// [`Supervisor::set_tenant_limits`](super::Supervisor::set_tenant_limits)); the default
/// limits nothing.
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
