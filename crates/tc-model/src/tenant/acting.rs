//! The credential a write is made with when it is a tenant's key, carried
//! into the store so that the check that the key and its tenant still
//! exist runs inside the write's own transaction. The caller is resolved
//! before a request's body is read, and a body may take its full read
//! timeout: a key revoked or a tenant deleted meanwhile must not still
//! write (a task of a tenant that no longer exists, handed to whoever
//! takes the name next). Each adapter serializes the check with
//! [`crate::store::Tenants::revoke_api_key`] and
//! [`crate::store::Tenants::delete_tenant`] (one writer, a lock, or a
//! mutex), so exactly one of a revoke and a concurrent write wins.

/// A tenant's key a write is made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acting {
    /// The key's tenant.
    pub tenant: String,
    /// The key's id (not its secret).
    pub key_id: String,
}

impl Acting {
    /// The write made with `key_id` of `tenant`.
    pub fn new(tenant: impl Into<String>, key_id: impl Into<String>) -> Acting {
        Acting {
            tenant: tenant.into(),
            key_id: key_id.into(),
        }
    }
}
