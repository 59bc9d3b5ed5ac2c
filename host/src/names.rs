//! The names the host is handed (namespaces, object names, kinds, field paths, label keys) by
//! guests, tenants and the host config, checked as Kubernetes checks them before any of them
//! reaches a URL, a work-queue key, an informer or a log line.
//!
//! Every function here takes guest-controlled text: each says which Kubernetes rule it follows,
//! and where it is stricter on purpose. The [`Error`] shows the offending value quoted and
//! shortened, so a 10 MB name cannot become a 10 MB message.

use std::fmt::Write as _;

use crate::selector::{LabelSelector, Operator};

/// A guest-supplied name that Kubernetes (or, where said, the host) refuses, with what a valid
/// one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value}{place} is not valid: {expected}")]
pub struct Error {
    /// What the value is: `namespace`, `kind`.
    what: String,
    /// The value, quoted (control characters escaped) and shortened.
    value: String,
    /// Where it was found, if said: ` in owns[0]`.
    place: String,
    /// The rule, with an example.
    expected: String,
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn new(what: impl Into<String>, value: &str, expected: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            value: shown(value),
            place: String::new(),
            expected: expected.into(),
        }
    }

    /// The same error, saying where the value was found (`namespaces[2]`).
    pub fn at(mut self, place: &str) -> Self {
        self.place = format!(" in {place}");
        self
    }
}

/// How much of a hostile value a message quotes.
const SHOWN: usize = 64;

/// `s` for a message: Debug-quoted (so NUL, newlines and quotes are escaped, and no guest text
/// can forge a log line) and cut to `SHOWN` bytes at a character boundary, with its length.
pub fn shown(s: &str) -> String {
    if s.len() <= SHOWN {
        return format!("{s:?}");
    }
    let mut end = SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &s[..end], s.len())
}

const NAMESPACE_RULE: &str = "a namespace is a DNS-1123 label: 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit (e.g. team-a)";

/// A namespace name: a DNS-1123 label, as apimachinery's `ValidateNamespaceName`.
pub fn namespace(s: &str) -> Result<()> {
    if is_dns_label(s) {
        Ok(())
    } else {
        Err(Error::new("namespace", s, NAMESPACE_RULE))
    }
}

/// Kinds whose object names need not be DNS-1123 subdomains: their validation uses only the
/// path-segment rule (or nothing at all, which the path-segment rule still bounds, since the
/// generic registry applies it to every object).
///
/// - RBAC: `ValidateRBACName = path.IsValidPathSegmentName` (pkg/apis/rbac/validation), which is
///   what allows `system:node`;
/// - CertificateSigningRequest: `ValidateCertificateRequestName` accepts anything
///   (pkg/apis/certificates/validation, "we don't care what you call your certificate
///   requests"); ClusterTrustBundle names embed a signer name with `:`;
/// - Event (core and events.k8s.io): events created through core/v1 skip the subdomain check
///   (pkg/apis/core/validation/events.go, "no further validation for backwards compatibility"),
///   and client-go names them `<involved object's name>.<hex>`, so an Event about a Role may
///   hold a `:`.
const PATH_SEGMENT_NAMED: &[(&str, &str)] = &[
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("", "Event"),
    ("events.k8s.io", "Event"),
];

/// Longest object name the host accepts: the DNS-1123 subdomain bound.
pub const MAX_NAME: usize = 253;

/// The name of an object of kind `group`/`kind`.
///
/// Every kind: apimachinery's path-segment rule (`path.IsValidPathSegmentName`: not `.` or
/// `..`, no `/` or `%`), which the API server's generic registry applies to every object and
/// every request, so no object failing it can exist. The host is stricter on purpose for every
/// kind in two ways: no control characters (no tool shows them, and they would forge log lines)
/// and at most [`MAX_NAME`] bytes (RBAC names have no bound in Kubernetes; 253 is the subdomain
/// bound and holds every real one).
///
/// Then, for every kind but those in `PATH_SEGMENT_NAMED`: a DNS-1123 subdomain. Custom
/// resources always are (apiextensions' validator uses `NameIsDNSSubdomain`), and so are most
/// built-in kinds; the few stricter ones (Namespace, Service: DNS labels) are left to the API
/// server, whose 422 the guest receives as `invalid` all the same. Refusing here, before any
/// request, is what keeps `<`, `>`, `` ` ``, `"` and spaces out of URLs and keys.
pub fn object_name(group: &str, kind: &str, name: &str) -> Result<()> {
    let what = || format!("name of a {kind}");
    let path_segment_only = PATH_SEGMENT_NAMED.contains(&(group, kind));
    let rule = if path_segment_only {
        format!(
            "a {kind} name is 1 to {MAX_NAME} characters, not '.' or '..', without '/', '%' or control characters (e.g. system:node)"
        )
    } else {
        format!(
            "a {kind} name is a DNS-1123 subdomain: 1 to {MAX_NAME} lower-case letters, digits, '-' or '.', each dot-separated part starting and ending with a letter or digit (e.g. my-config.v1)"
        )
    };
    let segment_ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && !name.contains(['/', '%'])
        && !name.chars().any(char::is_control);
    let ok = segment_ok && (path_segment_only || is_dns_subdomain(name));
    if ok {
        Ok(())
    } else {
        Err(Error::new(what(), name, rule))
    }
}

