//! A destination's TLS settings: the client certificate
//! (a PEM chain) and its private key presented on every TLS connection to
//! it, and the CA certificates it alone trusts besides the server's roots.
//!
//! Reading PEM and X.509 is not this crate's job (it does no crypto): the
//! HTTP layer asks its host to check a certificate and its key and keeps
//! what views show of it, [`CertFacts`], beside the PEM. The key is
//! write-only: no view, log line or `Debug` shows it, and the stores seal it
//! at rest.

use serde_json::{Value, json};

use crate::Timestamp;
use crate::setting::InvalidSetting;

/// The most bytes of PEM one setting (`client_cert`, `client_key`,
/// `ca_certs`) may hold.
pub const MAX_PEM_BYTES: usize = 64 * 1024;

/// What a view shows of a client certificate: its subject and the end of
/// its validity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// The leaf certificate's subject, as RFC 4514 writes it (`CN=…`).
    pub subject: String,
    /// The leaf certificate's `notAfter`.
    pub not_after: Timestamp,
}

/// A client certificate chain (PEM, leaf first) and what views show of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The chain as given, PEM.
    pub pem: String,
    /// Its leaf's subject and validity end.
    pub facts: CertFacts,
}

/// A client certificate's private key (PEM). Write-only: its `Debug` shows
/// nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKey(String);

impl ClientKey {
    /// The key's PEM text.
    pub fn new(pem: String) -> ClientKey {
        ClientKey(pem)
    }

    /// The PEM text, for the TLS client and the store only.
    pub fn pem(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientKey([redacted])")
    }
}

/// A client identity: a certificate chain and the key that matches it
/// (checked when it was set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The chain and its facts.
    pub cert: ClientCert,
    /// Its private key.
    pub key: ClientKey,
}

impl ClientCert {
    /// The text both stores keep: the PEM and its facts, as JSON.
    pub fn to_stored(&self) -> String {
        json!({
            "pem": self.pem,
            "subject": self.facts.subject,
            "not_after": self.facts.not_after.as_millis(),
        })
        .to_string()
    }

    /// The certificate [`ClientCert::to_stored`] wrote.
    pub fn from_stored(text: &str) -> Result<ClientCert, InvalidSetting> {
        let corrupt = || InvalidSetting {
            field: "client_cert",
            message: "corrupt stored certificate".into(),
        };
        let v: Value = serde_json::from_str(text).map_err(|_| corrupt())?;
        Ok(ClientCert {
            pem: v["pem"].as_str().ok_or_else(corrupt)?.to_owned(),
            facts: CertFacts {
                subject: v["subject"].as_str().ok_or_else(corrupt)?.to_owned(),
                not_after: Timestamp::from_millis(v["not_after"].as_i64().ok_or_else(corrupt)?),
            },
        })
    }
}

/// Checks the shape every PEM setting shares: not empty, at most
/// [`MAX_PEM_BYTES`], and PEM (a `-----BEGIN` line); the parsing proper is
/// the host's. The error names `field`.
pub fn check_pem_text(field: &'static str, text: &str) -> Result<(), InvalidSetting> {
    if text.len() > MAX_PEM_BYTES {
        return Err(InvalidSetting {
            field,
            message: format!("must be at most {MAX_PEM_BYTES} bytes of PEM"),
        });
    }
    if !text.contains("-----BEGIN ") {
        return Err(InvalidSetting {
            field,
            message: "must be PEM text (-----BEGIN …-----)".into(),
        });
    }
    Ok(())
}

/// Reads a client identity from a row's `client_cert` and (opened)
/// `client_key` columns: both or neither.
pub fn client_tls_from_stored(
    cert: Option<&str>,
    key: Option<String>,
) -> Result<Option<ClientTls>, InvalidSetting> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(ClientTls {
            cert: ClientCert::from_stored(cert)?,
            key: ClientKey(key),
        })),
        (None, None) => Ok(None),
        _ => Err(InvalidSetting {
            field: "client_key",
            message: "stored without its certificate, or the certificate without it".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_reads_back_as_stored_and_the_key_never_shows() {
        let tls = ClientTls {
            cert: ClientCert {
                pem: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into(),
                facts: CertFacts {
                    subject: "CN=client".into(),
                    not_after: Timestamp::from_millis(1_900_000_000_000),
                },
            },
            key: ClientKey::new("-----BEGIN PRIVATE KEY-----\nSECRETKEY\n".into()),
        };
        let stored = tls.cert.to_stored();
        let back = client_tls_from_stored(Some(&stored), Some(tls.key.pem().to_owned()));
        assert_eq!(back, Ok(Some(tls.clone())));
        assert!(!format!("{tls:?}").contains("SECRETKEY"));
        assert_eq!(client_tls_from_stored(None, None), Ok(None));
        assert!(client_tls_from_stored(Some(&stored), None).is_err());
        assert!(client_tls_from_stored(Some("{}"), Some(String::new())).is_err());
    }

    #[test]
    fn pem_settings_are_pem_and_bounded() {
        fn check(text: &str, ok: bool) {
            assert_eq!(check_pem_text("ca_certs", text).is_ok(), ok, "{text:.40}");
        }
        check("-----BEGIN CERTIFICATE-----\n", true);
        check("", false);
        check("not pem", false);
        check(&"-----BEGIN ".repeat(MAX_PEM_BYTES), false);
    }
}
