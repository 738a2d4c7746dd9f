//! A destination's TLS settings in `PUT /destinations/{d}`: `client_cert` (a
//! PEM chain), `client_key` (PEM, write-only) and
//! `ca_certs` (PEM), each `null` to clear. Reading certificates is not this
//! crate's job: whoever wires the service gives a [`TlsCheck`] (tc-server:
//! the downstream client's own reading, so what is accepted here is what
//! the client can use). Views show the certificate's subject and
//! `not_after`, and how many CA certificates there are, never the key.

use serde::Serialize;
use serde_json::Value;
use tc_model::client_tls::{CertFacts, ClientCert, ClientKey, ClientTls, check_pem_text};
use tc_model::destination::{DestinationSettings, DestinationUpdate};
use tc_model::setting::InvalidSetting;

use crate::dto::rfc3339;
use crate::error::{ApiError, json_type};

/// What the HTTP layer needs to accept TLS settings: a port owned by this
/// crate. Every refusal names its field and never repeats a key.
pub trait TlsCheck: Send + Sync + 'static {
    /// Reads a client certificate chain and checks that `key_pem` is its
    /// leaf's key; answers what views show of it.
    fn client_cert(&self, chain_pem: &str, key_pem: &str) -> Result<CertFacts, InvalidSetting>;

    /// Checks CA certificates.
    fn ca_certs(&self, pem: &str) -> Result<(), InvalidSetting>;
}

/// The three fields as a body gives them: `None` not given, `Some(None)`
/// null.
#[derive(Default)]
pub(crate) struct TlsFields {
    pub(crate) client_cert: Option<Option<String>>,
    pub(crate) client_key: Option<Option<String>>,
    pub(crate) ca_certs: Option<Option<String>>,
}

impl TlsFields {
    /// Takes `field`'s value if it is one of the three; `false` otherwise.
    pub(crate) fn take(&mut self, field: &str, value: &Value) -> Result<bool, ApiError> {
        let slot = match field {
            "client_cert" => &mut self.client_cert,
            "client_key" => &mut self.client_key,
            "ca_certs" => &mut self.ca_certs,
            _ => return Ok(false),
        };
        *slot = Some(match value {
            Value::Null => None,
            Value::String(pem) => Some(pem.clone()),
            other => {
                return Err(ApiError::InvalidRequest(format!(
                    "{field}: must be PEM text or null, got {}",
                    json_type(other)
                )));
            }
        });
        Ok(true)
    }

    /// The fields checked and applied to `update`.
    pub(crate) fn apply(
        self,
        update: &mut DestinationUpdate,
        check: Option<&dyn TlsCheck>,
    ) -> Result<(), ApiError> {
        let refuse = |e: InvalidSetting| ApiError::InvalidRequest(e.to_string());
        let unreadable = |field: &str| {
            ApiError::InvalidRequest(format!("{field}: this server cannot read certificates"))
        };
        update.client_tls = match (self.client_cert, self.client_key) {
            (None, None) => None,
            (Some(None), Some(None) | None) | (None, Some(None)) => Some(None),
            (Some(Some(cert)), Some(Some(key))) => {
                check_pem_text("client_cert", &cert).map_err(refuse)?;
                check_pem_text("client_key", &key).map_err(refuse)?;
                let check = check.ok_or_else(|| unreadable("client_cert"))?;
                let facts = check.client_cert(&cert, &key).map_err(refuse)?;
                Some(Some(ClientTls {
                    cert: ClientCert { pem: cert, facts },
                    key: ClientKey::new(key),
                }))
            }
            (Some(Some(_)), _) => {
                return Err(ApiError::InvalidRequest(
                    "client_cert: must be given with client_key, the key of its certificate".into(),
                ));
            }
            (_, Some(Some(_))) => {
                return Err(ApiError::InvalidRequest(
                    "client_key: must be given with client_cert, the certificate of that key"
                        .into(),
                ));
            }
        };
        update.ca_certs = match self.ca_certs {
            None => None,
            Some(None) => Some(None),
            Some(Some(pem)) => {
                check_pem_text("ca_certs", &pem).map_err(refuse)?;
                check
                    .ok_or_else(|| unreadable("ca_certs"))?
                    .ca_certs(&pem)
                    .map_err(refuse)?;
                Some(Some(pem))
            }
        };
        Ok(())
    }
}

/// What a view shows of a client certificate.
#[derive(Debug, Serialize)]
pub(crate) struct ClientCertView {
    subject: String,
    not_after: String,
}

