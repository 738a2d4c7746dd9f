//! A destination's `auth`: how every call to it proves
//! who taskcenter is, exactly one of HTTP Basic, an OAuth2 client
//! credentials grant (RFC 6749 §4.4) or a JWT signed by the server's own
//! key. The rules live here, pure: the JSON an operator sends and its
//! refusals (each naming `auth.<field>`), the text both stores keep (the
//! one place every `auth` secret is written, so sealing at rest wraps it
//! there), the view (the type and the non-secret fields), the Basic header,
//! the token request and the reading of its answer, and a JWT's claims.
//! The worker does the I/O: it fetches and caches tokens and signs.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::setting::InvalidSetting;

/// The shortest and longest `lifetime_s` of a JWT.
pub const JWT_LIFETIME_S: std::ops::RangeInclusive<u32> = 60..=3600;

/// A JWT's `lifetime_s` when none is given.
pub const DEFAULT_JWT_LIFETIME_S: u32 = 300;

/// How long before its `expires_in` runs out a cached token is dropped.
pub const TOKEN_MARGIN: Duration = Duration::from_secs(30);

/// How long a token whose answer gave no `expires_in` is kept (until a
/// `401` drops it sooner).
pub const TOKEN_DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// The longest text field (an id, a scope, an audience), in bytes.
const MAX_FIELD_BYTES: usize = 1024;

/// The longest secret (a password, a client secret), in bytes.
const MAX_SECRET_BYTES: usize = 4096;

/// How a destination's calls are authenticated.
#[derive(Clone, PartialEq, Eq)]
pub enum DestinationAuth {
    /// `Authorization: Basic base64(username:password)`.
    Basic(BasicAuth),
    /// A bearer token from an OAuth2 token endpoint.
    OAuth2(ClientCredentials),
    /// A bearer JWT signed by the server (ES256) at each call.
    Jwt(JwtAuth),
}

/// HTTP Basic credentials (RFC 7617).
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The user id (no `:`).
    pub username: String,
    password: String,
}

/// An OAuth2 client credentials grant (RFC 6749 §4.4).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The token endpoint.
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    client_secret: String,
    /// The scope asked for, space-separated.
    pub scope: Option<String>,
    /// The `audience` asked for (an extension many providers take).
    pub audience: Option<String>,
    /// How the client authenticates to the token endpoint.
    pub auth_method: ClientAuthMethod,
}

/// RFC 6749 §2.3.1's two ways for a client to give its secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClientAuthMethod {
    /// HTTP Basic with the id and secret form-encoded (the default).
    #[default]
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form body.
    ClientSecretPost,
}

impl ClientAuthMethod {
    /// The name the API gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuthMethod::ClientSecretBasic => "client_secret_basic",
            ClientAuthMethod::ClientSecretPost => "client_secret_post",
        }
    }
}

/// A JWT the server signs for each call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtAuth {
    /// Its `aud`.
    pub audience: String,
    /// Seconds from `iat` to `exp`.
    pub lifetime_s: u32,
}

impl fmt::Debug for DestinationAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The type only: every other field may sit beside a secret.
        write!(f, "DestinationAuth({})", self.type_name())
    }
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BasicAuth(..)")
    }
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientCredentials(..)")
    }
}

fn bad(field: &'static str, message: impl Into<String>) -> InvalidSetting {
    InvalidSetting {
        field,
        message: message.into(),
    }
}

/// The members of an `auth` object, each taken once.
struct Fields(Map<String, Value>);

impl Fields {
    fn text(
        &mut self,
        field: &'static str,
        name: &str,
        max: usize,
    ) -> Result<String, InvalidSetting> {
        self.optional_text(field, name, max)?
            .ok_or_else(|| bad(field, "is required"))
    }

    fn optional_text(
        &mut self,
        field: &'static str,
        name: &str,
        max: usize,
    ) -> Result<Option<String>, InvalidSetting> {
        match self.0.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Err(bad(field, "must not be empty")),
            Some(Value::String(s)) if s.len() > max => {
                Err(bad(field, format!("must be at most {max} bytes")))
            }
            Some(Value::String(s)) if s.chars().any(char::is_control) => {
                Err(bad(field, "must not contain control characters"))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(bad(field, "must be a string")),
        }
    }

    /// Refuses what is left: a field this type does not have.
    fn done(self, type_name: &str) -> Result<(), InvalidSetting> {
        match self.0.keys().next() {
            Some(name) => Err(bad(
                "auth",
                format!("unknown field `{name}` for type {type_name}"),
            )),
            None => Ok(()),
        }
    }
}

