//! The attempts file (`tidegate load --attempt-log FILE`): one CSV line per attempt, for
//! what the report's totals cannot say: whom a service shed and when (the caller key, the
//! tier, the `tidegate-shed` reason, the wall-clock second), and how many attempts each
//! request took. Several loads' files, their times on one clock, say whether the proxies they
//! sent to shed the same callers in the same second (`docs/experiments/chain-lab.md`).
//!
//! Columns: `sent_unix_s` (when the attempt left, seconds since the Unix epoch, to the
//! microsecond), `intended_s` (the request's intended send time from the start of the run),
//! `attempt` (1 for the first), `tier` and `key` (empty without), `outcome` (`ok`, `shed`,
//! `error`, `timed_out`), `status` (empty without a response), `shed` (the response's
//! `tidegate-shed` value, empty without), `latency_ms` (from the attempt's send to its end).

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderValue;
use tidegate_core::Nanos;

use super::LoadError;
use super::http::Outcome;

const COLUMNS: &str = "sent_unix_s,intended_s,attempt,tier,key,outcome,status,shed,latency_ms";

/// One attempt, as logged.
#[derive(Debug)]
pub(crate) struct Attempt<'a> {
    pub(crate) sent: SystemTime,
    pub(crate) intended: Nanos,
    pub(crate) number: u32,
    pub(crate) tier: Option<u8>,
    pub(crate) key: Option<u32>,
    pub(crate) outcome: Outcome,
    pub(crate) shed: Option<&'a HeaderValue>,
    pub(crate) took: Duration,
}

impl Attempt<'_> {
    fn line(&self) -> String {
        let sent = self
            .sent
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let opt = |v: Option<String>| v.unwrap_or_default();
        let (outcome, status) = match self.outcome {
            Outcome::Ok { status } => ("ok", Some(status)),
            Outcome::Shed { status, .. } => ("shed", Some(status)),
            Outcome::Failed { status, .. } => ("error", status),
            Outcome::TimedOut => ("timed_out", None),
        };
        // The reason is the service's text: kept only when it cannot break the CSV.
        let shed = self
            .shed
            .and_then(|v| v.to_str().ok())
            .filter(|v| {
                v.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b',' && b != b'"')
            })
            .unwrap_or_default();
        format!(
            "{sent:.6},{:.6},{},{},{},{outcome},{},{shed},{:.3}\n",
            self.intended.as_secs_f64(),
            self.number,
            opt(self.tier.map(|t| t.to_string())),
            opt(self.key.map(|k| k.to_string())),
            opt(status.map(|s| s.to_string())),
            self.took.as_secs_f64() * 1e3,
        )
    }
}

#[derive(Debug)]
struct Out {
    writer: BufWriter<File>,
    /// The first write that failed: the file is incomplete, and the run says so at its end.
    error: Option<std::io::Error>,
}

/// The open attempts file.
#[derive(Debug)]
pub(crate) struct AttemptLog {
    path: PathBuf,
    out: Mutex<Out>,
}

impl AttemptLog {
    /// Creates (or truncates) the file at `path` and writes its header line.
    pub(crate) fn create(path: &Path) -> Result<AttemptLog, LoadError> {
        let error = |source| LoadError::AttemptLog {
            path: path.to_owned(),
            source,
        };
        let mut writer = BufWriter::with_capacity(1 << 16, File::create(path).map_err(error)?);
        writeln!(writer, "{COLUMNS}").map_err(error)?;
        Ok(AttemptLog {
            path: path.to_owned(),
            out: Mutex::new(Out {
                writer,
                error: None,
            }),
        })
    }

    pub(crate) fn write(&self, attempt: &Attempt<'_>) {
        let line = attempt.line();
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        if out.error.is_none()
            && let Err(e) = out.writer.write_all(line.as_bytes())
        {
            out.error = Some(e);
        }
    }

    /// Writes what is buffered; the first error of the run, if any.
    pub(crate) fn finish(&self) -> Result<(), LoadError> {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let flushed = out.writer.flush();
        match out.error.take().map_or(flushed, Err) {
            Ok(()) => Ok(()),
            Err(source) => Err(LoadError::AttemptLog {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_every_column_and_no_stray_comma() {
        let reason = HeaderValue::from_static("cutoff");
        let attempt = Attempt {
            sent: UNIX_EPOCH + Duration::from_millis(1_500),
            intended: Nanos::from_millis(250),
            number: 2,
            tier: Some(3),
            key: Some(17),
            outcome: Outcome::Shed {
                status: 503,
                by_tidegate: true,
            },
            shed: Some(&reason),
            took: Duration::from_micros(1_250),
        };
        assert_eq!(
            attempt.line(),
            "1.500000,0.250000,2,3,17,shed,503,cutoff,1.250\n"
        );
        let odd = HeaderValue::from_static("a,b");
        let attempt = Attempt {
            shed: Some(&odd),
            tier: None,
            key: None,
            outcome: Outcome::TimedOut,
            ..attempt
        };
        let line = attempt.line();
        assert_eq!(line, "1.500000,0.250000,2,,,timed_out,,,1.250\n");
        assert_eq!(line.split(',').count(), COLUMNS.split(',').count());
    }
}
