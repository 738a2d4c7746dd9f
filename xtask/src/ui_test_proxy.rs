//! ui-test's proxy path: the dashboard behind a TLS-terminating reverse
//! proxy, as the README advises deploying it. A loopback proxy here
//! terminates https with a self-signed certificate for `localhost` (the
//! browser is told to accept it) and forwards each request over plain http
//! with `X-Forwarded-Proto: https`, `X-Forwarded-Host` and
//! `X-Forwarded-For`, as nginx or an Ingress controller does. The browser's
//! `Origin` is then `https://localhost:<port>`: the login passes when the
//! server trusts the proxy (`--trusted-proxy 127.0.0.1/32`), and without
//! that flag it is refused with the page that names it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use fantoccini::{Client, Locator};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::browser::{WAIT, check, click, goto, screenshot, text_of, until};
use crate::harness::server::{ServerProcess, tc_server};

/// A TLS-terminating reverse proxy on a loopback port in front of
/// `upstream`; it stops when dropped.
struct TlsProxy {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server configuration presenting a fresh self-signed certificate for
/// `localhost`.
fn acceptor() -> Result<TlsAcceptor, String> {
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .map_err(|e| format!("certificate parameters: {e}"))?;
    let signing_key = rcgen::KeyPair::generate().map_err(|e| format!("a key: {e}"))?;
    let cert = params
        .self_signed(&signing_key)
        .map_err(|e| format!("self-signing: {e}"))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| format!("TLS certificate: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

impl TlsProxy {
    async fn start(upstream: SocketAddr) -> Result<TlsProxy, String> {
        let acceptor = acceptor()?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("proxy listener: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("proxy address: {e}"))?;
        let client: HttpClient<HttpConnector, Full<Bytes>> =
            HttpClient::builder(TokioExecutor::new()).build_http();
        let task = tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let client = client.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        forward(client.clone(), upstream, peer, req)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(TlsProxy { addr, task })
    }
}

/// One request to `upstream` over http, with what a proxy adds; a failure
/// to reach it is a 502, as from a proxy.
async fn forward(
    client: HttpClient<HttpConnector, Full<Bytes>>,
    upstream: SocketAddr,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let bad_gateway = |what: String| {
        let mut r = Response::new(Full::new(Bytes::from(what)));
        *r.status_mut() = StatusCode::BAD_GATEWAY;
        Ok(r)
    };
    let (mut parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return bad_gateway("reading the request body".into());
    };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("http://{upstream}{target}").parse() else {
        return bad_gateway(format!("upstream uri for {target}"));
    };
    parts.uri = uri;
    let headers = &mut parts.headers;
    if let Some(host) = headers.get(http::header::HOST).cloned() {
        headers.insert("x-forwarded-host", host);
    }
    headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
    if let Ok(peer) = HeaderValue::from_str(&peer.ip().to_string()) {
        headers.insert("x-forwarded-for", peer);
    }
    match client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            match body.collect().await {
                Ok(body) => Ok(Response::from_parts(parts, Full::new(body.to_bytes()))),
                Err(e) => bad_gateway(format!("reading the answer: {e}")),
            }
        }
        Err(e) => bad_gateway(format!("upstream: {e}")),
    }
}

/// Types `token` into the login form at `url` and sends it.
async fn log_in(browser: &Client, url: &str, token: &str) -> Result<(), String> {
    goto(browser, url).await?;
    let field = browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#token"))
        .await
        .map_err(|e| format!("the token field at {url}: {e}"))?;
    field
        .send_keys(token)
        .await
        .map_err(|e| format!("typing: {e}"))?;
    click(browser, "#login button[type=submit]").await
}

/// 11 and 12: through the TLS proxy, a server that trusts it logs the
/// browser in; one that does not refuses the login with the page naming
/// `--trusted-proxy`.
pub(crate) async fn behind_a_tls_proxy(
    browser: &Client,
    binary: &Path,
    shots: &Path,
    token: &str,
) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let trusting = ServerProcess::start(
        "tc-server (trusted proxy)",
        tc_server(
            binary,
            &dir.path().join("ui-proxy.db"),
            &["--api-token", token, "--trusted-proxy", "127.0.0.1/32"],
        ),
    )?;
    let proxy = TlsProxy::start(trusting.addr).await?;
    let login = format!("https://localhost:{}/ui/login", proxy.addr.port());
    log_in(browser, &login, token).await?;
    until("the overview through the proxy", || async {
        text_of(browser, "#count-success").await
    })
    .await?;
    let url = browser
        .current_url()
        .await
        .map_err(|e| format!("the page's url: {e}"))?;
    check(url.scheme() == "https", || {
        format!("the overview is not at https: {url}")
    })?;
    eprintln!("[ui-test] ok: through a TLS proxy the server trusts, the login gets in");
    drop(proxy);
    drop(trusting);

    let unaware = ServerProcess::start(
        "tc-server (untrusted proxy)",
        tc_server(
            binary,
            &dir.path().join("ui-unaware.db"),
            &["--api-token", token],
        ),
    )?;
    let proxy = TlsProxy::start(unaware.addr).await?;
    let login = format!("https://localhost:{}/ui/login", proxy.addr.port());
    log_in(browser, &login, token).await?;
    let page = until("the refusal page", || async {
        text_of(browser, "#refused").await
    })
    .await?;
    check(
        page.contains("403 cross_origin") && page.contains("--trusted-proxy"),
        || format!("the refusal page says {page:?}"),
    )?;
    screenshot(browser, shots, "proxy-refused").await?;
    eprintln!(
        "[ui-test] ok: through a proxy the server does not trust, the page names --trusted-proxy"
    );
    drop(proxy);
    drop(unaware);
    Ok(())
}
