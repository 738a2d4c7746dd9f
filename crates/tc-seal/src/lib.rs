//! Secrets sealed at rest: every secret a store keeps
//! (a destination's header values and signing secrets, its client key, a
//! tenant's signing secrets, …) is written as the text
//! `sealed:v1:<key id>:<base64 of nonce + ciphertext>`, AES-256-GCM under
//! the first of the server's keys, and read back under whichever listed key
//! its id names. A value without the prefix is plain text, written before
//! the server had a key: it still reads, and [`Sealer::reseal`] says what
//! to write instead.
//!
//! The store adapters apply one [`Sealer`] at their boundary, on the text
//! forms they already keep, so the rule is this crate's alone and a new
//! kind of secret is one more column passed through `seal`/`open`.

mod columns;

pub use columns::{SECRET_COLUMNS, refusal};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// What every sealed value starts with; `v1` is this format.
pub const PREFIX: &str = "sealed:v1:";

const NONCE_LEN: usize = 12;
const KEY_LEN: usize = 32;

/// Why a key or a value could not be used. No variant carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A key file's text is not the base64 of 32 bytes.
    #[error("a secret key must be the base64 of 32 random bytes")]
    BadKey,
    /// The value was sealed by a key that is not listed.
    #[error("sealed by key {0}, which is not among the secret keys given (--secret-key-file)")]
    UnknownKey(String),
    /// The value is sealed but not in this format, or did not open (its
    /// bytes were changed, or the key of that id is another one).
    #[error("a sealed value does not open: corrupt, or sealed under another key")]
    Corrupt,
    /// The OS gave no randomness for a nonce.
    #[error("no randomness for a nonce: {0}")]
    Entropy(String),
}

/// One AES-256 key and its id (the first 8 hex digits of its SHA-256,
/// which says nothing of the key).
#[derive(Clone)]
pub struct SecretKey {
    id: String,
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey").field("id", &self.id).finish()
    }
}

impl SecretKey {
    /// The key a key file holds: the base64 of 32 bytes (surrounding
    /// whitespace ignored).
    pub fn from_base64(text: &str) -> Result<SecretKey, SealError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| SealError::BadKey)?;
        if bytes.len() != KEY_LEN {
            return Err(SealError::BadKey);
        }
        let digest = Sha256::digest(&bytes);
        let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| SealError::BadKey)?;
        Ok(SecretKey { id, cipher })
    }

    /// A fresh key's text: the base64 of 32 bytes from the OS.
    pub fn generate() -> Result<String, SealError> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|e| SealError::Entropy(e.to_string()))?;
        Ok(STANDARD.encode(bytes))
    }

    /// The id stored values name this key by.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The server's keys: the first seals, every one opens. Without a key,
/// values are kept as they are (and the server warns at start).
#[derive(Clone, Debug, Default)]
pub struct Sealer {
    keys: Arc<Vec<SecretKey>>,
}

impl Sealer {
    /// A sealer over `keys`, the first of which seals.
    pub fn new(keys: Vec<SecretKey>) -> Sealer {
        Sealer {
            keys: Arc::new(keys),
        }
    }

    /// A sealer without keys: values are written as they are.
    pub fn none() -> Sealer {
        Sealer::default()
    }

    /// Whether values are sealed when written.
    pub fn seals(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether `stored` is a sealed value (of any key).
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(PREFIX)
    }

    /// What to store for `plain`: sealed under the first key, or `plain`
    /// itself when there is no key.
    pub fn seal(&self, plain: &str) -> Result<String, SealError> {
        let Some(key) = self.keys.first() else {
            return Ok(plain.to_owned());
        };
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| SealError::Entropy(e.to_string()))?;
        let sealed = key
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plain.as_bytes())
            .map_err(|_| SealError::Corrupt)?;
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        Ok(format!("{PREFIX}{}:{}", key.id, STANDARD.encode(bytes)))
    }

    /// The plain text of a stored value: opened under the key its id
    /// names, or the value itself when it is not sealed.
    pub fn open(&self, stored: &str) -> Result<String, SealError> {
        let Some(rest) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_owned());
        };
        let (id, body) = rest.split_once(':').ok_or(SealError::Corrupt)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_owned()))?;
        let bytes = STANDARD.decode(body).map_err(|_| SealError::Corrupt)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Corrupt);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let plain = key
            .cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            .map_err(|_| SealError::Corrupt)?;
        String::from_utf8(plain).map_err(|_| SealError::Corrupt)
    }

    /// [`Sealer::seal`] of an optional column.
    pub fn seal_opt(&self, plain: Option<String>) -> Result<Option<String>, SealError> {
        plain.map(|p| self.seal(&p)).transpose()
    }

    /// [`Sealer::open`] of an optional column.
    pub fn open_opt(&self, stored: Option<String>) -> Result<Option<String>, SealError> {
        stored.map(|s| self.open(&s)).transpose()
    }

    /// What to write instead of `stored` at start, if anything: a plain
    /// value or one sealed by an older listed key, sealed under the first
    /// key. `Ok(None)`: it stays (already sealed by the first key, or there
    /// is no key and it is plain). `Err`: it does not open with these keys,
    /// and the server must not start.
    pub fn reseal(&self, stored: &str) -> Result<Option<String>, SealError> {
        let plain = self.open(stored)?;
        let current = self
            .keys
            .first()
            .is_some_and(|key| stored.starts_with(&format!("{PREFIX}{}:", key.id)));
        // Without a key a sealed value failed to open above, so only
        // plain values get here: they stay.
        if current || !self.seals() {
            return Ok(None);
        }
        self.seal(&plain).map(Some)
    }
}

