//! Client certificates and per-destination roots on the real client
//!: reading a PEM chain, its key and CA certificates (what
//! the server checks before it stores them: the certificate's subject and
//! `notAfter`, and that the key is the certificate's), and the rustls
//! configuration of a destination's own connector.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore};

use crate::ClientTls;

/// Why a TLS setting is refused; `field` is the API's name for it, and the
/// message never repeats the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TlsSettingError {
    /// `client_cert`, `client_key` or `ca_certs`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn refused(field: &'static str, message: impl Into<String>) -> TlsSettingError {
    TlsSettingError {
        field,
        message: message.into(),
    }
}

/// What views show of a client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The leaf's subject (RFC 4514, e.g. `CN=client`).
    pub subject: String,
    /// The leaf's `notAfter`, Unix seconds.
    pub not_after_s: i64,
}

fn certificates(
    field: &'static str,
    pem: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsSettingError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refused(field, format!("invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(refused(field, "no PEM CERTIFICATE section found"));
    }
    Ok(certs)
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>, TlsSettingError> {
    // The parser's message is about the PEM's shape, never its bytes.
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| {
        refused(
            "client_key",
            "no PEM private key (PKCS#8, PKCS#1 or SEC1) found",
        )
    })
}

/// Checks a client certificate chain and its key: PEM, a parsable leaf, a
/// key rustls can sign with that belongs to the leaf. Answers the leaf's
/// subject and end of validity.
pub fn inspect_client_cert(chain_pem: &str, key_pem: &str) -> Result<CertInfo, TlsSettingError> {
    let chain = certificates("client_cert", chain_pem)?;
    let key = private_key(key_pem)?;
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0])
        .map_err(|e| refused("client_cert", format!("not an X.509 certificate: {e}")))?;
    let info = CertInfo {
        subject: leaf.subject().to_string(),
        not_after_s: leaf.validity().not_after.timestamp(),
    };
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => refused(
            "client_key",
            "does not match the certificate of client_cert",
        ),
        _ => refused("client_key", "not a key this server can sign with"),
    })?;
    Ok(info)
}

/// Checks CA certificates: PEM, each one usable as a trust anchor. Answers
/// how many there are.
pub fn check_ca_certs(pem: &str) -> Result<usize, TlsSettingError> {
    let certs = certificates("ca_certs", pem)?;
    let mut store = RootCertStore::empty();
    for cert in certs {
        store
            .add(cert)
            .map_err(|e| refused("ca_certs", format!("unusable certificate: {e}")))?;
    }
    Ok(store.len())
}

/// The rustls configuration of one destination's connector: the client's
/// roots plus its own CA certificates, and its client certificate.
pub(crate) fn destination_config(
    roots: &RootCertStore,
    tls: &ClientTls,
) -> Result<ClientConfig, TlsSettingError> {
    let mut roots = roots.clone();
    if let Some(pem) = &tls.ca_certs {
        for cert in certificates("ca_certs", pem)? {
            roots
                .add(cert)
                .map_err(|e| refused("ca_certs", format!("unusable certificate: {e}")))?;
        }
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| refused("client_cert", e.to_string()))?
            .with_root_certificates(roots);
    match &tls.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((chain, key)) => builder
            .with_client_auth_cert(certificates("client_cert", chain)?, private_key(key)?)
            .map_err(|_| {
                refused(
                    "client_key",
                    "does not match the certificate of client_cert",
                )
            }),
    }
}
