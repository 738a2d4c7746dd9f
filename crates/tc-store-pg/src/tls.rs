//! TLS to PostgreSQL with rustls (ring, the crypto provider the downstream
//! client uses), chosen in the URL as libpq does: `sslmode=disable | prefer
//! | require | verify-ca | verify-full` (default `prefer`) and
//! `sslrootcert=<PEM file>` (or `system` for the system's roots).
//!
//! - `disable`: plain text.
//! - `prefer`: TLS if the server offers it, else plain text; the
//!   certificate is not checked (libpq's default: it stops eavesdroppers,
//!   not an active attacker).
//! - `require`: TLS or no connection; the certificate is not checked,
//!   unless `sslrootcert` is given, which makes it `verify-ca` (as libpq).
//! - `verify-ca`: the certificate must chain to `sslrootcert`'s CAs.
//! - `verify-full`: that, and it must be made for the host connected to.
//!
//! `verify-*` without `sslrootcert` read libpq's default file,
//! `~/.postgresql/root.crt`. tokio-postgres itself knows only the first
//! three modes, so both parameters are taken out of the URL here and the
//! checks are made by this module's certificate verifiers.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode as DriverSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plain text.
    Disable,
    /// TLS when the server offers it; the certificate unchecked.
    #[default]
    Prefer,
    /// TLS always; the certificate unchecked (checked as `VerifyCa` when a
    /// root certificate is given).
    Require,
    /// TLS; the certificate chains to a trusted CA.
    VerifyCa,
    /// TLS; the certificate chains to a trusted CA and names the host.
    VerifyFull,
}

impl SslMode {
    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode: {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

/// Where the trusted CAs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The operating system's roots (`sslrootcert=system`).
    System,
}

impl RootCert {
    fn describe(&self) -> String {
        match self {
            RootCert::File(path) => format!("a CA in {}", path.display()),
            RootCert::System => "one of the system's root CAs".to_owned(),
        }
    }
}

/// The TLS part of a URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    /// The mode asked for (default `prefer`).
    pub mode: SslMode,
    /// `sslrootcert`, if given.
    pub root_cert: Option<RootCert>,
}

/// Splits `url` into the URL tokio-postgres reads (without `sslmode` and
/// `sslrootcert`) and the TLS settings they gave.
pub fn split_url(url: &str) -> Result<(String, TlsSettings), String> {
    let mut settings = TlsSettings::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), settings));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => settings.mode = SslMode::parse(&percent_decode(value)?)?,
            "sslrootcert" => {
                let value = percent_decode(value)?;
                settings.root_cert = Some(match value.as_str() {
                    "" => return Err("sslrootcert: must not be empty".to_owned()),
                    "system" => RootCert::System,
                    path => RootCert::File(PathBuf::from(path)),
                });
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, settings))
}

fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = value
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("{value:?}: a % not followed by two hex digits"))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{value:?}: not UTF-8 once decoded"))
}

/// The connector every connection of the store uses, built once from the
/// settings: the driver's mode and the rustls client configuration.
#[derive(Clone)]
pub struct Tls {
    mode: DriverSslMode,
    config: Option<Arc<ClientConfig>>,
    /// What a refused handshake's error starts with: the mode and the CAs.
    context: Arc<str>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish()
    }
}

impl Tls {
    /// Reads the root certificates the mode needs and builds the client
    /// configuration; the error names the parameter at fault.
    pub fn new(settings: &TlsSettings) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mode = match settings.mode {
            SslMode::Disable => {
                return Ok(Tls {
                    mode: DriverSslMode::Disable,
                    config: None,
                    context: Arc::from("sslmode=disable"),
                });
            }
            SslMode::Prefer => DriverSslMode::Prefer,
            _ => DriverSslMode::Require,
        };
        let check = match (settings.mode, &settings.root_cert) {
            (SslMode::Prefer | SslMode::Require, None) => Check::Nothing,
            (SslMode::Prefer, Some(_)) => Check::Nothing,
            (SslMode::Require | SslMode::VerifyCa, Some(root)) => Check::Chain(root.clone()),
            (SslMode::VerifyCa, None) => Check::Chain(default_root_cert(settings.mode)?),
            (SslMode::VerifyFull, Some(root)) => Check::Full(root.clone()),
            (SslMode::VerifyFull, None) => Check::Full(default_root_cert(settings.mode)?),
            (SslMode::Disable, _) => Check::Nothing,
        };
        let context = match &check {
            Check::Nothing => format!("sslmode={}, certificate not checked", settings.mode.name()),
            Check::Chain(root) => format!(
                "sslmode={}, the server's certificate must chain to {}",
                settings.mode.name(),
                root.describe()
            ),
            Check::Full(root) => format!(
                "sslmode=verify-full, the server's certificate must chain to {} and name the host",
                root.describe()
            ),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match &check {
            Check::Nothing => Arc::new(NoCheck(Arc::clone(&provider))),
            Check::Chain(root) | Check::Full(root) => {
                let roots = Arc::new(roots(root)?);
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
                        .build()
                        .map_err(|e| format!("sslrootcert: {e}"))?;
                match check {
                    Check::Full(_) => webpki,
                    _ => Arc::new(ChainOnly(webpki)),
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("sslmode: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Tls {
            mode,
            config: Some(Arc::new(config)),
            context: Arc::from(context),
        })
    }

    /// Sets the driver's own `sslmode` (disable, prefer or require) on `pg`.
    pub fn apply(&self, pg: &mut tokio_postgres::Config) {
        pg.ssl_mode(self.mode);
    }
}

enum Check {
    Nothing,
    Chain(RootCert),
    Full(RootCert),
}

/// libpq's default root file, `~/.postgresql/root.crt`, or why there is none.
fn default_root_cert(mode: SslMode) -> Result<RootCert, String> {
    let name = if mode == SslMode::VerifyFull {
        "verify-full"
    } else {
        "verify-ca"
    };
    let default = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".postgresql/root.crt"))
        .filter(|path| path.is_file());
    default.map(RootCert::File).ok_or_else(|| {
        format!(
            "sslrootcert: sslmode={name} needs the CA that signed the server's certificate: \
             give sslrootcert=/path/to/ca.pem (or sslrootcert=system for the system's roots)"
        )
    })
}

