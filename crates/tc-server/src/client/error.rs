//! What can go wrong in a client command, and the exit code each says.

use std::process::ExitCode;

/// A client command's failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// The command line asks for something that cannot be done (exit 2,
    /// as clap's own usage errors).
    #[error("{0}")]
    Usage(String),
    /// The server answered with an error (exit 1).
    #[error("the server refused ({status} {code}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The API's error code (`not_found`, …).
        code: String,
        /// The API's message.
        message: String,
    },
    /// The server answered something the API never answers (exit 1).
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    /// No answer: connection refused, timed out, broken (exit 3).
    #[error("cannot reach the server at {server}: {reason}")]
    Unreachable {
        /// The `--server` URL.
        server: String,
        /// Why, from the transport.
        reason: String,
    },
    /// The command did part of its work and says where to go on from
    /// (exit 1).
    #[error("{0}")]
    Incomplete(String),
    /// Something on this machine failed: no entropy for a key, stdin
    /// unreadable (exit 1).
    #[error("{0}")]
    Local(String),
    /// Writing to stdout failed (exit 1).
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// Whoever read stdout stopped reading (`| head`): the command stops
    /// quietly.
    #[error("stdout was closed")]
    OutputClosed,
}

impl ClientError {
    /// The process's exit code: 0 ok, 1 refused, 2 usage, 3 unreachable.
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            ClientError::Usage(_) => ExitCode::from(2),
            ClientError::Refused { .. }
            | ClientError::Protocol(_)
            | ClientError::Incomplete(_)
            | ClientError::Local(_)
            | ClientError::Output(_) => ExitCode::from(1),
            ClientError::Unreachable { .. } => ExitCode::from(3),
            ClientError::OutputClosed => ExitCode::SUCCESS,
        }
    }
}

impl From<std::io::Error> for ClientError {
    fn from(error: std::io::Error) -> ClientError {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            ClientError::OutputClosed
        } else {
            ClientError::Output(error)
        }
    }
}
