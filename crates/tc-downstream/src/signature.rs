//! Standard Webhooks signatures (symmetric, `v1`): a pure function of the
//! keys, the message id, the timestamp and the exact body bytes sent.
//!
//! For each key, `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")),
//! the signatures separated by a space: during a rotation a receiver
//! holding either key finds one that verifies.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The `webhook-signature` value for `body` sent as message `id` at
/// `timestamp` (Unix seconds), one `v1` signature per key, in order.
pub fn webhook_signature(keys: &[&[u8]], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| format!("v1,{}", STANDARD.encode(mac(key, id, timestamp, body))))
        .collect::<Vec<_>>()
        .join(" ")
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length (a long one is hashed first), so
    // `new_from_slice` has no error to return.
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks project's published test vector, the one its
    /// libraries' tests share (`test_sign`): the secret is
    /// `whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD`, its key the base64 after
    /// the prefix.
    #[test]
    fn the_published_test_vector() {
        let key = STANDARD.decode("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        let signature = webhook_signature(
            &[&key],
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1649367553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        );
        assert_eq!(signature, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    #[test]
    fn two_keys_give_two_signatures_in_order_and_none_give_none() {
        let (old, new) = (vec![1u8; 24], vec![2u8; 32]);
        let one = |key: &[u8]| webhook_signature(&[key], "id", 5, b"{}");
        let both = webhook_signature(&[&old, &new], "id", 5, b"{}");
        assert_eq!(both, format!("{} {}", one(&old), one(&new)));
        assert_eq!(webhook_signature(&[], "id", 5, b"{}"), "");
    }

    #[test]
    fn every_input_changes_the_signature() {
        let key = [9u8; 32];
        let base = webhook_signature(&[&key], "id", 5, b"{}");
        for other in [
            webhook_signature(&[&[8u8; 32]], "id", 5, b"{}"),
            webhook_signature(&[&key], "id2", 5, b"{}"),
            webhook_signature(&[&key], "id", 6, b"{}"),
            webhook_signature(&[&key], "id", 5, b"{ }"),
            webhook_signature(&[&key], "id", 5, b""),
        ] {
            assert_ne!(other, base);
        }
    }
}