fn roots(root: &RootCert) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root {
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("sslrootcert: system: no usable root certificate found".to_owned());
            }
        }
        RootCert::File(path) => {
            let shown = path.display();
            let pem = std::fs::read(path).map_err(|e| format!("sslrootcert: {shown}: {e}"))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("sslrootcert: {shown}: {e}"))?;
            if certs.is_empty() {
                return Err(format!("sslrootcert: {shown}: no PEM CERTIFICATE in it"));
            }
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert: {shown}: {e}"))?;
            }
        }
    }
    Ok(store)
}

/// `prefer` and `require` without a root: encryption against eavesdroppers,
/// no authentication of the server (libpq's behaviour). The handshake's
/// signatures are still checked, so the session is with the key holder of
/// whatever certificate was shown.
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked as `verify-full` does; only a
/// certificate made for another name is let through.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

impl<S> MakeTlsConnect<S> for Tls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, io::Error> {
        Ok(Connect {
            config: self.config.clone(),
            context: Arc::clone(&self.context),
            // A Unix socket has no name to check: None, refused if TLS is
            // ever attempted on it.
            name: ServerName::try_from(domain.to_owned()).ok(),
        })
    }
}

/// One connection's handshake.
pub struct Connect {
    config: Option<Arc<ClientConfig>>,
    context: Arc<str>,
    name: Option<ServerName<'static>>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("TLS is disabled (sslmode=disable)"))?;
            let name = self
                .name
                .ok_or_else(|| io::Error::other("no host name to check the certificate against"))?;
            let context = self.context;
            tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map(TlsStream)
                .map_err(|e| io::Error::new(e.kind(), format!("{context}: {e}")))
        })
    }
}

/// A TLS connection to PostgreSQL.
pub struct TlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for TlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // No tls-server-end-point binding: its hash depends on the
        // certificate's signature algorithm, which would need an X.509
        // parser; SCRAM then runs without the -PLUS binding, as libpq
        // does with channel_binding=prefer against a server without it.
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str, expected: Result<(&str, SslMode, Option<RootCert>), &str>) {
        match (split_url(url), expected) {
            (Ok((rest, settings)), Ok((want, mode, root))) => {
                assert_eq!(rest, want, "{url}");
                assert_eq!(
                    settings,
                    TlsSettings {
                        mode,
                        root_cert: root
                    },
                    "{url}"
                );
            }
            (Err(message), Err(prefix)) => assert!(message.starts_with(prefix), "{url}: {message}"),
            (got, want) => panic!("{url}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn ssl_parameters_are_taken_out_of_the_url() {
        let file = |p: &str| Some(RootCert::File(PathBuf::from(p)));
        check(
            "postgres://h/db",
            Ok(("postgres://h/db", SslMode::Prefer, None)),
        );
        check(
            "postgres://h/db?sslmode=require",
            Ok(("postgres://h/db", SslMode::Require, None)),
        );
        check(
            "postgres://u@h:5/db?connect_timeout=3&sslmode=verify-full&sslrootcert=/etc/ca.pem&application_name=x",
            Ok((
                "postgres://u@h:5/db?connect_timeout=3&application_name=x",
                SslMode::VerifyFull,
                file("/etc/ca.pem"),
            )),
        );
        check(
            "postgres://h/db?sslrootcert=%2Fa%20b%2Fca.pem&sslmode=verify-ca",
            Ok(("postgres://h/db", SslMode::VerifyCa, file("/a b/ca.pem"))),
        );
        check(
            "postgres://h/db?sslmode=disable",
            Ok(("postgres://h/db", SslMode::Disable, None)),
        );
        check(
            "postgres://h/db?sslrootcert=system",
            Ok(("postgres://h/db", SslMode::Prefer, Some(RootCert::System))),
        );
        check(
            "postgres://h/db?sslmode=allow",
            Err("sslmode: \"allow\" is not one of"),
        );
        check(
            "postgres://h/db?sslmode=",
            Err("sslmode: \"\" is not one of"),
        );
        check(
            "postgres://h/db?sslrootcert=",
            Err("sslrootcert: must not be empty"),
        );
        check(
            "postgres://h/db?sslrootcert=%zz",
            Err("\"%zz\": a % not followed"),
        );
    }

    #[test]
    fn verifying_modes_need_a_readable_root_certificate() {
        let check = |settings: TlsSettings, prefix: &str| {
            let message = Tls::new(&settings).unwrap_err();
            assert!(message.starts_with(prefix), "{settings:?}: {message}");
        };
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        check(
            TlsSettings {
                mode: SslMode::VerifyFull,
                root_cert: Some(RootCert::File(missing)),
            },
            "sslrootcert: ",
        );
        let not_pem = dir.path().join("x.pem");
        std::fs::write(&not_pem, "not a certificate").unwrap();
        check(
            TlsSettings {
                mode: SslMode::VerifyCa,
                root_cert: Some(RootCert::File(not_pem)),
            },
            "sslrootcert: ",
        );
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            Tls::new(&TlsSettings {
                mode,
                root_cert: None,
            })
            .unwrap();
        }
    }
}
