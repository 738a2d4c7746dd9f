//! The server's own JWT keys: ES256 (ECDSA P-256 with SHA-256,
//! RFC 7518 §3.4) through ring, the crypto the TLS stack already links, so
//! no crate is added for it. A key is a PKCS#8 PEM (`--jwt-key-file`, or one
//! [`JwtKeys::generate_pem`] made and the store keeps); the first of
//! [`JwtKeys::from_pems`]'s keys signs, every one is published in the JWKS
//! (RFC 7517) a receiver verifies with, each named by its RFC 7638
//! thumbprint (`kid`). Which claims a token carries is tc-model's rule
//! (`tc_model::auth::JwtAuth::claims`): this module only signs text.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use sha2::{Digest, Sha256};

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

/// Why a key cannot be used. Never carries key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtKeyError {
    /// No key was given.
    #[error("no JWT key")]
    NoKey,
    /// The text is not a PKCS#8 PEM (`BEGIN PRIVATE KEY`).
    #[error("JWT key {0}: not a PKCS#8 PEM (-----BEGIN PRIVATE KEY-----)")]
    NotPem(usize),
    /// The PKCS#8 key is not an ECDSA P-256 key ring accepts.
    #[error("JWT key {index}: not a P-256 (ES256) key: {reason}")]
    Rejected {
        /// Its position in the list, from 1.
        index: usize,
        /// ring's reason.
        reason: String,
    },
    /// The system's randomness failed.
    #[error("JWT signing failed")]
    Signing,
}

/// One published key: its thumbprint and public point.
struct PublicJwk {
    kid: String,
    x: String,
    y: String,
}

/// The keys JWTs are signed with and published under.
pub struct JwtKeys {
    signer: EcdsaKeyPair,
    published: Vec<PublicJwk>,
    rng: SystemRandom,
}

impl fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.published.iter().map(|k| k.kid.as_str()).collect();
        f.debug_struct("JwtKeys").field("kids", &kids).finish()
    }
}

fn der_of(index: usize, pem: &str) -> Result<Vec<u8>, JwtKeyError> {
    let start = pem.find(PEM_BEGIN).ok_or(JwtKeyError::NotPem(index))? + PEM_BEGIN.len();
    let end = pem[start..]
        .find(PEM_END)
        .ok_or(JwtKeyError::NotPem(index))?
        + start;
    let text: String = pem[start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    STANDARD
        .decode(text)
        .map_err(|_| JwtKeyError::NotPem(index))
}

fn pair_of(index: usize, der: &[u8], rng: &SystemRandom) -> Result<EcdsaKeyPair, JwtKeyError> {
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, rng).map_err(|e| {
        JwtKeyError::Rejected {
            index,
            reason: e.to_string(),
        }
    })
}

fn public_of(pair: &EcdsaKeyPair) -> PublicJwk {
    // The uncompressed point: 0x04, then x and y, 32 bytes each.
    let point = pair.public_key().as_ref();
    let x = URL_SAFE_NO_PAD.encode(&point[1..33]);
    let y = URL_SAFE_NO_PAD.encode(&point[33..65]);
    // RFC 7638: the required members, in lexicographic order, no spaces.
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()));
    PublicJwk { kid, x, y }
}

impl JwtKeys {
    /// The keys in `pems` (PKCS#8 PEM, P-256): the first signs, all are
    /// published.
    pub fn from_pems(pems: &[String]) -> Result<JwtKeys, JwtKeyError> {
        let rng = SystemRandom::new();
        let mut pairs = Vec::with_capacity(pems.len());
        for (n, pem) in pems.iter().enumerate() {
            pairs.push(pair_of(n + 1, &der_of(n + 1, pem)?, &rng)?);
        }
        let published = pairs.iter().map(public_of).collect();
        let signer = pairs.into_iter().next().ok_or(JwtKeyError::NoKey)?;
        Ok(JwtKeys {
            signer,
            published,
            rng,
        })
    }

    /// A fresh P-256 key as a PKCS#8 PEM.
    pub fn generate_pem() -> Result<String, JwtKeyError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| JwtKeyError::Signing)?;
        let body = STANDARD.encode(doc.as_ref());
        let mut pem = String::from(PEM_BEGIN);
        pem.push('\n');
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str(PEM_END);
        pem.push('\n');
        Ok(pem)
    }

    /// The signing key's `kid`.
    pub fn kid(&self) -> &str {
        self.published.first().map_or("", |k| k.kid.as_str())
    }

    /// A compact JWS (RFC 7515) of `claims` (JSON text): header
    /// `{"alg":"ES256","typ":"JWT","kid":…}`, the signature R‖S.
    pub fn sign(&self, claims: &str) -> Result<String, JwtKeyError> {
        let header = format!(r#"{{"alg":"ES256","typ":"JWT","kid":"{}"}}"#, self.kid());
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let signature = self
            .signer
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| JwtKeyError::Signing)?;
        Ok(format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// The JWK Set of every key (RFC 7517 §5), as JSON text: what
    /// `/.well-known/jwks.json` serves.
    pub fn jwks(&self) -> String {
        let keys: Vec<String> = self
            .published
            .iter()
            .map(|k| {
                format!(
                    r#"{{"kty":"EC","crv":"P-256","x":"{}","y":"{}","use":"sig","alg":"ES256","kid":"{}"}}"#,
                    k.x, k.y, k.kid
                )
            })
            .collect();
        format!(r#"{{"keys":[{}]}}"#, keys.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify(keys: &JwtKeys, token: &str) -> bool {
        let Some((input, sig)) = token.rsplit_once('.') else {
            return false;
        };
        let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
        let point = keys.signer.public_key().as_ref();
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
            .verify(input.as_bytes(), &sig)
            .is_ok()
    }

    #[test]
    fn generated_keys_sign_and_publish() {
        let one = JwtKeys::generate_pem().unwrap();
        let two = JwtKeys::generate_pem().unwrap();
        assert!(one.starts_with(PEM_BEGIN) && one.trim_end().ends_with(PEM_END));
        let keys = JwtKeys::from_pems(&[one, two]).unwrap();
        let token = keys.sign(r#"{"sub":"x"}"#).unwrap();
        assert!(verify(&keys, &token));
        let mut parts = token.split('.');
        let header = URL_SAFE_NO_PAD.decode(parts.next().unwrap()).unwrap();
        let header = String::from_utf8(header).unwrap();
        assert!(header.contains(r#""alg":"ES256""#) && header.contains(keys.kid()));
        let jwks = keys.jwks();
        assert_eq!(jwks.matches(r#""kty":"EC""#).count(), 2, "{jwks}");
        assert!(jwks.contains(keys.kid()));
        assert!(!format!("{keys:?}").contains("PRIVATE"));
    }

    #[test]
    fn bad_keys_are_refused_by_position() {
        let good = JwtKeys::generate_pem().unwrap();
        let check = |pems: &[String], want: JwtKeyError| {
            assert_eq!(JwtKeys::from_pems(pems).unwrap_err(), want);
        };
        check(&[], JwtKeyError::NoKey);
        check(&[good.clone(), "nope".into()], JwtKeyError::NotPem(2));
        let garbage = format!("{PEM_BEGIN}\nAAAA\n{PEM_END}\n");
        assert!(matches!(
            JwtKeys::from_pems(&[garbage]),
            Err(JwtKeyError::Rejected { index: 1, .. })
        ));
    }
}
