//! Leases: reading `coordination.k8s.io/v1` Leases as the informer caches them, judging when one
//! has expired, and the three writes a replica makes (acquire, renew, release), each guarded by
//! the resourceVersion it read, so that two replicas never both succeed.
//!
//! Expiry is judged as client-go's leader election judges it: from when *this* replica last saw
//! the Lease change, on its own monotonic clock, plus the Lease's duration; never from the
//! `renewTime` written in it, which comes from another machine's clock. Clock offsets between
//! replicas therefore do not matter; only clock *rates* do, and the margin between the renew
//! deadline and the lease duration absorbs them (see `replicas` module docs).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

/// The label every Lease of one replica group carries, valued with the group's name.
pub const GROUP_LABEL: &str = "reconciled.dev/replicas";
/// The label saying what a Lease stands for: `shard` or `replica`.
pub const ROLE_LABEL: &str = "reconciled.dev/lease";

/// A write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Someone else wrote the Lease since it was read: the write lost the race.
    #[error("Lease {name} changed since it was read (another replica wrote it)")]
    Conflict {
        /// The Lease.
        name: String,
    },
    /// The API server did not answer in time or refused for another reason.
    #[error(
        "Lease {namespace}/{name}: {source}; check that the host may get, create and update Leases in {namespace} (see deploy/reconciled.yaml)"
    )]
    Api {
        /// Its namespace.
        namespace: String,
        /// The Lease.
        name: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer within the time allowed.
    #[error("Lease {namespace}/{name}: no answer within {after:?}")]
    Timeout {
        /// Its namespace.
        namespace: String,
        /// The Lease.
        name: String,
        /// How long we waited.
        after: Duration,
    },
}

impl Error {
    /// Whether the API server forbade the write (RBAC), which retrying will not fix.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Api { source: kube::Error::Api(s), .. } if s.code == 403)
    }
}

/// One Lease as this replica sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The Lease as read.
    pub lease: Lease,
    /// Its holder, if any (`None` once released).
    pub holder: Option<String>,
    /// How long the holder's claim lasts after its last renewal.
    pub duration: Duration,
}

