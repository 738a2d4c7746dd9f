//! The two public documents of the server's JWT keys: the JWK
//! Set at `/.well-known/jwks.json` and the OpenID discovery document at
//! `/.well-known/openid-configuration` (`issuer`, `jwks_uri`), served
//! without a credential so that a receiver verifies the JWTs a
//! destination's `auth` carries with any standard library. Without
//! `--issuer` neither exists.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::json;

use crate::config::HttpConfig;
use crate::error::ApiError;
use crate::reply::Answer;

/// The path of the JWK Set, under the issuer.
pub(crate) const JWKS_PATH: &str = "/.well-known/jwks.json";

fn not_configured() -> ApiError {
    ApiError::NotFound("this server signs no JWTs: it has no --issuer".into())
}

fn document(text: String) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // Receivers cache the keys; a new key is published before it signs.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    Ok(response)
}

/// `GET /.well-known/jwks.json`.
pub(crate) fn jwks(config: &HttpConfig) -> Answer {
    match (&config.issuer, &config.jwks) {
        (Some(_), Some(jwks)) => document(jwks.clone()),
        _ => Err(not_configured()),
    }
}

/// `GET /.well-known/openid-configuration`.
pub(crate) fn openid_configuration(config: &HttpConfig) -> Answer {
    let (Some(issuer), Some(_)) = (&config.issuer, &config.jwks) else {
        return Err(not_configured());
    };
    let jwks_uri = format!("{}{JWKS_PATH}", issuer.trim_end_matches('/'));
    document(
        json!({
            "issuer": issuer,
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    async fn body(answer: Answer) -> Result<serde_json::Value, u16> {
        match answer {
            Ok(response) => {
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                Ok(serde_json::from_slice(&bytes).unwrap())
            }
            Err(e) => Err(e.status().as_u16()),
        }
    }

    #[tokio::test]
    async fn documents_exist_only_with_an_issuer() {
        let none = HttpConfig::default();
        assert_eq!(body(jwks(&none)).await, Err(404));
        assert_eq!(body(openid_configuration(&none)).await, Err(404));
        let config = HttpConfig {
            issuer: Some("https://tc.example/".into()),
            jwks: Some(r#"{"keys":[]}"#.into()),
            ..HttpConfig::default()
        };
        assert_eq!(body(jwks(&config)).await, Ok(json!({"keys": []})));
        let discovery = body(openid_configuration(&config)).await.unwrap();
        assert_eq!(discovery["issuer"], "https://tc.example/");
        assert_eq!(
            discovery["jwks_uri"],
            "https://tc.example/.well-known/jwks.json"
        );
    }
}
