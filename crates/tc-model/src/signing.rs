//! Standard Webhooks signing secrets: what a valid one is, and the set of
//! at most two a destination signs with (two while a secret is rotated).
//! Signing itself is tc-downstream's; this module only says which secrets
//! exist. No `Debug` or message here ever shows a secret.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// A Standard Webhooks symmetric secret: `whsec_` and the standard base64
/// (padded) of 24 to 64 random bytes. The key is the decoded bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret {
    text: String,
    key: Vec<u8>,
}

impl SigningSecret {
    /// The prefix every secret starts with.
    pub const PREFIX: &'static str = "whsec_";
    /// The fewest key bytes (192 bits, the specification's minimum).
    pub const MIN_BYTES: usize = 24;
    /// The most key bytes.
    pub const MAX_BYTES: usize = 64;

    /// Parses a secret; the error says what is wrong without repeating it.
    pub fn parse(text: &str) -> Result<SigningSecret, InvalidSecret> {
        let encoded = text.strip_prefix(Self::PREFIX).ok_or(InvalidSecret)?;
        let key = STANDARD.decode(encoded).map_err(|_| InvalidSecret)?;
        if !(Self::MIN_BYTES..=Self::MAX_BYTES).contains(&key.len()) {
            return Err(InvalidSecret);
        }
        Ok(SigningSecret {
            text: text.to_owned(),
            key,
        })
    }

    /// The HMAC key: the decoded bytes.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The secret as given, `whsec_…`: what the stores keep.
    pub fn expose(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret([redacted])")
    }
}

/// A string that is not a [`SigningSecret`]. Says what one is, never what
/// was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be `whsec_` followed by the base64 of 24 to 64 random bytes")]
pub struct InvalidSecret;

/// The secrets a destination's calls are signed with: none, one, or two
/// while one is rotated (each call then carries both signatures, so a
/// receiver holding either verifies).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SigningSecrets(Vec<SigningSecret>);

impl SigningSecrets {
    /// The most secrets a destination keeps.
    pub const MAX: usize = 2;

    /// Parses each secret; the error is the message for the field
    /// `signing_secrets` (which secret, counting from 1, and what a secret
    /// is).
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<SigningSecrets, String> {
        if texts.len() > Self::MAX {
            return Err(format!(
                "at most {} secrets (two while rotating), got {}",
                Self::MAX,
                texts.len()
            ));
        }
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                SigningSecret::parse(text.as_ref())
                    .map_err(|e| format!("secret {} of {}: {e}", i + 1, texts.len()))
            })
            .collect::<Result<_, _>>()
            .map(SigningSecrets)
    }

    /// Whether there are none (calls are not signed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The secrets, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &SigningSecret> {
        self.0.iter()
    }

    /// The text the stores keep: the secrets separated by a space (base64
    /// has none); `None` for no secrets (a NULL column).
    pub fn to_stored(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        Some(
            self.0
                .iter()
                .map(SigningSecret::expose)
                .collect::<Vec<_>>()
                .join(" "),
        )
    }

    /// Secrets from the text [`SigningSecrets::to_stored`] wrote (`None`:
    /// no secrets); `Err` for text it never writes.
    pub fn from_stored(text: Option<&str>) -> Result<SigningSecrets, InvalidSecret> {
        match text {
            None => Ok(SigningSecrets::default()),
            Some(text) => {
                let texts: Vec<&str> = text.split(' ').collect();
                SigningSecrets::parse(&texts).map_err(|_| InvalidSecret)
            }
        }
    }
}

impl fmt::Debug for SigningSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningSecrets({} redacted)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret of `n` key bytes, each `byte`.
    fn secret_of(n: usize, byte: u8) -> String {
        format!("whsec_{}", STANDARD.encode(vec![byte; n]))
    }

    #[test]
    fn a_secret_is_whsec_and_base64_of_24_to_64_bytes() {
        // The Standard Webhooks libraries' own test secret (24 bytes).
        let published = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        assert_eq!(
            SigningSecret::parse(published).map(|s| s.key().len()),
            Ok(24)
        );
        for n in [24, 32, 63, 64] {
            let text = secret_of(n, 7);
            let secret = SigningSecret::parse(&text).unwrap();
            assert_eq!(secret.key(), vec![7; n].as_slice());
            assert_eq!(secret.expose(), text);
        }
        let no_prefix = STANDARD.encode([1u8; 32]);
        for bad in [
            secret_of(23, 1),
            secret_of(65, 1),
            secret_of(0, 1),
            no_prefix,
            "whsec_".to_owned(),
            "WHSEC_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned(),
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7o".to_owned(),
            "whsec_C2FVsBQIhrscChlQIMV-b5sSYspob7oD".to_owned(),
            "whsec_ C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned(),
            format!("{} ", secret_of(32, 1)),
        ] {
            assert_eq!(SigningSecret::parse(&bad), Err(InvalidSecret), "{bad:?}");
        }
    }

    #[test]
    fn a_destination_keeps_zero_one_or_two_secrets() {
        let (a, b, c) = (secret_of(32, 1), secret_of(32, 2), secret_of(32, 3));
        assert_eq!(SigningSecrets::parse::<&str>(&[]).map(|s| s.len()), Ok(0));
        assert_eq!(SigningSecrets::parse(&[&a]).map(|s| s.len()), Ok(1));
        assert_eq!(SigningSecrets::parse(&[&a, &b]).map(|s| s.len()), Ok(2));
        let three = SigningSecrets::parse(&[&a, &b, &c]).unwrap_err();
        assert!(three.starts_with("at most 2"), "{three}");
        let second_bad = SigningSecrets::parse(&[a.as_str(), "whsec_x"]).unwrap_err();
        assert!(
            second_bad.starts_with("secret 2 of 2: must be"),
            "{second_bad}"
        );
        assert!(
            !second_bad.contains("whsec_x"),
            "never repeats a secret: {second_bad}"
        );
    }

    #[test]
    fn stored_text_round_trips_and_debug_shows_no_secret() {
        let (a, b) = (secret_of(32, 1), secret_of(40, 2));
        let secrets = SigningSecrets::parse(&[&a, &b]).unwrap();
        let text = secrets.to_stored().unwrap();
        assert_eq!(text, format!("{a} {b}"));
        assert_eq!(
            SigningSecrets::from_stored(Some(&text)),
            Ok(secrets.clone())
        );
        assert_eq!(SigningSecrets::default().to_stored(), None);
        assert_eq!(
            SigningSecrets::from_stored(None),
            Ok(SigningSecrets::default())
        );
        assert_eq!(SigningSecrets::from_stored(Some("x")), Err(InvalidSecret));
        let debug = format!("{secrets:?} {:?}", secrets.iter().next());
        assert!(!debug.contains("whsec_"), "{debug}");
        assert!(!debug.contains(&a[6..]), "{debug}");
    }
}