impl Seen {
    /// Reads a cached Lease's JSON; `None` if it is not a Lease.
    pub fn from_json(json: &[u8]) -> Option<Self> {
        let lease: Lease = serde_json::from_slice(json).ok()?;
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.filter(|h| !h.is_empty());
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        Some(Self {
            lease,
            holder,
            duration,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.lease.metadata.name.as_deref().unwrap_or("")
    }

    /// Its resourceVersion, as read.
    pub fn resource_version(&self) -> &str {
        self.lease
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("")
    }
}

/// When this replica last saw each Lease change, by name: the start of each Lease's expiry.
#[derive(Debug, Default)]
pub struct Observed {
    at: HashMap<String, (String, Instant)>,
}

impl Observed {
    /// Notes `seen` as read at `now`; returns when it last changed.
    pub fn note(&mut self, seen: &Seen, now: Instant) -> Instant {
        let rv = seen.resource_version();
        let entry = self
            .at
            .entry(seen.name().to_string())
            .or_insert_with(|| (rv.to_string(), now));
        if entry.0 != rv {
            *entry = (rv.to_string(), now);
        }
        entry.1
    }

    /// Forgets Leases not in `names` (deleted ones).
    pub fn retain(&mut self, names: &std::collections::HashSet<&str>) {
        self.at.retain(|n, _| names.contains(n.as_str()));
    }
}

/// When `seen`, last seen changing at `changed`, is free for anyone to take: at once if nobody
/// holds it, else once its duration has passed since.
pub fn free_at(seen: &Seen, changed: Instant) -> Instant {
    match seen.holder {
        None => changed,
        Some(_) => changed + seen.duration,
    }
}

/// The Lease writes of one replica, in one namespace.
#[derive(Clone)]
pub struct Writer {
    api: Api<Lease>,
    namespace: String,
    group: String,
    identity: String,
    instance: String,
    owner: Option<OwnerReference>,
    duration_seconds: i32,
    timeout: Duration,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("namespace", &self.namespace)
            .field("identity", &self.identity)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Writes Leases of `group` in `namespace` as `identity`, claiming `duration` (rounded up to
    /// whole seconds, as the Lease stores it); each call gives up after `timeout`. The replica
    /// Lease it writes names `instance`, this process ([`super::instance`]).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        (group, identity, instance): (&str, &str, &str),
        duration: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            group: group.to_string(),
            identity: identity.to_string(),
            instance: instance.to_string(),
            owner: None,
            duration_seconds: i32::try_from(duration.as_millis().div_ceil(1000))
                .unwrap_or(i32::MAX),
            timeout,
        }
    }

    fn now() -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::now())
    }

    /// Names `owner` as the owner of every Lease this writer creates or takes, so that the
    /// garbage collector deletes them with it.
    pub fn with_owner(mut self, owner: OwnerReference) -> Self {
        self.owner = Some(owner);
        self
    }

    /// This process's instance token.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Takes Lease `name` (role `role`) for this replica: creates it if `seen` is `None`, else
    /// replaces what was seen, which fails with [`Error::Conflict`] if anyone wrote it since.
    /// A replica Lease is stamped with this process's instance token. Returns the Lease as
    /// written, to renew from.
    pub async fn acquire(
        &self,
        name: &str,
        role: &str,
        seen: Option<&Lease>,
    ) -> Result<Lease, Error> {
        let now = Self::now();
        match seen {
            None => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(
                            [
                                (GROUP_LABEL.to_string(), self.group.clone()),
                                (ROLE_LABEL.to_string(), role.to_string()),
                            ]
                            .into(),
                        ),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(self.duration_seconds),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.stamp(&mut lease, role);
                self.call(name, self.api.create(&PostParams::default(), &lease))
                    .await
            }
            Some(old) => {
                let mut lease = old.clone();
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                let changed = spec.holder_identity.as_deref() != Some(self.identity.as_str());
                if changed {
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.holder_identity = Some(self.identity.clone());
                spec.lease_duration_seconds = Some(self.duration_seconds);
                spec.acquire_time = Some(now.clone());
                spec.renew_time = Some(now);
                self.stamp(&mut lease, role);
                self.call(name, self.api.replace(name, &PostParams::default(), &lease))
                    .await
            }
        }
    }

    fn stamp(&self, lease: &mut Lease, role: &str) {
        if let Some(owner) = &self.owner {
            let refs = lease.metadata.owner_references.get_or_insert_with(Vec::new);
            if !refs.iter().any(|r| r.uid == owner.uid) {
                refs.push(owner.clone());
            }
        }
        if role == "replica" {
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    super::instance::ANNOTATION.to_string(),
                    self.instance.clone(),
                );
        }
    }

    /// Renews `held` (as last written by this replica). [`Error::Conflict`] means someone else
    /// wrote it since: it may no longer be ours.
    pub async fn renew(&self, held: &Lease) -> Result<Lease, Error> {
        let mut lease = held.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(Self::now());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        let name = lease.metadata.name.clone().unwrap_or_default();
        self.call(
            &name,
            self.api.replace(&name, &PostParams::default(), &lease),
        )
        .await
    }

    /// Gives `held` up: no holder and a duration of one second, so that every replica may take
    /// it at once (client-go releases the same way).
    ///
    /// `held` may be older than the Lease on the server while this replica still holds it: a
    /// renew that reached the server but whose answer was lost (a task cancelled as the replica
    /// stops, a timeout). On a conflict the Lease is read again and, if this replica is still its
    /// holder, released from what was read; [`Error::Conflict`] only when another replica holds
    /// it now, which is then not ours to release.
    pub async fn release(&self, held: &Lease) -> Result<Lease, Error> {
        match self.release_from(held).await {
            Err(Error::Conflict { .. }) => {
                let name = held.metadata.name.clone().unwrap_or_default();
                let now = self.get(&name).await?;
                let ours = now.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                    == Some(self.identity.as_str());
                if ours {
                    self.release_from(&now).await
                } else {
                    Err(Error::Conflict { name })
                }
            }
            other => other,
        }
    }

    async fn release_from(&self, held: &Lease) -> Result<Lease, Error> {
        let mut lease = held.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        let name = lease.metadata.name.clone().unwrap_or_default();
        self.call(
            &name,
            self.api.replace(&name, &PostParams::default(), &lease),
        )
        .await
    }

    /// Deletes Lease `name` (this replica's own, as it stops); gone already is fine.
    pub async fn delete(&self, name: &str) -> Result<(), Error> {
        let params = kube::api::DeleteParams::default();
        match tokio::time::timeout(self.timeout, self.api.delete(name, &params)).await {
            Err(_) => Err(Error::Timeout {
                namespace: self.namespace.clone(),
                name: name.to_string(),
                after: self.timeout,
            }),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            Ok(Err(source)) => Err(Error::Api {
                namespace: self.namespace.clone(),
                name: name.to_string(),
                source,
            }),
        }
    }

    /// Reads Lease `name` afresh (after a conflict on a renew that may have been our own write
    /// answered too late).
    pub async fn get(&self, name: &str) -> Result<Lease, Error> {
        self.call(name, self.api.get(name)).await
    }

    /// Reads Lease `name` afresh; `None` if there is none.
    pub async fn get_opt(&self, name: &str) -> Result<Option<Lease>, Error> {
        match self.get(name).await {
            Ok(l) => Ok(Some(l)),
            Err(Error::Api {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes Lease `name` only if it is still at `resource_version`: `false` when it changed
    /// since (written by someone, so not litter after all) or is gone already.
    pub async fn delete_if(&self, name: &str, resource_version: &str) -> Result<bool, Error> {
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: Some(resource_version.to_string()),
                uid: None,
            }),
            ..kube::api::DeleteParams::default()
        };
        match tokio::time::timeout(self.timeout, self.api.delete(name, &params)).await {
            Err(_) => Err(Error::Timeout {
                namespace: self.namespace.clone(),
                name: name.to_string(),
                after: self.timeout,
            }),
            Ok(Ok(_)) => Ok(true),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 || s.code == 409 => Ok(false),
            Ok(Err(source)) => Err(Error::Api {
                namespace: self.namespace.clone(),
                name: name.to_string(),
                source,
            }),
        }
    }

    /// The shard Leases of this group that name this replica as holder on the server: after a
    /// write whose answer was lost (cancelled as the replica stops), there may be some the
    /// replica does not know it holds.
    pub async fn held_here(&self) -> Result<Vec<Lease>, Error> {
        Ok(self
            .list("shard")
            .await?
            .into_iter()
            .filter(|l| {
                l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                    == Some(self.identity.as_str())
            })
            .collect())
    }

    /// Every Lease of this group with role `role` (`shard` or `replica`) on the server now.
    pub async fn list(&self, role: &str) -> Result<Vec<Lease>, Error> {
        let lp = kube::api::ListParams::default()
            .labels(&format!("{GROUP_LABEL}={},{ROLE_LABEL}={role}", self.group));
        let all = format!("{}-{role}-*", self.group);
        match tokio::time::timeout(self.timeout, self.api.list(&lp)).await {
            Err(_) => Err(Error::Timeout {
                namespace: self.namespace.clone(),
                name: all,
                after: self.timeout,
            }),
            Ok(Err(source)) => Err(Error::Api {
                namespace: self.namespace.clone(),
                name: all,
                source,
            }),
            Ok(Ok(list)) => Ok(list.items),
        }
    }

    async fn call(
        &self,
        name: &str,
        request: impl std::future::Future<Output = Result<Lease, kube::Error>>,
    ) -> Result<Lease, Error> {
        match tokio::time::timeout(self.timeout, request).await {
            Err(_) => Err(Error::Timeout {
                namespace: self.namespace.clone(),
                name: name.to_string(),
                after: self.timeout,
            }),
            Ok(Ok(lease)) => Ok(lease),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(Error::Conflict {
                name: name.to_string(),
            }),
            Ok(Err(source)) => Err(Error::Api {
                namespace: self.namespace.clone(),
                name: name.to_string(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(rv: &str, holder: Option<&str>, seconds: i32) -> Seen {
        let json = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "reconciled-shard-3", "namespace": "ops", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds},
        });
        Seen::from_json(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn expiry_counts_from_when_this_replica_saw_the_lease_change_not_from_its_renew_time() {
        let mut observed = Observed::default();
        let t0 = Instant::now();
        let a = seen("10", Some("replica-a"), 15);
        assert_eq!(observed.note(&a, t0), t0);
        // The same resourceVersion seen later: the clock does not restart.
        assert_eq!(observed.note(&a, t0 + Duration::from_secs(5)), t0);
        assert_eq!(free_at(&a, t0), t0 + Duration::from_secs(15));
        // A renewal (a new resourceVersion) restarts it.
        let renewed = seen("11", Some("replica-a"), 15);
        let t1 = t0 + Duration::from_secs(6);
        assert_eq!(observed.note(&renewed, t1), t1);
        assert_eq!(free_at(&renewed, t1), t1 + Duration::from_secs(15));
    }

    #[test]
    fn a_released_lease_is_free_at_once_and_an_empty_holder_is_no_holder() {
        let t0 = Instant::now();
        let released = seen("12", None, 1);
        assert_eq!(released.holder, None);
        assert_eq!(free_at(&released, t0), t0);
        let empty = seen("13", Some(""), 15);
        assert_eq!(empty.holder, None);
    }

    #[test]
    fn what_is_not_a_lease_is_ignored() {
        assert!(Seen::from_json(b"not json").is_none());
    }
}
