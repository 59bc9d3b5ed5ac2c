//! Signing keys for the registry tests, written as `reconciled sign` and hosts read them.

use std::path::{Path, PathBuf};

use p256::ecdsa::SigningKey;
use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};

/// The ECDSA P-256 key of `seed` (the same seed, the same key), written into `dir` as
/// `cosign-<seed>.key` (PKCS#8 PEM) and `cosign-<seed>.pub` (PEM); the key and both paths.
pub fn cosign_pair(dir: &Path, seed: u8) -> (SigningKey, PathBuf, PathBuf) {
    let key = SigningKey::from_bytes(&[seed; 32].into()).unwrap();
    let private = dir.join(format!("cosign-{seed}.key"));
    let public = dir.join(format!("cosign-{seed}.pub"));
    std::fs::write(
        &private,
        key.to_pkcs8_pem(LineEnding::LF).unwrap().as_bytes(),
    )
    .unwrap();
    std::fs::write(
        &public,
        key.verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    )
    .unwrap();
    (key, private, public)
}
