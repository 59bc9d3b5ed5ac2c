//! Seating tenants' offers under the guest quota (see `quota`): an offer that needs a seat takes
//! one or waits for one, and a freed seat admits who waits.

use std::sync::Arc;

use super::load::{Load, Rejection};
use super::offers::Offer;
use super::quota::TenantLimits;
use super::{Reason, Source, Supervisor};

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
        let serving = self.holds_seat(name);
        let max = self.tenant_limits().max_guests_per_namespace;
        let mut refusal = None;
        let start = {
            let mut offers = self.offers.lock().unwrap();
            let mut seats = self.seats.lock().unwrap();
            // The newest offer for a guest wins, a waiting one included.
            seats.unpark(name);
            let tenant = match &offer {
                Offer::Load { source, .. } => source.tenant_namespace().map(str::to_string),
                _ => None,
            };
            match (&offer, tenant, max) {
                (
                    Offer::Load {
                        source, settings, ..
                    },
                    Some(namespace),
                    Some(max),
                ) if !offers.is_closed() => {
                    let seated = if serving {
                        seats.hold(&namespace, name);
                        Ok(())
                    } else {
                        seats.take(&namespace, name, max)
                    };
                    if let Err(held) = seated {
                        let namespace = namespace.as_str();
                        refusal = Some(Refusal {
                            source: source.clone(),
                            settings: settings.clone(),
                            message: format!(
                                "namespace {namespace} already has {held} tenant guests serving or loading, the most the host allows (tenants.max_guests_per_namespace = {max}); guest {name} loads by itself once one of them is removed or rejected, or ask the host's operator to raise tenants.max_guests_per_namespace"
                            ),
                        });
                        seats.park(namespace, name, offer);
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
        let serving = self.holds_seat(name);
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

    /// Whether `name` keeps its seat: it serves here, or it is parked because another replica
    /// holds its shard and serves it (cold standby).
    fn holds_seat(&self, name: &str) -> bool {
        let guests = self.guests.lock().unwrap();
        guests
            .get(name)
            .is_some_and(|e| e.controller.is_some() || e.parked)
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
}
