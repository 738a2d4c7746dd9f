//! Where a command's output goes: stdout, as text for people or as the
//! API's JSON (one object per line); notes for people go to stderr, so that
//! stdout stays what a script reads.

use std::io::{IsTerminal, Write};
use std::time::SystemTime;

use serde_json::Value;

use super::error::ClientError;
use super::format;

/// A command's output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    /// Print the API's JSON.
    pub(crate) json: bool,
    /// Colour the text.
    pub(crate) colour: bool,
    /// Stdout is a terminal (a person reads it, and escape sequences in it
    /// would drive their terminal).
    pub(crate) terminal: bool,
    /// The time relative times are counted from (read once, so one table
    /// has one "now").
    pub(crate) now: SystemTime,
}

impl Out {
    /// Output as the flags ask, coloured when stdout is a terminal.
    pub(crate) fn new(json: bool) -> Out {
        let no_color = std::env::var_os("NO_COLOR");
        let terminal = std::io::stdout().is_terminal();
        Out {
            json,
            colour: !json && format::wants_colour(terminal, no_color.as_deref()),
            terminal,
            now: SystemTime::now(),
        }
    }

    /// Writes `text` as it is.
    pub(crate) fn text(&self, text: &str) -> Result<(), ClientError> {
        self.bytes(text.as_bytes())
    }

    /// Writes bytes as they are, and flushes (output arrives as it is made:
    /// `task watch`, `task list --all`).
    pub(crate) fn bytes(&self, bytes: &[u8]) -> Result<(), ClientError> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(bytes)?;
        stdout.flush()?;
        Ok(())
    }

    /// Writes one JSON value on one line.
    pub(crate) fn json_line(&self, value: &Value) -> Result<(), ClientError> {
        self.text(&format!("{value}\n"))
    }

    /// `text` in `style`, if colours are on.
    pub(crate) fn paint(&self, text: &str, style: format::Style) -> String {
        format::paint(text, style, self.colour)
    }

    /// A task state, made safe to print and coloured if colours are on
    /// ([`format::paint_state`]).
    pub(crate) fn paint_state(&self, state: &str) -> String {
        format::paint_state(state, self.colour)
    }
}

/// A note for the person at the terminal, on stderr.
pub(crate) fn note(text: &str) {
    eprintln!("{text}");
}
