//! Label keys and values validated as apimachinery's `IsQualifiedName` and `IsValidLabelValue`.

use super::error::{Error, Result, snippet};

pub(super) const NAME_RULE: &str =
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

pub(super) fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(super) fn is_dns_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(alnum)
            && b.last().is_some_and(alnum)
            && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    s.split('.').all(label_ok)
}

pub(super) fn key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if name.contains('/') {
            return Some(
                "it has more than one '/'; expected an optional DNS-subdomain prefix, one '/', \
                 and a name"
                    .to_string(),
            );
        }
        if prefix.is_empty() {
            return Some(
                "the prefix before '/' is empty; expected a DNS subdomain such as example.com"
                    .to_string(),
            );
        }
        if prefix.len() > 253 {
            return Some(format!(
                "the prefix is {} characters long; expected at most 253",
                prefix.len()
            ));
        }
        if !is_dns_subdomain(prefix) {
            return Some(
                "the prefix is not a DNS subdomain; expected lower-case letters, digits, '-' and \
                 '.', each dot-separated part starting and ending with a letter or digit"
                    .to_string(),
            );
        }
    }
    if name.is_empty() {
        return Some("the name part is empty; expected 1 to 63 characters".to_string());
    }
    if !is_name(name) {
        return Some(format!("the name part must consist of {NAME_RULE}"));
    }
    if name.len() > 63 {
        return Some(format!(
            "the name part is {} characters long; expected at most 63",
            name.len()
        ));
    }
    None
}

pub(super) fn value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if !is_name(value) {
        return Some(format!(
            "a label value must be empty or consist of {NAME_RULE}"
        ));
    }
    if value.len() > 63 {
        return Some(format!(
            "the value is {} characters long; expected at most 63",
            value.len()
        ));
    }
    None
}

pub(super) fn check_key(key: &str, at: &str) -> Result<()> {
    match key_problem(key) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidKey {
            at: at.to_string(),
            key: snippet(key),
            reason,
        }),
    }
}

pub(super) fn check_value(key: &str, value: &str, at: &str) -> Result<()> {
    match value_problem(value) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidValue {
            at: at.to_string(),
            key: snippet(key),
            value: snippet(value),
            reason,
        }),
    }
}
