//! Certificates for a loopback control plane: one CA, the apiserver's serving certificate,
//! client certificates for users, and the service-account signing key.
//!
//! Everything is ECDSA P-256, generated fresh per control plane, so nothing secret is committed
//! and no two test runs trust each other.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};

/// Errors from generating keys and certificates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen refused the parameters or failed to sign.
    #[error("cannot generate {what}: {source}")]
    Generate {
        /// Which certificate or key.
        what: String,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// A client certificate can carry at most two groups (see [`Pki::client_cert`]).
    #[error(
        "user {user:?} asks for {count} groups, but testenv client certificates carry at most 2; grant the extra rights with a RoleBinding to the user instead"
    )]
    TooManyGroups {
        /// The user's common name.
        user: String,
        /// How many groups were asked for.
        count: usize,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A PEM certificate and its PEM (PKCS#8) private key.
#[derive(Debug, Clone)]
pub struct CertPair {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
}

/// The control plane's certificate authority; it signs every other certificate.
pub struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

fn generated<T>(what: &str, r: Result<T, rcgen::Error>) -> Result<T> {
    r.map_err(|source| Error::Generate {
        what: what.to_string(),
        source,
    })
}

impl Pki {
    /// Generates a new CA.
    pub fn new() -> Result<Self> {
        let key = generated("CA key", KeyPair::generate())?;
        let mut params = generated(
            "CA parameters",
            CertificateParams::new(Vec::<String>::new()),
        )?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "reconciled-testenv-ca");
        let cert = generated("CA certificate", params.self_signed(&key))?;
        Ok(Self {
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM: what clients trust and what the apiserver checks clients against.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The apiserver's serving certificate, valid for loopback and the in-cluster names.
    pub fn serving_cert(&self) -> Result<CertPair> {
        let key = generated("serving key", KeyPair::generate())?;
        let mut params = generated(
            "serving parameters",
            CertificateParams::new(Vec::<String>::new()),
        )?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        for name in [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
        ] {
            let dns = generated("serving DNS name", name.try_into())?;
            params.subject_alt_names.push(SanType::DnsName(dns));
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = generated("serving certificate", params.signed_by(&key, &self.issuer))?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate for user `name` in `groups`.
    ///
    /// Kubernetes reads the user from the CN and each group from an O attribute. rcgen keeps one
    /// value per attribute type, so the second group is written under the raw O object
    /// identifier and a third cannot be expressed: at most two groups.
    pub fn client_cert(&self, name: &str, groups: &[&str]) -> Result<CertPair> {
        if groups.len() > 2 {
            return Err(Error::TooManyGroups {
                user: name.to_string(),
                count: groups.len(),
            });
        }
        let key = generated("client key", KeyPair::generate())?;
        let mut params = generated(
            "client parameters",
            CertificateParams::new(Vec::<String>::new()),
        )?;
        params.distinguished_name.push(DnType::CommonName, name);
        if let Some(g) = groups.first() {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        if let Some(g) = groups.get(1) {
            params
                .distinguished_name
                .push(DnType::CustomDnType(vec![2, 5, 4, 10]), *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = generated("client certificate", params.signed_by(&key, &self.issuer))?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh key for signing service-account tokens: (private PKCS#8 PEM, public SPKI PEM).
///
/// kube-apiserver cannot derive the public key from a PKCS#8 private key file, so both are
/// written.
pub fn service_account_key() -> Result<(String, String)> {
    let key = generated("service-account key", KeyPair::generate())?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_pem() {
        let pki = Pki::new().unwrap();
        assert!(pki.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let serving = pki.serving_cert().unwrap();
        assert!(serving.key_pem.contains("PRIVATE KEY"));
        pki.client_cert("alice", &["a", "b"]).unwrap();
        let err = pki.client_cert("bob", &["a", "b", "c"]).unwrap_err();
        assert!(err.to_string().contains("at most 2"), "{err}");
    }
}