/// A kind as declared or passed by a guest, following apiextensions' checks of a GVK
/// (`ValidateCustomResourceDefinitionNames` and the conversion review's GVK check): the group
/// empty (core) or a DNS-1123 subdomain; the version a DNS-1035 label; the kind, lower-cased, a
/// DNS-1035 label ("may have mixed case, but should otherwise match").
pub fn gvk(group: &str, version: &str, kind: &str) -> Result<()> {
    if !group.is_empty() && !is_dns_subdomain(group) {
        return Err(Error::new(
            "API group",
            group,
            "a group is empty (the core group) or a DNS-1123 subdomain (e.g. apps, example.com)",
        ));
    }
    if !is_dns1035_label(version) {
        return Err(Error::new(
            "API version",
            version,
            "a version is a DNS-1035 label: a lower-case letter, then lower-case letters, digits or '-', at most 63 (e.g. v1, v1beta1)",
        ));
    }
    if !is_dns1035_label(&kind.to_ascii_lowercase()) {
        return Err(Error::new(
            "kind",
            kind,
            "a kind is a letter, then letters, digits or '-', at most 63, ending with a letter or digit (e.g. ConfigMap)",
        ));
    }
    Ok(())
}

/// Longest field path accepted.
const MAX_FIELD_PATH: usize = 256;

/// A field path for a field index or a field match: dot-separated segments of ASCII letters,
/// digits, `-` and `_`, at most `MAX_FIELD_PATH` bytes.
///
/// The characters are those the host accepts in a field selector's field name (see
/// `selector::FieldSelector::parse`), so that a path declared for the cache can also be sent
/// to the API server; the bound keeps index names, messages and metric labels short.
pub fn field_path(path: &str) -> Result<()> {
    let ok = !path.is_empty()
        && path.len() <= MAX_FIELD_PATH
        && path.split('.').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        });
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            "field path",
            path,
            format!(
                "a field path is dot-separated segments of letters, digits, '-' or '_', at most {MAX_FIELD_PATH} bytes (e.g. spec.nodeName)"
            ),
        ))
    }
}

/// A label key (as for a label mapping): apimachinery's `IsQualifiedName`, through the label
/// selector parser, which validates keys exactly so.
pub fn label_key(key: &str) -> Result<()> {
    let expected = "a label key is an optional DNS-1123 subdomain and '/', then 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. app.kubernetes.io/name)";
    match LabelSelector::parse(key) {
        Ok(s) if matches!(s.requirements(), [r] if r.operator() == Operator::Exists && r.key() == key) => {
            Ok(())
        }
        Ok(_) => Err(Error::new("label key", key, expected)),
        Err(e) => Err(Error::new("label key", key, format!("{e}; {expected}"))),
    }
}

/// A label selector in the Kubernetes string syntax, validated as the selector parser does
/// (keys and values as apimachinery validates them).
pub fn label_selector(s: &str) -> Result<()> {
    LabelSelector::parse(s).map(|_| ()).map_err(|e| {
        Error::new(
            "label selector",
            s,
            format!("{e}; a selector is comma-separated requirements such as app=web,tier!=db"),
        )
    })
}

/// `s` percent-encoded as one URL path segment: every byte but RFC 3986's unreserved
/// characters (`A-Z a-z 0-9 - . _ ~`) becomes `%XX`.
///
/// The API server decodes the path before it splits it (`requestinfo.go` reads `URL.Path`),
/// so this cannot smuggle a `/`: names with `/` or `%` are refused before they get here. It
/// only makes what Kubernetes allows (`:` in RBAC names) travel as itself, and anything that
/// slipped through a check unable to change the URL's shape.
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// One or more of `a-z 0-9 -`, starting and ending with a letter or digit: the part of
/// apimachinery's label and subdomain patterns between dots, without a length bound.
fn is_label_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// A DNS-1123 label (`IsDNS1123Label`): at most 63 bytes.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_label_part(s)
}

