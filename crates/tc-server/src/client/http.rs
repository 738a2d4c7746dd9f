//! The client's HTTP side: one request at a time to the server's API over
//! hyper-util's client, `https://` through rustls (ring) with the system's
//! root certificates.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::args::{Connection, ServerUrl};
use super::error::ClientError;

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take beyond what it asked the server to wait.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

enum Transport {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

/// The server's API.
pub(crate) struct Api {
    base: String,
    authorization: Option<HeaderValue>,
    transport: Transport,
}

/// An answer with a 2xx status, fully read.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The status.
    pub(crate) status: StatusCode,
    /// The body.
    pub(crate) body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub(crate) fn json(&self) -> Result<Value, ClientError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            ClientError::Protocol(format!("{} with a body that is not JSON: {e}", self.status))
        })
    }
}

impl Api {
    /// A client for `connection`'s server.
    pub(crate) fn new(connection: &Connection) -> Result<Api, ClientError> {
        let authorization = match &connection.token {
            Some(token) => Some(
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| ClientError::Usage("--token: not a valid header value".into()))?,
            ),
            None => None,
        };
        Ok(Api {
            base: connection.server.base.clone(),
            authorization,
            transport: transport(&connection.server)?,
        })
    }

    /// Sends a request to `path` (with its query) and reads the answer. A
    /// status outside 2xx is [`ClientError::Refused`] with the API's error
    /// code and message; `wait` is how long the server was asked to hold the
    /// answer (`wait_ms`), added to the answer's timeout.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        json_body: Option<String>,
        wait: Duration,
    ) -> Result<Reply, ClientError> {
        let request = self.request(method, path, json_body)?;
        let answer = async {
            let response = match &self.transport {
                Transport::Plain(client) => client.request(request).await,
                Transport::Tls(client) => client.request(request).await,
            }
            .map_err(|e| self.unreachable(&e))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| self.unreachable(&e))?
                .to_bytes();
            Ok::<_, ClientError>((parts.status, body))
        };
        let (status, body) = tokio::time::timeout(CONNECT_TIMEOUT + ANSWER_TIMEOUT + wait, answer)
            .await
            .map_err(|_| ClientError::Unreachable {
                server: self.base.clone(),
                reason: "no answer in time".into(),
            })??;
        if status.is_success() {
            Ok(Reply { status, body })
        } else {
            Err(refusal(status, &body))
        }
    }

    /// [`Api::send`] without waiting, its answer as JSON.
    pub(crate) async fn json(
        &self,
        method: Method,
        path: &str,
        json_body: Option<String>,
    ) -> Result<Value, ClientError> {
        self.send(method, path, json_body, Duration::ZERO)
            .await?
            .json()
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        json_body: Option<String>,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(authorization) = &self.authorization {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        let body = match json_body {
            Some(json) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                Bytes::from(json)
            }
            None => Bytes::new(),
        };
        builder
            .body(Full::new(body))
            .map_err(|e| ClientError::Usage(format!("cannot make a request to {path}: {e}")))
    }

    fn unreachable(&self, error: &(dyn std::error::Error + 'static)) -> ClientError {
        ClientError::Unreachable {
            server: self.base.clone(),
            reason: causes(error),
        }
    }
}

fn transport(server: &ServerUrl) -> Result<Transport, ClientError> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    let builder = Client::builder(TokioExecutor::new());
    if !server.tls {
        return Ok(Transport::Plain(builder.build(http)));
    }
    http.enforce_http(false);
    let tls = tls_config().map_err(|reason| ClientError::Unreachable {
        server: server.base.clone(),
        reason,
    })?;
    Ok(Transport::Tls(
        builder.build(
            HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_only()
                .enable_http1()
                .wrap_connector(http),
        ),
    ))
}

/// TLS with the system's root certificates, ring as the provider (named, so
/// that feature unification can never make rustls' default ambiguous). Also
/// the span exporter's (`--otlp-endpoint https://…`).
pub(crate) fn tls_config() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(loaded.certs);
    if roots.is_empty() {
        return Err("https: no root certificates found on this system".into());
    }
    tls_config_with_roots(roots)
}

/// TLS trusting `roots`, ring as the provider.
pub(crate) fn tls_config_with_roots(
    roots: rustls::RootCertStore,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// An error answer as [`ClientError::Refused`]: the API's `{"error":
/// {"code","message"}}`, or the status and the start of a body that is not
/// one (a proxy's page).
fn refusal(status: StatusCode, body: &[u8]) -> ClientError {
    let refused = refusal_of(status, body);
    match refused {
        // The fix is on this side: say how to give the credential.
        ClientError::Refused {
            status: 401,
            code,
            message,
        } => ClientError::Refused {
            status: 401,
            code,
            message: format!("{message}; {TOKEN_HINT}"),
        },
        other => other,
    }
}

/// What a 401 adds: how this client sends a credential.
const TOKEN_HINT: &str = "pass --token or set TC_API_TOKEN";

fn refusal_of(status: StatusCode, body: &[u8]) -> ClientError {
    let envelope: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        envelope
            .as_ref()
            .and_then(|v| v["error"][name].as_str())
            .map(str::to_owned)
    };
    match (field("code"), field("message")) {
        (Some(code), Some(message)) => ClientError::Refused {
            status: status.as_u16(),
            code,
            message,
        },
        _ => ClientError::Refused {
            status: status.as_u16(),
            code: status.canonical_reason().unwrap_or("error").to_owned(),
            message: if body.is_empty() {
                "(no body)".to_owned()
            } else {
                super::format::truncate(&String::from_utf8_lossy(body), 200)
            },
        },
    }
}

/// An error's causes, `: `-joined: hyper's own Display says only "client
/// error (Connect)", its cause says "tcp connect error: Connection refused".
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let Some(first) = error.source() else {
        return error.to_string();
    };
    let mut text = first.to_string();
    let mut source = first.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `text` percent-encoded for one path segment or query value: everything
/// but RFC 3986's unreserved characters (and `:`, which a path segment may
/// hold and a destination always has).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_all_but_unreserved_characters() {
        let check = |text: &str, expected: &str| assert_eq!(escape(text), expected, "{text}");
        check("0194d1c2-7a3e", "0194d1c2-7a3e");
        check("api.example.com:443", "api.example.com:443");
        check("[::1]:8080", "%5B::1%5D:8080");
        check("a/b?c#d&e=f g", "a%2Fb%3Fc%23d%26e%3Df%20g");
        check("2026-01-02T03:04:05+01:00", "2026-01-02T03:04:05%2B01:00");
        check("é", "%C3%A9");
    }

    #[test]
    fn refusals_carry_the_api_error_or_the_status() {
        let api = refusal(
            StatusCode::NOT_FOUND,
            br#"{"error":{"code":"not_found","message":"no task with this id"}}"#,
        );
        assert_eq!(
            api.to_string(),
            "the server refused (404 not_found): no task with this id"
        );
        let proxy = refusal(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>");
        assert_eq!(
            proxy.to_string(),
            "the server refused (502 Bad Gateway): <html>bad gateway</html>"
        );
        for body in [
            &br#"{"error":{"code":"unauthorized","message":"Authorization: no credential given"}}"#
                [..],
            b"",
        ] {
            let unauthorized = refusal(StatusCode::UNAUTHORIZED, body).to_string();
            assert!(
                unauthorized.ends_with("; pass --token or set TC_API_TOKEN"),
                "{unauthorized}"
            );
        }
        let empty = refusal(StatusCode::NOT_FOUND, b"");
        assert_eq!(
            empty.to_string(),
            "the server refused (404 Not Found): (no body)"
        );
    }
}