/// The view of `settings`' client certificate, if any.
pub(crate) fn cert_view(settings: &DestinationSettings) -> Option<ClientCertView> {
    settings.client_tls.as_ref().map(|tls| ClientCertView {
        subject: tls.cert.facts.subject.clone(),
        not_after: rfc3339(tls.cert.facts.not_after),
    })
}

/// How many CA certificates `settings` trusts for its destination.
pub(crate) fn ca_count(settings: &DestinationSettings) -> usize {
    settings
        .ca_certs
        .as_deref()
        .map_or(0, |pem| pem.matches("-----BEGIN CERTIFICATE-----").count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tc_model::Timestamp;

    /// Accepts PEM whose text says `good`, with `good-key` as its key.
    struct Fake;

    impl TlsCheck for Fake {
        fn client_cert(&self, chain: &str, key: &str) -> Result<CertFacts, InvalidSetting> {
            if !chain.contains("good") {
                return Err(InvalidSetting {
                    field: "client_cert",
                    message: "invalid PEM".into(),
                });
            }
            if !key.contains("good-key") {
                return Err(InvalidSetting {
                    field: "client_key",
                    message: "does not match".into(),
                });
            }
            Ok(CertFacts {
                subject: "CN=x".into(),
                not_after: Timestamp::from_millis(0),
            })
        }

        fn ca_certs(&self, pem: &str) -> Result<(), InvalidSetting> {
            match pem.contains("good") {
                true => Ok(()),
                false => Err(InvalidSetting {
                    field: "ca_certs",
                    message: "invalid PEM".into(),
                }),
            }
        }
    }

    fn pem(text: &str) -> Value {
        Value::String(format!("-----BEGIN X-----\n{text}\n-----END X-----\n"))
    }

    #[test]
    fn the_three_fields_are_read_together_and_each_refusal_names_its_field() {
        // (fields, Ok((client_tls set?, ca_certs set?)) or Err(field named))
        type Want = Result<(Option<bool>, Option<bool>), &'static str>;
        let rows: Vec<(Vec<(&str, Value)>, Want)> = vec![
            (vec![], Ok((None, None))),
            (
                vec![
                    ("client_cert", pem("good")),
                    ("client_key", pem("good-key")),
                ],
                Ok((Some(true), None)),
            ),
            (vec![("client_cert", Value::Null)], Ok((Some(false), None))),
            (vec![("client_key", Value::Null)], Ok((Some(false), None))),
            (vec![("ca_certs", pem("good"))], Ok((None, Some(true)))),
            (vec![("ca_certs", Value::Null)], Ok((None, Some(false)))),
            (vec![("client_cert", pem("good"))], Err("client_cert")),
            (vec![("client_key", pem("good-key"))], Err("client_key")),
            (
                vec![("client_cert", pem("bad")), ("client_key", pem("good-key"))],
                Err("client_cert"),
            ),
            (
                vec![("client_cert", pem("good")), ("client_key", pem("other"))],
                Err("client_key"),
            ),
            (
                vec![
                    ("client_cert", "no pem".into()),
                    ("client_key", pem("good-key")),
                ],
                Err("client_cert"),
            ),
            (vec![("ca_certs", pem("bad"))], Err("ca_certs")),
            (vec![("ca_certs", 7.into())], Err("ca_certs")),
        ];
        for (fields, want) in rows {
            let mut tls = TlsFields::default();
            let got = fields
                .iter()
                .try_for_each(|(f, v)| tls.take(f, v).map(|taken| assert!(taken)))
                .and_then(|()| {
                    let mut update = DestinationUpdate::default();
                    tls.apply(&mut update, Some(&Fake)).map(|()| update)
                });
            match (got, want) {
                (Ok(update), Ok((cert, ca))) => {
                    assert_eq!(
                        update.client_tls.as_ref().map(Option::is_some),
                        cert,
                        "{fields:?}"
                    );
                    assert_eq!(
                        update.ca_certs.as_ref().map(Option::is_some),
                        ca,
                        "{fields:?}"
                    );
                }
                (Err(ApiError::InvalidRequest(message)), Err(field)) => {
                    assert!(message.starts_with(field), "{fields:?}: {message}");
                    assert!(!message.contains("good-key"), "{message}");
                }
                (got, want) => panic!("{fields:?}: got {:?}, want {want:?}", got.err()),
            }
        }
    }
}
