//! The JSON of what a call sends beyond its url and body: a task's `method`
//! and `headers`, a destination's `headers` and `signing_secrets`. Parsed
//! into tc-model's types (which hold the rules); shown with every
//! credential hidden: a view names a destination's headers and counts its
//! secrets, and shows a task's headers with the values of
//! [`tc_model::headers::SENSITIVE`] ones replaced.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;
use tc_model::signing::SigningSecrets;
use tc_model::{Headers, Method};

use crate::error::{ApiError, json_type};

/// `method`: absent is `POST`.
pub(crate) fn parse_method(value: Option<Value>) -> Result<Method, ApiError> {
    match value {
        None => Ok(Method::default()),
        Some(Value::String(text)) => text
            .parse()
            .map_err(|e: tc_model::UnknownMethod| ApiError::InvalidRequest(e.to_string())),
        Some(other) => Err(ApiError::InvalidRequest(format!(
            "method: must be one of POST, PUT, PATCH, DELETE, GET; got {}",
            json_type(&other)
        ))),
    }
}

/// An object's members in the order written, a name given twice kept
/// twice (a `Map` would keep the last one silently).
struct Members(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Members, D::Error> {
        struct Walk;
        impl<'de> Visitor<'de> for Walk {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Walk)
    }
}

/// `headers`: an object of name → string, or `null` (none); the rules are
/// [`Headers::parse`]'s. Every refusal names `headers.<name>` or `headers`.
pub(crate) fn parse_headers(raw: Option<&RawValue>) -> Result<Headers, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let Some(raw) = raw else {
        return Ok(Headers::default());
    };
    if raw.get() == "null" {
        return Ok(Headers::default());
    }
    let Members(members) = serde_json::from_str(raw.get()).map_err(|_| {
        let got = serde_json::from_str::<Value>(raw.get())
            .map(|v| json_type(&v))
            .unwrap_or("not JSON");
        invalid(format!(
            "headers: must be an object of header names to strings, or null; got {got}"
        ))
    })?;
    let mut pairs = Vec::with_capacity(members.len());
    for (name, value) in members {
        match value {
            Value::String(value) => pairs.push((name, value)),
            other => {
                return Err(invalid(format!(
                    "headers.{}: must be a string, got {}",
                    name.to_ascii_lowercase(),
                    json_type(&other)
                )));
            }
        }
    }
    Headers::parse(pairs).map_err(|e| invalid(e.to_string()))
}

/// `signing_secrets`: a list of 0 to 2 secrets, or `null` (none).
pub(crate) fn parse_signing_secrets(value: &Value) -> Result<SigningSecrets, ApiError> {
    let invalid = |message: String| ApiError::InvalidRequest(format!("signing_secrets: {message}"));
    let items = match value {
        Value::Null => return Ok(SigningSecrets::default()),
        Value::Array(items) => items,
        other => {
            return Err(invalid(format!(
                "must be a list of secrets or null, got {}",
                json_type(other)
            )));
        }
    };
    let texts = items
        .iter()
        .map(|item| item.as_str())
        .collect::<Option<Vec<&str>>>()
        .ok_or_else(|| invalid("every secret must be a string".into()))?;
    SigningSecrets::parse(&texts).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    /// Parses `json` as a `headers` field: `Ok(names)` or `Err(prefix)`
    /// of the message.
    fn check(json: &str, expected: Result<&[&str], &str>) {
        let got = parse_headers(Some(&raw(json)));
        match (got, expected) {
            (Ok(headers), Ok(names)) => {
                assert_eq!(headers.names().collect::<Vec<_>>(), names, "{json}");
            }
            (Err(ApiError::InvalidRequest(message)), Err(prefix)) => {
                assert!(message.starts_with(prefix), "{json}: {message}");
                assert!(
                    !message.contains("s3cr3t"),
                    "{json}: repeats a value: {message}"
                );
            }
            (got, expected) => panic!("{json}: expected {expected:?}, got {got:?}"),
        }
    }

    #[test]
    fn headers_parse_or_name_the_header() {
        check("null", Ok(&[]));
        check("{}", Ok(&[]));
        check(
            r#"{"X-Tenant":"acme","Authorization":"Bearer s3cr3t"}"#,
            Ok(&["authorization", "x-tenant"]),
        );
        check(r#"{"X-A":"1","x-a":"2"}"#, Err("headers.x-a: given twice"));
        check(r#"{"x-a":"1","x-a":"1"}"#, Err("headers.x-a: given twice"));
        check(
            r#"{"X-A":1}"#,
            Err("headers.x-a: must be a string, got a number"),
        );
        check(
            r#"{"x-a":null}"#,
            Err("headers.x-a: must be a string, got null"),
        );
        check(r#"{"Host":"s3cr3t"}"#, Err("headers.host: "));
        check(
            r#"{"x-a":"s3cr3t\r\nx-b: 1"}"#,
            Err("headers.x-a: the value"),
        );
        check(r#"{"bad name":"v"}"#, Err("headers: name"));
        check(r#"["x-a","v"]"#, Err("headers: must be an object"));
        check(r#""x-a: v""#, Err("headers: must be an object"));
        assert!(matches!(parse_headers(None), Ok(h) if h.is_empty()));
    }

    #[test]
    fn methods_parse_or_name_the_field() {
        assert_eq!(parse_method(None).ok(), Some(Method::Post));
        assert_eq!(
            parse_method(Some(Value::from("PATCH"))).ok(),
            Some(Method::Patch)
        );
        for bad in [
            Value::from("patch"),
            Value::from("HEAD"),
            Value::from(1),
            Value::Null,
        ] {
            match parse_method(Some(bad.clone())) {
                Err(ApiError::InvalidRequest(m)) => assert!(m.starts_with("method: "), "{m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn secrets_parse_or_name_the_field_without_repeating_one() {
        let good = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        let ok = |v: Value| parse_signing_secrets(&v).map(|s| s.len()).ok();
        assert_eq!(ok(Value::Null), Some(0));
        assert_eq!(ok(serde_json::json!([])), Some(0));
        assert_eq!(ok(serde_json::json!([good, good])), Some(2));
        for bad in [
            serde_json::json!([good, good, good]),
            serde_json::json!(["whsec_s3cr3t"]),
            serde_json::json!([1]),
            serde_json::json!(good),
            serde_json::json!({}),
        ] {
            match parse_signing_secrets(&bad) {
                Err(ApiError::InvalidRequest(m)) => {
                    assert!(m.starts_with("signing_secrets: "), "{m}");
                    assert!(!m.contains("s3cr3t") && !m.contains("whsec_C2"), "{m}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
