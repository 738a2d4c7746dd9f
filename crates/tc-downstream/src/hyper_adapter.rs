//! The real downstream: hyper's pooled HTTP/1.1 client, with TLS by rustls.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::uri::Scheme;
use http::{Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, TrustAnchor};
use rustls::{ClientConfig, RootCertStore};

use self::guard::{DestinationDenied, GuardedConnector};
use crate::ClientTls;
use crate::{Delivery, DownError, DownResponse, Downstream};

/// Tuning for [`HyperDownstream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamConfig {
    /// Largest response body accepted; a longer one fails the try with
    /// [`DownError::ResponseTooLarge`]. Default 1 MiB.
    pub max_response_bytes: usize,
    /// How long an idle keep-alive connection stays pooled. Default 30 s:
    /// below common server keep-alive limits, so we rarely pick a connection
    /// the server is about to close.
    pub pool_idle_timeout: Duration,
    /// Most idle connections kept per host. Default 16.
    pub pool_max_idle_per_host: usize,
    /// Bound on establishing a TCP connection, failing with
    /// [`DownError::Connect`]. Default `None`: the request's own timeout
    /// bounds it (as [`DownError::Timeout`]).
    pub connect_timeout: Option<Duration>,
    /// PEM-encoded CA certificates trusted in addition to the system's
    /// roots, e.g. an internal CA. Each entry may hold several
    /// certificates. Default empty.
    pub extra_root_certs_pem: Vec<Vec<u8>>,
    /// Refuse calls whose destination, as resolved at connect time, is not
    /// a public address: loopback, private, link-local, CGNAT, unspecified,
    /// broadcast, multicast, also in IPv4-mapped IPv6 form. The call fails
    /// with [`DownError::DestinationDenied`]. Default off: the quick start
    /// calls 127.0.0.1.
    pub deny_private_destinations: bool,
}

impl Default for DownstreamConfig {
    fn default() -> Self {
        Self {
            max_response_bytes: 1024 * 1024,
            pool_idle_timeout: Duration::from_secs(30),
            pool_max_idle_per_host: 16,
            connect_timeout: None,
            extra_root_certs_pem: Vec::new(),
            deny_private_destinations: false,
        }
    }
}

