//! What a handler answers: a whole response or an [`ApiError`], and the JSON
//! response every resource builds its answer with.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;

use crate::error::ApiError;

/// A handler's answer; the router turns an error into its JSON response.
pub(crate) type Answer = Result<Response<Full<Bytes>>, ApiError>;

/// `value` as a JSON response with `status`.
pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Answer {
    let bytes =
        serde_json::to_vec(value).map_err(|e| ApiError::Internal(format!("encoding JSON: {e}")))?;
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// An empty `204 No Content`.
pub(crate) fn no_content() -> Answer {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}
