//! Where a listing continues ([`Cursor`]): opaque to callers, an
//! adapter's position underneath.

use std::fmt;
use std::str::FromStr;

/// Where a listing continues: opaque to callers, stable across inserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor(i64);

impl Cursor {
    /// A cursor from an adapter's own position value.
    pub fn from_position(position: i64) -> Cursor {
        Cursor(position)
    }

    /// The adapter's position value.
    pub fn position(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A string that is not a cursor a store handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a listing cursor: {0:?}")]
pub struct BadCursor(pub String);

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<i64>() {
            Ok(n) if n >= 0 && n.to_string() == s => Ok(Cursor(n)),
            _ => Err(BadCursor(s.to_owned())),
        }
    }
}
