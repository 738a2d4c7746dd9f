//! tc-http's [`tc_http::TlsCheck`] port over the downstream client's own
//! reading of certificates: what `PUT /destinations/{d}`
//! accepts is what the client can present. tc-http and tc-downstream never
//! see each other.

use tc_model::Timestamp;
use tc_model::client_tls::CertFacts;
use tc_model::setting::InvalidSetting;

/// Reads certificates with tc-downstream's client functions.
pub(crate) struct DownstreamTlsCheck;

fn setting(e: tc_downstream::TlsSettingError) -> InvalidSetting {
    InvalidSetting {
        field: e.field,
        message: e.message,
    }
}

impl tc_http::TlsCheck for DownstreamTlsCheck {
    fn client_cert(&self, chain_pem: &str, key_pem: &str) -> Result<CertFacts, InvalidSetting> {
        let info = tc_downstream::inspect_client_cert(chain_pem, key_pem).map_err(setting)?;
        Ok(CertFacts {
            subject: info.subject,
            not_after: Timestamp::from_millis(info.not_after_s.saturating_mul(1000)),
        })
    }

    fn ca_certs(&self, pem: &str) -> Result<(), InvalidSetting> {
        tc_downstream::check_ca_certs(pem)
            .map(drop)
            .map_err(setting)
    }
}
