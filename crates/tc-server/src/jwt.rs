//! The server's JWT keys at start: with `--issuer`, the keys of
//! `--jwt-key-file` (PKCS#8 PEM, the first signs, all published) or, with
//! none, the one key kept in the store (`Tenants::server_key`: made by the
//! first node that starts, shared by every node of a PostgreSQL store).
//! Without `--issuer` no key is read or made, and a destination's `jwt`
//! auth is refused.

use std::path::PathBuf;
use std::sync::Arc;

use tc_downstream::JwtKeys;
use tc_model::store::{JWT_KEY, StoreError, TaskStore};
use tc_worker::JwtSigner;

/// What the flags say about JWTs.
#[derive(Debug, Clone, Default)]
pub(crate) struct JwtSetup {
    /// `--issuer`: the `iss` of every JWT.
    pub(crate) issuer: Option<String>,
    /// `--jwt-key-file`, in order.
    pub(crate) key_files: Vec<PathBuf>,
}

/// Why the keys could not be had. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JwtSetupError {
    /// A `--jwt-key-file` could not be read.
    #[error("cannot read the JWT key file {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key is not a P-256 PKCS#8 PEM.
    #[error("--jwt-key-file: {0}")]
    Key(#[from] tc_downstream::JwtKeyError),
    /// The store could not keep or give the key.
    #[error("cannot read or keep the JWT key in the store: {0}")]
    Store(StoreError),
}

/// The keys in effect: the signer the worker uses and the JWK Set the API
/// serves; `None` without `--issuer`.
pub(crate) async fn load<S: TaskStore>(
    setup: &JwtSetup,
    store: &S,
) -> Result<Option<(JwtSigner, String)>, JwtSetupError> {
    let Some(issuer) = setup.issuer.clone() else {
        return Ok(None);
    };
    let pems = if setup.key_files.is_empty() {
        let candidate = JwtKeys::generate_pem()?;
        let kept = store
            .server_key(JWT_KEY.to_owned(), candidate)
            .await
            .map_err(JwtSetupError::Store)?;
        vec![kept]
    } else {
        let mut pems = Vec::with_capacity(setup.key_files.len());
        for path in &setup.key_files {
            let pem = std::fs::read_to_string(path).map_err(|source| JwtSetupError::Read {
                path: path.clone(),
                source,
            })?;
            pems.push(pem);
        }
        pems
    };
    let keys = JwtKeys::from_pems(&pems)?;
    let jwks = keys.jwks();
    tracing::info!(kid = keys.kid(), issuer, "jwt_keys");
    Ok(Some((
        JwtSigner {
            issuer,
            keys: Arc::new(keys),
        },
        jwks,
    )))
}

#[cfg(test)]
mod tests {
    use tc_store::{SqliteStore, StoreConfig};

    use super::*;

    fn kid_of(jwks: &str) -> String {
        let set: serde_json::Value = serde_json::from_str(jwks).unwrap();
        set["keys"][0]["kid"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn the_key_is_made_once_kept_in_the_store_or_read_from_files() {
        let store = SqliteStore::open_in_memory(StoreConfig::default())
            .await
            .unwrap();
        let none = load(&JwtSetup::default(), &store).await.unwrap();
        assert!(none.is_none(), "no --issuer: no key");
        let setup = JwtSetup {
            issuer: Some("https://t.example".into()),
            key_files: Vec::new(),
        };
        let (signer, first) = load(&setup, &store).await.unwrap().unwrap();
        assert_eq!(signer.issuer, "https://t.example");
        let (_, again) = load(&setup, &store).await.unwrap().unwrap();
        assert_eq!(kid_of(&first), kid_of(&again), "the stored key is kept");

        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..2)
            .map(|n| {
                let path = dir.path().join(format!("{n}.pem"));
                std::fs::write(&path, JwtKeys::generate_pem().unwrap()).unwrap();
                path
            })
            .collect();
        let files = JwtSetup {
            key_files: paths.clone(),
            ..setup.clone()
        };
        let (signer, jwks) = load(&files, &store).await.unwrap().unwrap();
        let set: serde_json::Value = serde_json::from_str(&jwks).unwrap();
        assert_eq!(set["keys"].as_array().unwrap().len(), 2);
        assert_eq!(signer.keys.kid(), kid_of(&jwks), "the first file signs");
        assert_ne!(kid_of(&jwks), kid_of(&first));

        std::fs::write(&paths[1], "not a key").unwrap();
        let refused = load(&files, &store).await.unwrap_err().to_string();
        assert!(refused.contains("JWT key 2"), "{refused}");
        store.close().await;
    }
}
