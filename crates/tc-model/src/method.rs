//! The HTTP method a task's call uses: one of five, `POST` by default.

use std::fmt;
use std::str::FromStr;

/// The method of a task's downstream call. A `GET` sends no body, so a
/// `GET` task has none ([`crate::NewTask::with_method`] refuses one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Method {
    /// `GET`: no body.
    Get,
    /// `POST`, the default.
    #[default]
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// Every method, in the order the API lists them.
    pub const ALL: [Method; 5] = [
        Method::Post,
        Method::Put,
        Method::Patch,
        Method::Delete,
        Method::Get,
    ];

    /// The method as sent, stored and shown: upper case.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }

    /// Whether a task with no `json` of its own sends `{}` (as a POST
    /// always has), or nothing: a `GET` never has a body, and a `DELETE`
    /// without one is the usual call.
    pub fn has_default_body(self) -> bool {
        matches!(self, Method::Post | Method::Put | Method::Patch)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names none of the five methods (they are upper case, as
/// HTTP methods are case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("method: must be one of POST, PUT, PATCH, DELETE, GET; got {0:?}")]
pub struct UnknownMethod(pub String);

impl FromStr for Method {
    type Err = UnknownMethod;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMethod(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_round_trip_by_their_upper_case_names_only() {
        for method in Method::ALL {
            assert_eq!(method.as_str().parse::<Method>(), Ok(method));
            assert_eq!(method.to_string(), method.as_str());
        }
        for bad in ["post", "Put", "HEAD", "OPTIONS", "", " POST"] {
            assert!(bad.parse::<Method>().is_err(), "{bad:?}");
        }
        assert_eq!(Method::default(), Method::Post);
    }
}
