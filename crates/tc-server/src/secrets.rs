//! Secrets sealed at rest, the server's part: the keys
//! `--secret-key-file` names (read at start; the first seals, every one
//! opens), the start's pass that the store runs with them (plain and
//! older-key secrets sealed again; a secret no key opens stops the start,
//! naming its destination), the warning of a server without a key that
//! holds secrets, and `tc-server secret-key new`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tc_seal::{SealReport, Sealer, SecretKey};

use crate::store::AnyStore;

/// Why the keys or the stored secrets stop the start. No variant carries
/// a key or a secret.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretsError {
    /// A key file could not be read.
    #[error("cannot read the secret key file {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file does not hold the base64 of 32 bytes.
    #[error("the secret key file {} is unusable: {source} (make one with `tc-server secret-key new`)", path.display())]
    Invalid {
        /// The file named.
        path: PathBuf,
        /// What is wrong with it.
        source: tc_seal::SealError,
    },
    /// A stored secret does not open with the keys given (the store names
    /// its destination or tenant): every node needs the same keys.
    #[error(
        "a stored secret cannot be opened: {0}; start with the key that sealed it \
         (--secret-key-file, every node the same keys)"
    )]
    Stored(tc_model::store::StoreError),
}

fn read_key(path: &Path) -> Result<SecretKey, SecretsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretsError::Read {
        path: path.to_owned(),
        source,
    })?;
    SecretKey::from_base64(&text).map_err(|source| SecretsError::Invalid {
        path: path.to_owned(),
        source,
    })
}

/// The keys of `paths`, in order (none: secrets are kept as they are).
pub(crate) fn sealer(paths: &[PathBuf]) -> Result<Sealer, SecretsError> {
    let keys = paths
        .iter()
        .map(|path| read_key(path))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Sealer::new(keys))
}

/// Runs the store's start pass with `sealer` and says what it did: the
/// secrets sealed again, or a warning when the server has no key and the
/// store holds secrets in plain text.
pub(crate) async fn seal_store(store: &mut AnyStore, sealer: Sealer) -> Result<(), SecretsError> {
    let seals = sealer.seals();
    let report: SealReport = match store {
        AnyStore::Sqlite(s) => s.seal_with(sealer).await,
        AnyStore::Postgres(s) => s.seal_with(sealer).await,
    }
    .map_err(SecretsError::Stored)?;
    if report.resealed > 0 {
        tracing::info!(resealed = report.resealed, "secrets_sealed");
    }
    if !seals && report.plain > 0 {
        tracing::warn!(
            secrets = report.plain,
            hint = "the store holds secrets in plain text (its file and every backup carry \
                    them); start with --secret-key-file to seal them",
            "secrets_not_sealed"
        );
    }
    Ok(())
}

/// `tc-server secret-key new`: prints a fresh key (the base64 of 32 random
/// bytes) for a key file.
#[allow(clippy::print_stdout)]
pub(crate) fn run_new_key() -> ExitCode {
    match SecretKey::generate() {
        Ok(key) => {
            println!("{key}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tc-server: cannot make a key: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_are_read_in_order_and_bad_ones_named_without_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let good = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("{}\n", SecretKey::generate().unwrap())).unwrap();
            path
        };
        let (a, b) = (good("a.key"), good("b.key"));
        assert!(sealer(&[a.clone(), b]).unwrap().seals());
        assert!(!sealer(&[]).unwrap().seals());
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "hunter2-not-a-key").unwrap();
        let err = sealer(&[a, bad.clone()]).unwrap_err().to_string();
        assert!(err.contains(&bad.display().to_string()), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let missing = dir.path().join("missing.key");
        assert!(matches!(sealer(&[missing]), Err(SecretsError::Read { .. })));
    }
}