impl DestinationAuth {
    /// Reads the `auth` member of a destination update: `null` is none.
    /// Every refusal names `auth` or `auth.<field>`.
    pub fn from_json(value: &Value) -> Result<Option<DestinationAuth>, InvalidSetting> {
        let map = match value {
            Value::Null => return Ok(None),
            Value::Object(map) => map.clone(),
            _ => return Err(bad("auth", "must be an object with a type, or null")),
        };
        let mut fields = Fields(map);
        let kind = fields.text("auth.type", "type", MAX_FIELD_BYTES)?;
        let auth = match kind.as_str() {
            "basic" => DestinationAuth::Basic(BasicAuth::read(&mut fields)?),
            "oauth2_client_credentials" => {
                DestinationAuth::OAuth2(ClientCredentials::read(&mut fields)?)
            }
            "jwt" => DestinationAuth::Jwt(JwtAuth::read(&mut fields)?),
            _ => {
                return Err(bad(
                    "auth.type",
                    "must be one of basic, oauth2_client_credentials, jwt",
                ));
            }
        };
        fields.done(&kind)?;
        Ok(Some(auth))
    }

    /// The API's name of its type.
    pub fn type_name(&self) -> &'static str {
        match self {
            DestinationAuth::Basic(_) => "basic",
            DestinationAuth::OAuth2(_) => "oauth2_client_credentials",
            DestinationAuth::Jwt(_) => "jwt",
        }
    }

    /// What a view shows: the type and the non-secret fields.
    pub fn view(&self) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), json!(self.type_name()));
        match self {
            DestinationAuth::Basic(b) => {
                out.insert("username".into(), json!(b.username));
            }
            DestinationAuth::OAuth2(c) => {
                out.insert("token_url".into(), json!(c.token_url));
                out.insert("client_id".into(), json!(c.client_id));
                out.insert("scope".into(), json!(c.scope));
                out.insert("audience".into(), json!(c.audience));
                out.insert("auth_method".into(), json!(c.auth_method.as_str()));
            }
            DestinationAuth::Jwt(j) => {
                out.insert("audience".into(), json!(j.audience));
                out.insert("lifetime_s".into(), json!(j.lifetime_s));
            }
        }
        Value::Object(out)
    }

    /// The text both stores keep (secrets included: this is the one place
    /// they are written, which sealing at rest wraps).
    pub fn to_stored(&self) -> String {
        let mut value = self.view();
        if let Value::Object(map) = &mut value {
            match self {
                DestinationAuth::Basic(b) => {
                    map.insert("password".into(), json!(b.password));
                }
                DestinationAuth::OAuth2(c) => {
                    map.insert("client_secret".into(), json!(c.client_secret));
                }
                DestinationAuth::Jwt(_) => {}
            }
        }
        value.to_string()
    }

    /// Reads [`DestinationAuth::to_stored`]'s text; `None` is none.
    pub fn from_stored(text: Option<&str>) -> Result<Option<DestinationAuth>, CorruptAuth> {
        let Some(text) = text else {
            return Ok(None);
        };
        let value: Value = serde_json::from_str(text).map_err(|_| CorruptAuth)?;
        DestinationAuth::from_json(&value).map_err(|_| CorruptAuth)
    }
}

/// A stored `auth` that does not read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stored destination auth is not valid")]
pub struct CorruptAuth;

impl BasicAuth {
    fn read(fields: &mut Fields) -> Result<BasicAuth, InvalidSetting> {
        let username = fields.text("auth.username", "username", MAX_FIELD_BYTES)?;
        if username.contains(':') {
            return Err(bad("auth.username", "must not contain `:` (RFC 7617)"));
        }
        let password = fields.text("auth.password", "password", MAX_SECRET_BYTES)?;
        Ok(BasicAuth { username, password })
    }

    /// The `Authorization` value: `Basic base64(username:password)`.
    pub fn header_value(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    }
}