/// Why [`HyperDownstream::try_new`] refused its configuration: an entry of
/// [`DownstreamConfig::extra_root_certs_pem`] (`index` counts from 0) that
/// cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DownstreamSetupError {
    /// The entry is not valid PEM.
    #[error("extra root certificate {index}: invalid PEM: {reason}")]
    InvalidPem {
        /// Which entry.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The entry holds no `CERTIFICATE` section.
    #[error("extra root certificate {index}: no PEM CERTIFICATE section found")]
    NoCertificate {
        /// Which entry.
        index: usize,
    },
    /// A certificate in the entry cannot serve as a trust anchor.
    #[error("extra root certificate {index}: unusable certificate: {reason}")]
    InvalidCertificate {
        /// Which entry.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// The production [`Downstream`]: a pooled hyper client speaking HTTP/1.1, and
/// HTTPS through rustls (ring) trusting the system's root certificates plus
/// [`DownstreamConfig::extra_root_certs_pem`].
///
/// Cloning is cheap and shares the connection pool.
///
/// Dropping a call's future closes its connection instead of returning it to
/// the pool (hyper closes a connection whose response or body receiver went
/// away mid-message); the crate's loopback tests pin that down for both the
/// wait for headers and the body.
#[derive(Clone, Debug)]
pub struct HyperDownstream {
    transport: Transport,
    max_response_bytes: usize,
    /// The roots every https call trusts, and how connections are made:
    /// what a destination's own connector starts from.
    roots: Arc<RootCertStore>,
    config: Arc<DownstreamConfig>,
    /// One client per distinct destination TLS setting (a client
    /// certificate, own CA certificates), built at its first call and kept
    /// while the setting is: a changed setting has another fingerprint.
    by_tls: Arc<Mutex<HashMap<[u8; 32], TlsClient>>>,
}

type TlsClient = Client<HttpsConnector<GuardedConnector>, Full<Bytes>>;

/// The most destination connectors kept; past it the cache starts again
/// (each is rebuilt at its next call).
const MAX_TLS_CLIENTS: usize = 256;

/// With no usable root certificates we still serve `http://` downstreams
/// rather than refuse to start; `https://` calls then fail with a clear error.
#[derive(Clone, Debug)]
enum Transport {
    Tls(Client<HttpsConnector<GuardedConnector>, Full<Bytes>>),
    PlainOnly(Client<GuardedConnector, Full<Bytes>>),
}

impl Transport {
    fn request(&self, request: Request<Full<Bytes>>) -> ResponseFuture {
        match self {
            Transport::Tls(client) => client.request(request),
            Transport::PlainOnly(client) => client.request(request),
        }
    }
}

impl HyperDownstream {
    /// Builds the client. Never fails: an unusable entry of
    /// [`DownstreamConfig::extra_root_certs_pem`] is logged
    /// (`downstream_extra_root_invalid`) and skipped, and with no root
    /// certificate at all (neither the system's nor extra ones) it logs an
    /// error and serves `http://` URLs only. Use [`Self::try_new`] to refuse
    /// bad extra roots instead.
    pub fn new(config: DownstreamConfig) -> Self {
        let mut extra = Vec::new();
        for (index, pem) in config.extra_root_certs_pem.iter().enumerate() {
            match trust_anchors(index, pem) {
                Ok(anchors) => extra.extend(anchors),
                Err(error) => tracing::error!(%error, index, "downstream_extra_root_invalid"),
            }
        }
        Self::with_roots(&config, native_roots(), extra)
    }

    /// Like [`Self::new`], but an unusable extra root certificate is an
    /// error: a server configured with a CA file should not start without
    /// it. Missing system roots are still only logged.
    pub fn try_new(config: DownstreamConfig) -> Result<Self, DownstreamSetupError> {
        let mut extra = Vec::new();
        for (index, pem) in config.extra_root_certs_pem.iter().enumerate() {
            extra.extend(trust_anchors(index, pem)?);
        }
        Ok(Self::with_roots(&config, native_roots(), extra))
    }

    /// Builds the client trusting `native` (the system's roots, as loaded)
    /// and `extra`; split out so tests can stand in for the system's roots.
    pub(crate) fn with_roots(
        config: &DownstreamConfig,
        native: Vec<CertificateDer<'static>>,
        extra: Vec<TrustAnchor<'static>>,
    ) -> Self {
        let (http, builder) = connector_and_builder(config);
        let mut roots = RootCertStore::empty();
        let (native_added, native_ignored) = roots.add_parsable_certificates(native);
        if native_ignored > 0 {
            tracing::warn!(
                added = native_added,
                ignored = native_ignored,
                "downstream_native_roots_unparsable"
            );
        }
        let extra_added = extra.len();
        roots.extend(extra);

        let shared_roots = Arc::new(roots.clone());
        let transport = match tls_config(roots) {
            Ok(tls) => {
                tracing::debug!(
                    native_roots = native_added,
                    extra_roots = extra_added,
                    "downstream_https_enabled"
                );
                Transport::Tls(
                    builder.build(
                        HttpsConnectorBuilder::new()
                            .with_tls_config(tls)
                            .https_or_http()
                            .enable_http1()
                            .wrap_connector(http),
                    ),
                )
            }
            Err(error) => {
                tracing::error!(%error, "downstream_https_disabled");
                Transport::PlainOnly(builder.build(http))
            }
        };
        Self {
            transport,
            max_response_bytes: config.max_response_bytes,
            roots: shared_roots,
            config: Arc::new(config.clone()),
            by_tls: Arc::default(),
        }
    }

    /// The client of a destination's TLS setting: the cached one, or one
    /// built now (its connector as every other's, its rustls configuration
    /// with the destination's roots and client certificate).
    fn tls_client(&self, tls: &ClientTls) -> Result<TlsClient, DownError> {
        let key = tls.fingerprint();
        let mut cache = self.by_tls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = cache.get(&key) {
            return Ok(client.clone());
        }
        let config = client_tls::destination_config(&self.roots, tls)
            .map_err(|e| DownError::Other(format!("the destination's TLS settings: {e}")))?;
        let (http, builder) = connector_and_builder(&self.config);
        let client = builder.build(
            HttpsConnectorBuilder::new()
                .with_tls_config(config)
                .https_or_http()
                .enable_http1()
                .wrap_connector(http),
        );
        if cache.len() >= MAX_TLS_CLIENTS {
            cache.clear();
        }
        cache.insert(key, client.clone());
        Ok(client)
    }

    /// Whether `https://` URLs can be called (some root certificate, the
    /// system's or an extra one, was loaded).
    pub fn https_enabled(&self) -> bool {
        matches!(self.transport, Transport::Tls(_))
    }

    /// Sends the request and waits for the response head. Split from
    /// [`Self::read_body`] so tests can drop a call in either phase.
    pub(crate) async fn send_head(
        &self,
        delivery: Delivery,
    ) -> Result<Response<Incoming>, DownError> {
        let tls = delivery.client_tls.clone();
        let request = self.build_request(delivery)?;
        let response = match tls {
            Some(tls) => self.tls_client(&tls)?.request(request),
            None => self.transport.request(request),
        };
        response.await.map_err(|error| classify(&error))
    }

    /// Reads the whole body within the size cap.
    pub(crate) async fn read_body(
        &self,
        response: Response<Incoming>,
    ) -> Result<DownResponse, DownError> {
        let (head, body) = response.into_parts();
        let too_large = DownError::ResponseTooLarge {
            limit: self.max_response_bytes,
        };
        // A declared Content-Length over the cap fails before reading a byte.
        if body.size_hint().lower() > self.max_response_bytes as u64 {
            return Err(too_large);
        }
        let body = match Limited::new(body, self.max_response_bytes).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<LengthLimitError>() => return Err(too_large),
            Err(error) => return Err(classify(&*error)),
        };
        let header = |name: &str| {
            head.headers
                .get(name)
                .and_then(|value: &HeaderValue| value.to_str().ok())
                .map(str::to_owned)
        };
        Ok(DownResponse {
            status: head.status.as_u16(),
            retry_after: header(RETRY_AFTER.as_str()),
            content_type: header(CONTENT_TYPE.as_str()),
            rate_limit: crate::port::RATE_LIMIT_HEADERS
                .into_iter()
                .filter_map(|name| Some((name, header(name)?)))
                .collect(),
            body,
        })
    }

    /// The delivery as hyper's request: its method, url, headers in their
    /// order and body, nothing else (hyper adds `Host` and the length).
    fn build_request(&self, delivery: Delivery) -> Result<Request<Full<Bytes>>, DownError> {
        let uri: Uri = delivery.url.parse().map_err(|error| {
            DownError::Other(format!("invalid url {:?}: {error}", delivery.url))
        })?;
        match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP => {}
            Some(scheme) if *scheme == Scheme::HTTPS => {
                // A destination with CA certificates of its own has roots.
                let own_roots = delivery
                    .client_tls
                    .as_ref()
                    .is_some_and(|tls| tls.ca_certs.is_some());
                if !self.https_enabled() && !own_roots {
                    return Err(DownError::Other(
                        "https is unavailable: no root certificates could be loaded".into(),
                    ));
                }
            }
            _ => {
                return Err(DownError::Other(format!(
                    "invalid url {:?}: not an absolute http or https url",
                    delivery.url
                )));
            }
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(DownError::Other(format!(
                "invalid url {:?}: no host",
                delivery.url
            )));
        }
        let method = Method::from_bytes(delivery.method.as_str().as_bytes())
            .map_err(|error| DownError::Other(format!("invalid method: {error}")))?;
        let mut builder = Request::builder().method(method).uri(uri);
        for (name, value) in &delivery.headers {
            // Neither message repeats the value: it may be a credential.
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| DownError::Other(format!("{name:?} is not a valid header name")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| DownError::Other(format!("the value of {name} is not valid")))?;
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(delivery.body))
            .map_err(|error| DownError::Other(format!("cannot build request: {error}")))
    }
}

