//! A refused setting ([`InvalidSetting`]): what a destination's and a
//! tenant's settings answer when a value is out of its range, naming the
//! field as the API spells it. Its own module, below both, so that neither
//! imports the other for it.

/// Why a setting (a destination's, [`crate::destination::DestinationUpdate`],
/// or a tenant's, [`crate::tenant::TenantUpdate`]) was refused; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSetting {
    /// The field's name, as the API spells it.
    pub field: &'static str,
    /// What is wrong with its value.
    pub message: String,
}
