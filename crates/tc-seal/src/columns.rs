//! Where the SQL adapters keep secrets: the one list of columns both
//! schemas seal (SQLite and PostgreSQL name their tables and columns alike),
//! and how a secret that no key opens is named at start.

use crate::SealError;

/// Every column that holds a secret: (table, key column, secret column).
/// A new kind of secret is one more row here, and its column's write and
/// read through the adapter's `seal` and `open`.
pub const SECRET_COLUMNS: &[(&str, &str, &str)] = &[
    ("destinations", "destination", "headers"),
    ("destinations", "destination", "signing_secrets"),
    ("destinations", "destination", "client_key"),
    ("destinations", "destination", "auth"),
    ("tenants", "name", "signing_secrets"),
    ("server_keys", "name", "value"),
    ("subscriptions", "id", "signing_secrets"),
];

/// Why the start stops on a secret of `table`'s row `name` in `column`:
/// its owner named (`destination api.example.com:443: headers: …`), never
/// the secret.
pub fn refusal(table: &str, name: &str, column: &str, e: &SealError) -> String {
    let what = match table {
        "tenants" => "tenant",
        "server_keys" => "server key",
        "subscriptions" => "subscription",
        _ => "destination",
    };
    format!("{what} {name}: {column}: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_owner_and_never_the_value() {
        let e = SealError::UnknownKey("0a1b2c3d".into());
        for (table, name, expected) in [
            (
                "destinations",
                "api.example.com:443",
                "destination api.example.com:443: ",
            ),
            ("tenants", "acme", "tenant acme: "),
            ("server_keys", "jwt_key", "server key jwt_key: "),
        ] {
            let text = refusal(table, name, "c", &e);
            assert!(text.starts_with(expected), "{text}");
            assert!(text.ends_with(&e.to_string()), "{text}");
        }
    }
}
