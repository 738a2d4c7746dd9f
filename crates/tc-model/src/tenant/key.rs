//! A tenant's API keys: `tck_` and 32 random bytes in base64url, shown once
//! when made and stored only as their SHA-256 ([`KeyHash`]). A request's key
//! is hashed and looked up by hash, so the store never holds a secret and a
//! lookup's time does not depend on how much of a guess was right; the hash
//! found is compared again in constant time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Tenant;
use crate::Timestamp;

/// What every key starts with: a credential that is a tenant key is told
/// from the admin token by it.
pub const PREFIX: &str = "tck_";

/// The random bytes in a key.
pub const SECRET_BYTES: usize = 32;

/// A key's secret as shown once: [`PREFIX`] and `random` in base64url
/// without padding. The caller draws `random` from the OS's entropy.
pub fn key_text(random: &[u8; SECRET_BYTES]) -> String {
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(random))
}

/// A key's public id (what listings and the revoke route name): `key_`
/// and 16 hex digits of `random`.
pub fn key_id(random: &[u8; 8]) -> String {
    let mut id = String::from("key_");
    for b in random {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Whether a credential is shaped like a tenant key (so it is looked up as
/// one rather than compared with the admin token).
pub fn is_key(credential: &str) -> bool {
    credential.starts_with(PREFIX)
}

/// The SHA-256 of a key's text: what the store keeps and looks up by.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    /// The hash of `key` as the client sent it.
    pub fn of(key: &str) -> KeyHash {
        KeyHash(Sha256::digest(key.as_bytes()).into())
    }

    /// Compares two hashes in constant time.
    pub fn matches(&self, other: &KeyHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl std::fmt::Debug for KeyHash {
    // Not a secret, but no reason to print it either.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHash(..)")
    }
}

/// A stored key as views show it: never its secret nor its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Its public id ([`key_id`]).
    pub id: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When a request last used it (recorded at most once a minute per
    /// node), or never.
    pub last_used_at: Option<Timestamp>,
}

/// What a live key's lookup finds ([`crate::store::Tenants::api_key`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyOwner {
    /// The key's id.
    pub key_id: String,
    /// The hash stored for it, for the constant-time comparison.
    pub hash: KeyHash,
    /// Its tenant, as stored now.
    pub tenant: Tenant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_prefixed_base64url_of_its_bytes() {
        let key = key_text(&[0xfb; SECRET_BYTES]);
        assert!(key.starts_with("tck_"));
        assert!(is_key(&key));
        assert!(!is_key("s3cret"));
        // 32 bytes are 43 base64 characters without padding.
        assert_eq!(key.len(), 4 + 43);
        assert!(
            key[4..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(
            key_id(&[0, 1, 2, 3, 0xa, 0xb, 0xc, 0xff]),
            "key_000102030a0b0cff"
        );
    }

    #[test]
    fn hashes() {
        let a = KeyHash::of("tck_a");
        assert!(a.matches(&KeyHash::of("tck_a")));
        assert!(!a.matches(&KeyHash::of("tck_b")));
        assert_eq!(format!("{a:?}"), "KeyHash(..)");
    }
}
