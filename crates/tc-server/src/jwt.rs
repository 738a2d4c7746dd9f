//! The server's JWT keys at start (issue 41): with `--issuer`, the keys of
//! `--jwt-key-file` (PKCS#8 PEM, the first signs, all published) or, with
//! none, the one key kept in the store (`TaskStore::server_key`: made by the
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
