//! A destination's TLS settings as a delivery carries them: the client
//! certificate chain and key presented on every TLS
//! connection to it, and the CA certificates it alone trusts besides the
//! client's roots. Plain text (PEM) here; the real client builds, caches
//! and reuses one connector per distinct value (`HyperDownstream`), the
//! fake ignores it.

use std::fmt;

use sha2::{Digest, Sha256};

/// One destination's TLS settings. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ClientTls {
    /// The client certificate chain (PEM, leaf first) and its private key
    /// (PEM); none: no client certificate.
    pub identity: Option<(String, String)>,
    /// CA certificates (PEM) trusted for this destination besides the
    /// client's roots.
    pub ca_certs: Option<String>,
}

impl ClientTls {
    /// A digest of every field: the real client's cache key, so a changed
    /// setting gets a connector of its own (never the key's text).
    pub fn fingerprint(&self) -> [u8; 32] {
        let mut digest = Sha256::new();
        let mut field = |text: Option<&str>| {
            let text = text.unwrap_or_default();
            digest.update((text.len() as u64).to_be_bytes());
            digest.update(text.as_bytes());
        };
        field(self.identity.as_ref().map(|(cert, _)| cert.as_str()));
        field(self.identity.as_ref().map(|(_, key)| key.as_str()));
        field(self.ca_certs.as_deref());
        digest.finalize().into()
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("client_cert", &self.identity.is_some())
            .field("ca_certs", &self.ca_certs.is_some())
            .finish()
    }
}