/// The system's root certificates; failures are logged, not fatal, since
/// extra roots or plain `http://` may be all a deployment needs.
fn native_roots() -> Vec<CertificateDer<'static>> {
    let loaded = rustls_native_certs::load_native_certs();
    for error in &loaded.errors {
        tracing::warn!(%error, "downstream_native_roots_error");
    }
    loaded.certs
}

/// The trust anchors in one PEM entry of the extra roots.
fn trust_anchors(
    index: usize,
    pem: &[u8],
) -> Result<Vec<TrustAnchor<'static>>, DownstreamSetupError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| DownstreamSetupError::InvalidPem {
            index,
            reason: error.to_string(),
        })?;
    if certs.is_empty() {
        return Err(DownstreamSetupError::NoCertificate { index });
    }
    let mut store = RootCertStore::empty();
    for cert in certs {
        store
            .add(cert)
            .map_err(|error| DownstreamSetupError::InvalidCertificate {
                index,
                reason: error.to_string(),
            })?;
    }
    Ok(store.roots)
}

/// A guarded connector as every client uses (plain and https URIs: the
/// https connector wrapping it needs them accepted; plain-only mode refuses
/// https before connecting) and a pooled client builder.
fn connector_and_builder(
    config: &DownstreamConfig,
) -> (GuardedConnector, hyper_util::client::legacy::Builder) {
    let mut http = GuardedConnector::new(config.deny_private_destinations);
    let tcp = http.tcp();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(config.connect_timeout);
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(config.pool_idle_timeout)
        .pool_max_idle_per_host(config.pool_max_idle_per_host);
    (http, builder)
}

