//! Who this replica is, when the operator does not say: the pod's name, else the machine's,
//! made a DNS label; and the namespace its Leases live in.

/// `$POD_NAME`, else `<hostname>-<pid>`, made a DNS label: unique per process, as a replica's
/// identity must be.
pub fn default_identity() -> String {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.is_empty()
    {
        return name;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    identity_of(&host, std::process::id())
}

/// `<hostname>-<pid>` as a DNS label of at most 63 characters: lower case, anything but a
/// letter or digit made a `-`, the host part cut so that the pid always fits.
fn identity_of(hostname: &str, pid: u32) -> String {
    let label: String = hostname
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let label = label.trim_matches('-');
    let label = if label.is_empty() {
        "reconciled"
    } else {
        label
    };
    let pid = pid.to_string();
    let keep = 62 - pid.len();
    format!("{}-{pid}", &label[..label.len().min(keep)]).replace("--", "-")
}

/// The namespace this host runs in: `$POD_NAMESPACE`, the pod's service account namespace, or
/// `default`.
pub fn own_namespace() -> String {
    if let Ok(ns) = std::env::var("POD_NAMESPACE")
        && !ns.is_empty()
    {
        return ns;
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostname_becomes_a_dns_label_with_the_pid() {
        assert_eq!(identity_of("Build_Box.local\n", 42), "build-box-local-42");
        assert_eq!(identity_of("", 7), "reconciled-7");
        assert_eq!(identity_of("--", 7), "reconciled-7");
    }

    #[test]
    fn a_long_hostname_is_cut_so_that_the_pid_fits_in_63() {
        let id = identity_of(&"a".repeat(100), 4_294_967_295);
        assert!(id.len() <= 63, "{} chars", id.len());
        assert!(id.ends_with("-4294967295"), "{id}");
        assert!(crate::names::namespace(&id).is_ok(), "{id}");
    }
}
