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

/// The largest `max_in_flight` a destination or a flow key may be given.
pub const MAX_IN_FLIGHT_LIMIT: u32 = 10_000;

/// The largest token bucket a destination or a flow key may be given.
pub const BURST_LIMIT: u32 = 1_000_000;

/// Checks a change to the limits a destination and a flow key both take
/// (`None`: kept; `Some(None)`: cleared): a cap of 1 to
/// [`MAX_IN_FLIGHT_LIMIT`], a rate above 0, a bucket of 1 to
/// [`BURST_LIMIT`]. The refusal names the field.
pub fn check_limits(
    max_in_flight: Option<Option<u32>>,
    rate_per_s: Option<Option<f64>>,
    burst: Option<Option<u32>>,
) -> Result<(), InvalidSetting> {
    if let Some(Some(cap)) = max_in_flight
        && !(1..=MAX_IN_FLIGHT_LIMIT).contains(&cap)
    {
        return Err(InvalidSetting {
            field: "max_in_flight",
            message: format!("must be between 1 and {MAX_IN_FLIGHT_LIMIT}, or null"),
        });
    }
    if let Some(Some(rate)) = rate_per_s
        && !(rate.is_finite() && rate > 0.0)
    {
        return Err(InvalidSetting {
            field: "rate_per_s",
            message: "must be a number above 0, or null".into(),
        });
    }
    if let Some(Some(burst)) = burst
        && !(1..=BURST_LIMIT).contains(&burst)
    {
        return Err(InvalidSetting {
            field: "burst",
            message: format!("must be between 1 and {BURST_LIMIT}, or null"),
        });
    }
    Ok(())
}
