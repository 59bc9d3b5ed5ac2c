//! Which process holds a replica identity: each process writes a token of its own into its
//! replica Lease, so that a second process started with the same `--replica-id` sees the first
//! and refuses to run instead of believing, with it, that it holds the identity's shards.
//!
//! Pure: the token, and what a replica Lease on record means for a process about to take its
//! identity. The waiting and writing are the elector's.

use std::hash::{BuildHasher, Hasher};

use k8s_openapi::api::coordination::v1::Lease;

/// The annotation of a replica Lease naming the process that wrote it.
pub const ANNOTATION: &str = "reconciled.dev/instance";

/// This process's token: `<hostname>/<pid>/<16 hex digits>`, readable in an error about a
/// duplicate and unique per process (the digits are random).
pub fn token() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    let host = if host.is_empty() {
        "unknown-host"
    } else {
        host
    };
    // std's hasher keys come from the OS's randomness, which is all a token needs; a process
    // restarted with the same pid still gets other digits.
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{host}/{}/{:016x}", std::process::id(), h.finish())
}

/// What a replica Lease on record says to a process about to take its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nobody holds it (absent, or released): take it.
    Free,
    /// It names this process: renew it.
    Ours,
    /// Another process wrote it: it may still be running. `instance` is its token, or a
    /// description when the Lease carries none (a host from before tokens).
    Other {
        /// The other process, as its Lease names it.
        instance: String,
    },
}

/// Judges the replica Lease `on_record` for the process with token `ours`.
///
/// Where it may surprise: a Lease held by another token is `Other` however old it is; whether
/// that process is still alive is for the caller to see, by watching the Lease change (a live
/// holder renews it) or not.
pub fn judge(on_record: Option<&Lease>, ours: &str) -> Claim {
    let Some(lease) = on_record else {
        return Claim::Free;
    };
    let held = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_some_and(|h| !h.is_empty());
    if !held {
        return Claim::Free;
    }
    match of(lease) {
        Some(t) if t == ours => Claim::Ours,
        Some(t) => Claim::Other {
            instance: t.to_string(),
        },
        None => Claim::Other {
            instance: "a host that writes no instance token (an older version)".into(),
        },
    }
}

/// The token a Lease carries, if any.
pub fn of(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, token: Option<&str>) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "reconciled-replica-a",
                "annotations": token.map(|t| serde_json::json!({ANNOTATION: t})),
            },
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }))
        .unwrap()
    }

    #[test]
    fn an_absent_or_released_lease_is_free_whatever_token_it_carries() {
        assert_eq!(judge(None, "me"), Claim::Free);
        assert_eq!(judge(Some(&lease(None, Some("other"))), "me"), Claim::Free);
        assert_eq!(
            judge(Some(&lease(Some(""), Some("other"))), "me"),
            Claim::Free
        );
    }

    #[test]
    fn a_held_lease_is_ours_only_with_our_token() {
        assert_eq!(
            judge(Some(&lease(Some("a"), Some("me"))), "me"),
            Claim::Ours
        );
        assert_eq!(
            judge(Some(&lease(Some("a"), Some("box/7/00ff"))), "me"),
            Claim::Other {
                instance: "box/7/00ff".into()
            }
        );
    }

    #[test]
    fn a_held_lease_without_a_token_is_another_process() {
        let Claim::Other { instance } = judge(Some(&lease(Some("a"), None)), "me") else {
            panic!("not Other");
        };
        assert!(instance.contains("older version"), "{instance}");
    }

    #[test]
    fn two_tokens_of_one_process_differ_and_name_its_pid() {
        let (a, b) = (token(), token());
        assert_ne!(a, b);
        let pid = std::process::id().to_string();
        assert_eq!(a.split('/').nth(1), Some(pid.as_str()), "{a}");
    }
}