/// The client's TLS settings, or why https cannot be offered.
fn tls_config(roots: RootCertStore) -> Result<ClientConfig, String> {
    if roots.is_empty() {
        return Err("no root certificates: none from the system and no extra ones".into());
    }
    // The provider is named rather than taken from rustls' process default,
    // which panics when feature unification enables two providers.
    Ok(
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

impl Default for HyperDownstream {
    fn default() -> Self {
        Self::new(DownstreamConfig::default())
    }
}

impl Downstream for HyperDownstream {
    async fn send(&self, delivery: Delivery) -> Result<DownResponse, DownError> {
        let timeout = delivery.timeout;
        let call = async {
            let head = self.send_head(delivery).await?;
            self.read_body(head).await
        };
        // One deadline for the whole call; on expiry the call's future is
        // dropped, which closes its connection.
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_elapsed) => Err(DownError::Timeout),
        }
    }
}

/// Sorts a client or body error into the retry policy's kinds.
///
/// Connect failures, connections reset or closed before the response was
/// complete, and any I/O error are [`DownError::Connect`]; a server
/// certificate that TLS refuses, a reply hyper cannot parse as HTTP, and
/// anything unrecognised, are [`DownError::Other`].
fn classify(error: &(dyn StdError + 'static)) -> DownError {
    let message = describe(error);
    if let Some(denied) = find_cause::<DestinationDenied>(error) {
        return DownError::DestinationDenied(denied.0.clone());
    }
    if rejected_certificate(error) {
        // Not a passing fault: the same certificate is refused on every try.
        return DownError::Other(format!("TLS certificate refused: {message}"));
    }
    if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>()
        && client.is_connect()
    {
        return DownError::Connect(message);
    }
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(hyper_error) = current.downcast_ref::<hyper::Error>() {
            if hyper_error.is_parse() {
                return DownError::Other(format!("invalid HTTP response: {message}"));
            }
            if hyper_error.is_incomplete_message()
                || hyper_error.is_canceled()
                || hyper_error.is_closed()
            {
                return DownError::Connect(message);
            }
        }
        if current.downcast_ref::<io::Error>().is_some() {
            return DownError::Connect(message);
        }
        cause = current.source();
    }
    DownError::Other(message)
}

/// Whether the chain holds rustls refusing the server's certificate. rustls
/// travels inside (possibly nested) `io::Error`s, whose `source()` skips the
/// wrapped error, so each `io::Error` is opened instead.
fn rejected_certificate(error: &(dyn StdError + 'static)) -> bool {
    let refused = |e: &(dyn StdError + 'static)| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
        )
    };
    let mut cause = Some(error);
    while let Some(current) = cause {
        if refused(current) {
            return true;
        }
        cause = match current
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => current.source(),
        };
    }
    false
}

/// The first error of type `E` in the chain, looking inside `io::Error`s
/// (whose `source()` skips the error they wrap).
fn find_cause<'e, E: StdError + 'static>(error: &'e (dyn StdError + 'static)) -> Option<&'e E> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<E>() {
            return Some(found);
        }
        cause = match current
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => current.source(),
        };
    }
    None
}

/// The error and its causes on one line: hyper's top-level messages alone
/// ("client error (SendRequest)") do not say what happened.
fn describe(error: &(dyn StdError + 'static)) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(current) = cause {
        let text = current.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = current.source();
    }
    message
}

pub(crate) mod client_tls;
mod guard;
#[cfg(test)]
mod mtls_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
