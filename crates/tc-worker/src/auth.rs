//! A destination's `auth` on each try: the layer between a
//! built [`Delivery`] and the [`Downstream`] that sets its `Authorization`.
//!
//! - **basic**: `Basic base64(username:password)` (tc-model writes it).
//! - **jwt**: a token signed for this call with the server's first key
//!   ([`JwtSigner`]), its claims tc-model's (`JwtAuth::claims`).
//! - **oauth2_client_credentials**: a bearer token from the token endpoint,
//!   fetched through the same downstream (so the allow-list's twin, the
//!   private-address guard, and the fake in tests apply to it), kept per
//!   destination on this node until 30 s before it runs out, one fetch at a
//!   time per destination (the calls that wait for it share it). A `401`
//!   to a call made with a kept token drops the token and the call is made
//!   once more with a fresh one, in the same try. A failing token endpoint
//!   fails the try with [`DownError::AuthFailed`] (`auth_failed`, retried),
//!   its text naming the endpoint's status, never a secret.
//!
//! Only the time a token is kept is read from tokio's clock, so tests with
//! a paused clock move it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tc_downstream::{Delivery, DownError, DownResponse, Downstream, JwtKeys, Method, USER_AGENT};
use tc_model::auth::{AccessToken, ClientCredentials, DestinationAuth, JwtCall};
use tokio::time::Instant;

/// The longest a token request may take, within the try's own timeout.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// What signs a destination's JWTs: the server's `--issuer` and keys.
#[derive(Debug, Clone)]
pub struct JwtSigner {
    /// The `iss` of every token.
    pub issuer: String,
    /// The keys: the first signs.
    pub keys: Arc<JwtKeys>,
}

/// A token kept for one destination, with the grant it was fetched for
/// (a changed grant fetches anew).
struct Kept {
    grant: ClientCredentials,
    token: String,
    until: Instant,
}

/// One destination's token slot: the async lock makes one fetch at a time.
type Slot = Arc<tokio::sync::Mutex<Option<Kept>>>;

/// The tokens of this node and what signs JWTs.
#[derive(Default)]
pub(crate) struct CallAuth {
    jwt: Option<JwtSigner>,
    tokens: Mutex<HashMap<String, Slot>>,
}

/// The try a call belongs to: what a JWT names.
pub(crate) struct CallOf<'a> {
    pub(crate) destination: &'a str,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) task_id: &'a str,
    pub(crate) attempt: u32,
    /// Unix seconds.
    pub(crate) now_s: i64,
}

/// `delivery` with `value` as its one `Authorization` header.
fn authorized(mut delivery: Delivery, value: String) -> Delivery {
    delivery.headers.retain(|(name, _)| name != "authorization");
    delivery.headers.push(("authorization".to_owned(), value));
    delivery
}

impl CallAuth {
    pub(crate) fn new(jwt: Option<JwtSigner>) -> CallAuth {
        CallAuth {
            jwt,
            tokens: Mutex::default(),
        }
    }

    /// Sends `delivery` with the credentials `auth` says (none: as built).
    pub(crate) async fn send<D: Downstream>(
        &self,
        downstream: &D,
        auth: Option<&DestinationAuth>,
        delivery: Delivery,
        call: &CallOf<'_>,
    ) -> Result<DownResponse, DownError> {
        let answer = self.send_as(downstream, auth, delivery, call).await;
        if let Err(DownError::AuthFailed(why)) = &answer {
            // What failed, never a secret: the endpoint's status or error.
            tracing::warn!(
                destination = call.destination,
                task_id = call.task_id,
                attempt = call.attempt,
                message = %why,
                "auth_failed"
            );
        }
        answer
    }

