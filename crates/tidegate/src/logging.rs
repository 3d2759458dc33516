//! The proxy's log: `tracing` events on stderr, as text for a person or JSON lines for a log
//! shipper, from the level asked for up.

use clap::{Args, ValueEnum};
use tracing::level_filters::LevelFilter;

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// The least severe events logged: error, warn, info (startup, shutdown, each upstream
    /// ejected or recovered) or debug. Nothing is ever logged per request.
    #[arg(long, value_name = "LEVEL", default_value = "info", value_parser = parse_level)]
    log_level: LevelFilter,
    /// text (one readable line per event) or json (one JSON object per line, with the
    /// event's fields: upstream, error, failures, ejected_for_ms, ...).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Format::Text)]
    log_format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

fn parse_level(s: &str) -> Result<LevelFilter, String> {
    match s.to_ascii_lowercase().as_str() {
        "error" => Ok(LevelFilter::ERROR),
        "warn" => Ok(LevelFilter::WARN),
        "info" => Ok(LevelFilter::INFO),
        "debug" => Ok(LevelFilter::DEBUG),
        "trace" => Ok(LevelFilter::TRACE),
        _ => Err("expected error, warn, info, debug or trace".to_owned()),
    }
}

impl LogArgs {
    /// Sends this process's events to stderr from now on.
    pub(crate) fn init(&self) {
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(self.log_level);
        // Another subscriber already set (none is, in the binary) keeps its place.
        let _ = match self.log_format {
            Format::Text => builder
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .try_init(),
            Format::Json => builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .try_init(),
        };
    }
}
