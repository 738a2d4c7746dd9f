//! Log lines: one JSON object per line (the event name in `message`, its
//! fields at the top level, plus `timestamp`, `level` and `target`), or
//! human-readable text. `RUST_LOG` overrides the default filter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::cli::LogFormat;

/// The server's logs: on stdout, `info` and up by default.
pub(crate) fn init_serve(format: LogFormat) {
    let ansi = std::io::stdout().is_terminal();
    init(format, "info", std::io::stdout, ansi);
}

/// The demo's logs: its walk-through owns stdout, so only warnings and
/// errors, as text on stderr.
pub(crate) fn init_demo() {
    let ansi = std::io::stderr().is_terminal();
    init(LogFormat::Text, "warn", std::io::stderr, ansi);
}

fn init<W>(format: LogFormat, default_filter: &str, writer: W, ansi: bool)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    // Only fails if a subscriber is already set, which the binary never does.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
    };
}
