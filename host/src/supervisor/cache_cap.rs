//! The tenant cap on cache bytes, applied: each serving guest's share of the cache, and a
//! tenant's load measured against its namespace's cap once its informers have synced (see
//! `memory` for how shares are split).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::memory::{Claims, OverCap, Reader, check_cap, split};
use super::{Source, Supervisor};
use crate::controller::{self, Controller, Settings};
use crate::guest::Module;
use crate::informer::Informer;

/// Drops a guest's claim when its load ends, whatever the outcome: by then it serves (and its
/// entry counts) or it does not (and nothing should).
pub(super) struct Claim<'a> {
    supervisor: &'a Supervisor,
    guest: &'a str,
}

impl<'a> Claim<'a> {
    /// The claim `guest`'s load may make; loads of one guest are serialised, so it is the only
    /// one.
    pub(super) fn of(supervisor: &'a Supervisor, guest: &'a str) -> Self {
        Self { supervisor, guest }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut claims = (self.supervisor.cache_claims.lock()).unwrap_or_else(|e| e.into_inner());
        claims.remove(self.guest);
    }
}

impl Supervisor {
    /// The readers of every guest a version of which serves.
    pub(super) fn readers(&self) -> Vec<Reader> {
        self.readers_with(&Claims::new())
    }

    /// The readers of `claims`, and of every other guest a version of which serves.
    ///
    /// Lock order: the claims (held by the caller), then the guests.
    fn readers_with(&self, claims: &Claims) -> Vec<Reader> {
        let mut readers: Vec<Reader> = (claims.iter())
            .map(|(name, (source, informers))| Reader::new(name, source, informers))
            .collect();
        let guests = self.guests.lock().unwrap();
        for (name, e) in guests.iter().filter(|(n, _)| !claims.contains_key(*n)) {
            if let Some(c) = &e.controller {
                readers.push(Reader::new(name, &e.source, &c.informers()));
            }
        }
        readers
    }

    /// Each serving guest's share of the cache, in bytes; see the module docs.
    pub(super) fn cache_shares(&self) -> BTreeMap<String, u64> {
        split(&self.readers())
    }

    /// Starts tenant guest `name`, waits for its informers to sync, and measures them against
    /// the cache cap: over it, the guest is stopped (its informers released) and the error is
    /// [`controller::Error::Refused`]. Call it only while holding `name`'s [`Claim`].
    pub(super) async fn start_tenant(
        &self,
        name: &str,
        source: &Source,
        module: Module,
        settings: &Settings,
        client: kube::Client,
        share: crate::controller::fair_share::Share,
    ) -> Result<Arc<Controller>, controller::Error> {
        let c = Controller::start_synced(
            &self.factory,
            client,
            module,
            settings.clone(),
            share,
            self.gate_for(name, settings.shard_keys),
            self.options.sync_timeout,
        )
        .await?;
        // Measured synced: the cap is on what the cache holds, not on a guess.
        if let Err(over) = self.check_cache_cap(name, source, &c.informers()) {
            c.stop().await;
            let (guest, source) = (name.to_string(), Box::new(over));
            return Err(controller::Error::Refused { guest, source });
        }
        Ok(c)
    }

    /// Whether guest `name` of `source` may serve a version reading `informers`, under the
    /// tenants' cache cap (none unless the ConfigMap source set one). If it may, the version
    /// is claimed until `name`'s [`Claim`] drops: call it only while holding one.
    pub(super) fn check_cache_cap(
        &self,
        name: &str,
        source: &Source,
        informers: &[Arc<Informer>],
    ) -> Result<(), OverCap> {
        let Some(cap) = self.tenant_limits().max_cached_bytes_per_namespace else {
            return Ok(());
        };
        // Checked and claimed under one lock: no other check falls in between.
        let mut claims = self.cache_claims.lock().unwrap();
        let serving = self.readers_with(&claims);
        check_cap(&serving, Reader::new(name, source, informers), cap)?;
        claims.insert(name.to_string(), (source.clone(), informers.to_vec()));
        Ok(())
    }
}
