//! What a task asks for when it gives `callback_url` and `callback_on`:
//! [`Callback`], a valid url and the ends it is for ([`CallbackOn`]). Part
//! of a submission ([`crate::NewTask`]); what an end then creates is the
//! parent module's.

use std::fmt;

use crate::State;
use crate::validation::{ValidationError, check_url};

/// The terminal states a callback is made for: a non-empty subset of
/// success, failed and canceled (success and failed by default).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallbackOn {
    success: bool,
    failed: bool,
    canceled: bool,
}

impl Default for CallbackOn {
    fn default() -> Self {
        CallbackOn {
            success: true,
            failed: true,
            canceled: false,
        }
    }
}

impl fmt::Debug for CallbackOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl CallbackOn {
    /// The states a callback can be asked for, as the API spells them.
    pub const NAMES: [&'static str; 3] = ["success", "failed", "canceled"];

    /// The set of `names`: each one of [`CallbackOn::NAMES`], none twice,
    /// at least one. A refusal names `callback_on`.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<CallbackOn, String> {
        let mut on = CallbackOn {
            success: false,
            failed: false,
            canceled: false,
        };
        let mut any = false;
        for name in names {
            let slot = match name {
                "success" => &mut on.success,
                "failed" => &mut on.failed,
                "canceled" => &mut on.canceled,
                other => {
                    return Err(format!(
                        "must hold only \"success\", \"failed\" or \"canceled\", got {other:?}"
                    ));
                }
            };
            if *slot {
                return Err(format!("{name:?} is given twice"));
            }
            *slot = true;
            any = true;
        }
        if !any {
            return Err("must name at least one state".to_owned());
        }
        Ok(on)
    }

    /// Whether a task that ends in `state` gets a callback.
    pub fn includes(self, state: State) -> bool {
        match state {
            State::Success => self.success,
            State::Failed => self.failed,
            State::Canceled => self.canceled,
            State::Pending | State::Running => false,
        }
    }

    /// The states, in the order of [`CallbackOn::NAMES`].
    pub fn names(self) -> Vec<&'static str> {
        [self.success, self.failed, self.canceled]
            .into_iter()
            .zip(CallbackOn::NAMES)
            .filter_map(|(on, name)| on.then_some(name))
            .collect()
    }

    /// The text the stores keep: the names joined by `,`.
    pub fn to_stored(self) -> String {
        self.names().join(",")
    }

    /// The set [`CallbackOn::to_stored`] wrote; `None` for any other text.
    pub fn from_stored(text: &str) -> Option<CallbackOn> {
        CallbackOn::parse(text.split(',')).ok()
    }
}

/// A task's callback: where to POST its view, and on which ends. One that
/// exists has a valid url (the same rules as a task's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    url: String,
    on: CallbackOn,
}

impl Callback {
    /// A callback to `url` on `on`; the url is checked as a task's is, the
    /// refusal naming `callback_url`.
    pub fn new(url: String, on: CallbackOn) -> Result<Callback, ValidationError> {
        check_url(&url).map_err(|e| match e {
            ValidationError::Url(message) => ValidationError::CallbackUrl(message),
            other => other,
        })?;
        Ok(Callback { url, on })
    }

    /// Where the callback POSTs.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The ends it is made for.
    pub fn on(&self) -> CallbackOn {
        self.on
    }
}