/// A DNS-1035 label (`IsDNS1035Label`): a DNS-1123 label that starts with a letter.
fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// A DNS-1123 subdomain (`IsDNS1123Subdomain`): at most 253 bytes of dot-separated parts.
/// Surprise, as in Kubernetes: the parts have no 63-byte bound of their own.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_dns_labels() {
        for ok in ["a", "team-a", "0", &"x".repeat(63)] {
            assert!(namespace(ok).is_ok(), "{ok:?}");
        }
        let long = "x".repeat(300);
        for bad in [
            "",
            "..",
            ".",
            "a/b",
            "a\0b",
            "A",
            "-a",
            "a-",
            "a.b",
            "a b",
            "a%2Fb",
            "team-a/../team-b",
            &long,
        ] {
            let err = namespace(bad).unwrap_err().to_string();
            assert!(err.contains("DNS-1123 label"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn object_names_are_subdomains_except_where_kubernetes_allows_path_segments() {
        let long = "a".repeat(254);
        for bad in [
            "", ".", "..", "a/b", "%2F", "a%b", "a<b", "a>b", "a`b", "a\"b", "a\0b", "a\nb", "A",
            "a b", &long,
        ] {
            assert!(
                object_name("", "ConfigMap", bad).is_err(),
                "{bad:?} accepted for a ConfigMap"
            );
        }
        assert!(object_name("", "ConfigMap", "my-config.v1").is_ok());
        assert!(object_name("example.com", "Widget", &"a".repeat(253)).is_ok());

        let rbac = "rbac.authorization.k8s.io";
        assert!(object_name(rbac, "ClusterRole", "system:node").is_ok());
        assert!(
            object_name(rbac, "ClusterRole", "a<b").is_ok(),
            "Kubernetes allows it"
        );
        for bad in ["", "..", "a/b", "a%b", "a\0b", "a\nb", &long] {
            assert!(
                object_name(rbac, "ClusterRole", bad).is_err(),
                "{bad:?} accepted for a ClusterRole"
            );
        }
        assert!(
            object_name("", "Role", "system:node").is_err(),
            "only the RBAC group's Role is exempt"
        );
    }

    #[test]
    fn an_error_quotes_the_value_escaped_and_short() {
        let err = object_name("", "ConfigMap", &format!("a\nb{}", "x".repeat(10_000)))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(r#"name of a ConfigMap "a\nbxxx"#), "{err}");
        assert!(err.contains("(10003 bytes)"), "{err}");
        assert!(err.len() < 400, "{err}");
        assert!(!err.contains('\n'));
        let err = namespace("é".repeat(100).as_str()).unwrap_err().to_string();
        assert!(err.contains("(200 bytes)"), "cut at a char boundary: {err}");
    }

    #[test]
    fn kinds_follow_the_api_servers_gvk_rules() {
        assert!(gvk("", "v1", "ConfigMap").is_ok());
        assert!(gvk("apps", "v1beta2", "Deployment").is_ok());
        assert!(gvk("example.com", "v1", "My-Kind2").is_ok());
        for (g, v, k) in [
            ("", "v1", ""),
            ("", "v1", "a/b"),
            ("", "v1", "Config Map"),
            ("", "v1", "1Kind"),
            ("", "v1", "Kind\0"),
            ("", "", "ConfigMap"),
            ("", "V1", "ConfigMap"),
            ("", "v1/x", "ConfigMap"),
            ("a/b", "v1", "ConfigMap"),
            ("Apps", "v1", "ConfigMap"),
            ("..", "v1", "ConfigMap"),
        ] {
            assert!(gvk(g, v, k).is_err(), "{g}/{v}/{k} accepted");
        }
    }

    #[test]
    fn field_paths_are_dotted_segments_the_api_server_accepts() {
        for ok in ["spec.nodeName", "data.indexed", "metadata.labels.app_x-1"] {
            assert!(field_path(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            ".",
            "a..b",
            ".a",
            "a.",
            "a b",
            "a,b",
            "a=b",
            "a/b",
            "a\0b",
            &"a".repeat(257),
        ] {
            assert!(field_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn label_keys_are_qualified_names() {
        assert!(label_key("app").is_ok());
        assert!(label_key("example.com/for").is_ok());
        for bad in ["", "a=b", "!a", "a,b", "a b", "a/b/c", "-a", "a\0"] {
            assert!(label_key(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(segment("system:node"), "system%3Anode");
        assert_eq!(segment("a.b-c_d~e"), "a.b-c_d~e");
        assert_eq!(segment("a<b>`\"\0/%é"), "a%3Cb%3E%60%22%00%2F%25%C3%A9");
    }
}