    async fn send_as<D: Downstream>(
        &self,
        downstream: &D,
        auth: Option<&DestinationAuth>,
        delivery: Delivery,
        call: &CallOf<'_>,
    ) -> Result<DownResponse, DownError> {
        match auth {
            None => downstream.send(delivery).await,
            Some(DestinationAuth::Basic(basic)) => {
                downstream
                    .send(authorized(delivery, basic.header_value()))
                    .await
            }
            Some(DestinationAuth::Jwt(jwt)) => {
                let signer = self.jwt.as_ref().ok_or_else(|| {
                    DownError::AuthFailed("this server has no --issuer to sign JWTs".into())
                })?;
                let claims = jwt.claims(&JwtCall {
                    issuer: &signer.issuer,
                    tenant: call.tenant,
                    task_id: call.task_id,
                    attempt: call.attempt,
                    now_s: call.now_s,
                });
                let token = signer
                    .keys
                    .sign(&claims)
                    .map_err(|e| DownError::AuthFailed(e.to_string()))?;
                downstream
                    .send(authorized(delivery, format!("Bearer {token}")))
                    .await
            }
            Some(DestinationAuth::OAuth2(grant)) => {
                self.send_with_token(downstream, grant, delivery, call.destination)
                    .await
            }
        }
    }

    async fn send_with_token<D: Downstream>(
        &self,
        downstream: &D,
        grant: &ClientCredentials,
        delivery: Delivery,
        destination: &str,
    ) -> Result<DownResponse, DownError> {
        let timeout = delivery.timeout.min(TOKEN_TIMEOUT);
        let slot = self.slot(destination);
        let (token, kept) = token_of(&slot, downstream, grant, timeout, None).await?;
        let answer = downstream
            .send(authorized(delivery.clone(), format!("Bearer {token}")))
            .await;
        match answer {
            Ok(response) if response.status == 401 && kept => {
                // The kept token was revoked or expired early: drop it and
                // make the call once more with a fresh one.
                let (fresh, _) = token_of(&slot, downstream, grant, timeout, Some(&token)).await?;
                downstream
                    .send(authorized(delivery, format!("Bearer {fresh}")))
                    .await
            }
            other => other,
        }
    }

    fn slot(&self, destination: &str) -> Slot {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(tokens.entry(destination.to_owned()).or_default())
    }
}

/// The token for `grant`: the one kept, unless it is `stale` (refused by a
/// `401`), expired or for another grant; else a fresh one, kept when its
/// lifetime allows. Answers whether it was a kept one.
async fn token_of<D: Downstream>(
    slot: &Slot,
    downstream: &D,
    grant: &ClientCredentials,
    timeout: Duration,
    stale: Option<&str>,
) -> Result<(String, bool), DownError> {
    let mut kept = slot.lock().await;
    // Still good; or, after a 401, another call already replaced it.
    if let Some(k) = kept.as_ref()
        && k.grant == *grant
        && Instant::now() < k.until
        && stale != Some(k.token.as_str())
    {
        return Ok((k.token.clone(), true));
    }
    *kept = None;
    let fresh = fetch(downstream, grant, timeout).await?;
    let keep_for = fresh.keep_for();
    if !keep_for.is_zero() {
        *kept = Some(Kept {
            grant: grant.clone(),
            token: fresh.token.clone(),
            until: Instant::now() + keep_for,
        });
    }
    Ok((fresh.token, false))
}

/// One token request (RFC 6749 §4.4.2) and its answer.
async fn fetch<D: Downstream>(
    downstream: &D,
    grant: &ClientCredentials,
    timeout: Duration,
) -> Result<AccessToken, DownError> {
    let (headers, body) = grant.token_request();
    let mut all = vec![("user-agent".to_owned(), USER_AGENT.to_owned())];
    all.extend(headers.into_iter().map(|(n, v)| (n.to_owned(), v)));
    let request = Delivery {
        method: Method::Post,
        url: grant.token_url.clone(),
        headers: all,
        body: body.into(),
        timeout,
        // The token endpoint is another host: the destination's client
        // certificate belongs to the destination's connections alone.
        client_tls: None,
    };
    let failed = |what: String| DownError::AuthFailed(format!("token endpoint {what}"));
    let response = downstream
        .send(request)
        .await
        .map_err(|e| failed(format!("unreachable: {e}")))?;
    if !(200..=299).contains(&response.status) {
        return Err(failed(format!("answered {}", response.status)));
    }
    AccessToken::parse(&response.body)
        .map_err(|why| failed(format!("answered {}, but {why}", response.status)))
}

#[cfg(test)]
mod tests;