/// What a start's pass over the stored secrets found (each adapter counts
/// with [`SealReport::tally`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Secrets written again (plain, or sealed by an older key).
    pub resealed: usize,
    /// Secrets left in plain text (the server has no key): the server warns.
    pub plain: usize,
}

impl SealReport {
    /// Counts one stored value and what [`Sealer::reseal`] said of it.
    pub fn tally(&mut self, stored: &str, again: Option<&String>) {
        if again.is_some() {
            self.resealed += 1;
        } else if !Sealer::is_sealed(stored) {
            self.plain += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SecretKey {
        SecretKey::from_base64(&STANDARD.encode([byte; 32])).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_and_shows_no_byte_of_the_secret() {
        let sealer = Sealer::new(vec![key(1)]);
        let sealed = sealer.seal("Bearer s3cr3t-token").unwrap();
        assert!(sealed.starts_with(&format!("{PREFIX}{}:", key(1).id())));
        assert!(!sealed.contains("s3cr3t"), "{sealed}");
        assert_eq!(sealer.open(&sealed).unwrap(), "Bearer s3cr3t-token");
        // a fresh nonce each time
        assert_ne!(sealer.seal("x").unwrap(), sealer.seal("x").unwrap());
    }

    #[test]
    fn opening_follows_the_listed_keys() {
        fn check(sealer: &Sealer, stored: &str, want: Result<&str, SealError>) {
            assert_eq!(sealer.open(stored), want.map(str::to_owned));
        }
        let old = Sealer::new(vec![key(1)]);
        let sealed = old.seal("v").unwrap();
        let rotated = Sealer::new(vec![key(2), key(1)]);
        let other = Sealer::new(vec![key(2)]);
        check(&rotated, &sealed, Ok("v"));
        check(
            &other,
            &sealed,
            Err(SealError::UnknownKey(key(1).id().into())),
        );
        check(
            &Sealer::none(),
            &sealed,
            Err(SealError::UnknownKey(key(1).id().into())),
        );
        check(&other, "plain", Ok("plain"));
        check(&Sealer::none(), "plain", Ok("plain"));
        let tampered = format!("{}A", &sealed[..sealed.len() - 1]);
        check(&rotated, &tampered, Err(SealError::Corrupt));
        check(
            &rotated,
            &format!("{PREFIX}nocolon"),
            Err(SealError::Corrupt),
        );
        // a key of the same id but other bytes cannot be made; a wrong
        // body under a known id is corrupt
        check(
            &rotated,
            &format!("{PREFIX}{}:AAAA", key(1).id()),
            Err(SealError::Corrupt),
        );
    }

    #[test]
    fn reseal_says_what_to_write_at_start() {
        let first = Sealer::new(vec![key(2), key(1)]);
        let by_old = Sealer::new(vec![key(1)]).seal("v").unwrap();
        let by_first = first.seal("v").unwrap();
        // plain and older-key values are sealed again under the first key
        for stored in ["v", by_old.as_str()] {
            let again = first.reseal(stored).unwrap().expect("rewritten");
            assert!(again.starts_with(&format!("{PREFIX}{}:", key(2).id())));
            assert_eq!(first.open(&again).unwrap(), "v");
        }
        assert_eq!(first.reseal(&by_first), Ok(None));
        // without a key, plain stays and sealed does not open
        assert_eq!(Sealer::none().reseal("v"), Ok(None));
        assert!(Sealer::none().reseal(&by_first).is_err());
    }

    #[test]
    fn keys_are_32_bytes_of_base64() {
        let made = SecretKey::generate().unwrap();
        assert!(SecretKey::from_base64(&format!("{made}\n")).is_ok());
        for bad in ["", "not base64!", &STANDARD.encode([0u8; 16])] {
            assert_eq!(
                SecretKey::from_base64(bad).err(),
                Some(SealError::BadKey),
                "{bad}"
            );
        }
        // the Debug of a key shows its id only
        let k = key(7);
        assert_eq!(
            format!("{k:?}"),
            format!("SecretKey {{ id: {:?} }}", k.id())
        );
    }
}