impl ClientCredentials {
    fn read(fields: &mut Fields) -> Result<ClientCredentials, InvalidSetting> {
        let token_url = fields.text("auth.token_url", "token_url", crate::Limits::MAX_URL_BYTES)?;
        crate::validation::check_url(&token_url).map_err(|e| {
            let message = e.to_string();
            let message = message.strip_prefix("url: ").unwrap_or(&message).to_owned();
            bad("auth.token_url", message)
        })?;
        let client_id = fields.text("auth.client_id", "client_id", MAX_FIELD_BYTES)?;
        let client_secret = fields.text("auth.client_secret", "client_secret", MAX_SECRET_BYTES)?;
        let scope = fields.optional_text("auth.scope", "scope", MAX_FIELD_BYTES)?;
        let audience = fields.optional_text("auth.audience", "audience", MAX_FIELD_BYTES)?;
        let auth_method = match fields
            .optional_text("auth.auth_method", "auth_method", MAX_FIELD_BYTES)?
            .as_deref()
        {
            None | Some("client_secret_basic") => ClientAuthMethod::ClientSecretBasic,
            Some("client_secret_post") => ClientAuthMethod::ClientSecretPost,
            Some(_) => {
                return Err(bad(
                    "auth.auth_method",
                    "must be client_secret_basic or client_secret_post",
                ));
            }
        };
        Ok(ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scope,
            audience,
            auth_method,
        })
    }

    /// The token request: its headers (besides the transport's) and its
    /// `application/x-www-form-urlencoded` body (RFC 6749 §4.4.2).
    pub fn token_request(&self) -> (Vec<(&'static str, String)>, String) {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(scope) = &self.scope {
            form.append_pair("scope", scope);
        }
        if let Some(audience) = &self.audience {
            form.append_pair("audience", audience);
        }
        let mut headers = vec![
            (
                "content-type",
                "application/x-www-form-urlencoded".to_owned(),
            ),
            ("accept", "application/json".to_owned()),
        ];
        match self.auth_method {
            ClientAuthMethod::ClientSecretBasic => {
                // RFC 6749 §2.3.1: each form-encoded before the Basic scheme.
                let encode = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                let pair = format!(
                    "{}:{}",
                    encode(&self.client_id),
                    encode(&self.client_secret)
                );
                let value = base64::engine::general_purpose::STANDARD.encode(pair);
                headers.push(("authorization", format!("Basic {value}")));
            }
            ClientAuthMethod::ClientSecretPost => {
                form.append_pair("client_id", &self.client_id);
                form.append_pair("client_secret", &self.client_secret);
            }
        }
        (headers, form.finish())
    }
}

/// A token endpoint's successful answer (RFC 6749 §5.1).
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// The token, sent as `Authorization: Bearer …`.
    pub token: String,
    /// How long it may be used for; `None`: [`TOKEN_DEFAULT_LIFETIME`].
    pub expires_in: Option<Duration>,
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

impl AccessToken {
    /// Reads a `200` answer's body; `None` when it holds no usable token
    /// (the message says what was wrong, never the body).
    pub fn parse(body: &[u8]) -> Result<AccessToken, &'static str> {
        let value: Value =
            serde_json::from_slice(body).map_err(|_| "the answer is not a JSON object")?;
        let token = value
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .ok_or("the answer has no usable access_token")?;
        let expires_in = match value.get("expires_in") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => n.as_u64().map(Duration::from_secs),
            // Some providers send it as a string.
            Some(Value::String(s)) => s.parse().ok().map(Duration::from_secs),
            Some(_) => None,
        };
        Ok(AccessToken {
            token: token.to_owned(),
            expires_in,
        })
    }

    /// How long it may be kept: until [`TOKEN_MARGIN`] before it runs out
    /// (zero: use it for this call only).
    pub fn keep_for(&self) -> Duration {
        self.expires_in
            .unwrap_or(TOKEN_DEFAULT_LIFETIME)
            .saturating_sub(TOKEN_MARGIN)
    }
}

impl JwtAuth {
    fn read(fields: &mut Fields) -> Result<JwtAuth, InvalidSetting> {
        let audience = fields.text("auth.audience", "audience", MAX_FIELD_BYTES)?;
        let lifetime_s = match fields.0.remove("lifetime_s") {
            None | Some(Value::Null) => DEFAULT_JWT_LIFETIME_S,
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| JWT_LIFETIME_S.contains(n))
                .ok_or_else(|| bad("auth.lifetime_s", "must be an integer from 60 to 3600"))?,
            Some(_) => return Err(bad("auth.lifetime_s", "must be an integer from 60 to 3600")),
        };
        Ok(JwtAuth {
            audience,
            lifetime_s,
        })
    }

    /// The claims of one call's JWT, as JSON text: `iss`, `sub` (the task's
    /// tenant, or `taskcenter`), `aud`, `iat` (`now_s`), `exp`, and `jti`
    /// (the task id and the attempt, so each try's token is unique).
    pub fn claims(&self, call: &JwtCall<'_>) -> String {
        json!({
            "iss": call.issuer,
            "sub": call.tenant.unwrap_or("taskcenter"),
            "aud": self.audience,
            "iat": call.now_s,
            "exp": call.now_s + i64::from(self.lifetime_s),
            "jti": format!("{}:{}", call.task_id, call.attempt),
        })
        .to_string()
    }
}

/// What a JWT's claims need beside the destination's settings.
#[derive(Debug, Clone, Copy)]
pub struct JwtCall<'a> {
    /// The server's `--issuer`.
    pub issuer: &'a str,
    /// The task's tenant.
    pub tenant: Option<&'a str>,
    /// The task's id.
    pub task_id: &'a str,
    /// The try's number.
    pub attempt: u32,
    /// The signing time, Unix seconds.
    pub now_s: i64,
}

#[cfg(test)]
mod tests;
