//! Access log lines: nginx's `combined` format extended with the request's timings, and
//! Envoy's default format.
//!
//! **nginx**, the format `tidegate` (`docs/replay.md`):
//!
//! ```text
//! log_format tidegate '$remote_addr - $remote_user [$time_local] "$request" $status '
//!                     '$body_bytes_sent "$http_referer" "$http_user_agent" '
//!                     '$request_time $upstream_response_time $msec';
//! ```
//!
//! `$msec` (the end of the request, to the millisecond) may be left out: the line is then
//! `combined` with the two timings, and the end is `$time_local`, which nginx writes to the
//! second (the request ended within that second: its middle is taken). `$request_time` is
//! the whole request, first byte read to last byte sent; `$upstream_response_time` is `-`
//! when no upstream answered, and a list (`0.002, 0.104`, or `0.002 : 0.104` across an
//! internal redirect) when nginx tried several: the service's time is their sum.
//!
//! **Envoy**, the default access log format:
//!
//! ```text
//! [%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//! %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//! %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//! "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"
//! ```
//!
//! `%START_TIME%` is the start (`2024-11-24T19:40:00.123Z`), `%DURATION%` the whole request
//! in milliseconds, the upstream service time `-` without an upstream answer.

use std::io::BufRead;

use super::clock::{parse_iso8601, parse_time_local};

/// A log format `--format` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// nginx `combined` + `$request_time $upstream_response_time [$msec]`.
    Nginx,
    /// Envoy's default access log format.
    Envoy,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "nginx" => Ok(LogFormat::Nginx),
            "envoy" => Ok(LogFormat::Envoy),
            _ => Err(format!("unknown log format {s:?}: expected nginx or envoy")),
        }
    }
}

/// One request of the log: when it started and ended, and what the service took.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The line's number in the log, from 1.
    pub line: usize,
    /// Seconds since the Unix epoch.
    pub start: f64,
    /// The whole request as the proxy saw it, in seconds.
    pub duration: f64,
    /// The upstream's time (summed over attempts), in seconds; `None` if none answered.
    pub upstream: Option<f64>,
    /// The status sent to the client (0: none, as Envoy logs a downstream disconnect).
    pub status: u16,
}

impl Entry {
    pub fn end(&self) -> f64 {
        self.start + self.duration
    }
}

/// Why a line is not a request of the format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct LineError {
    /// The format's field (`$status`, `%DURATION%`, ...), or `line` for its shape.
    pub field: &'static str,
    pub reason: String,
}

fn bad(field: &'static str, reason: impl Into<String>) -> LineError {
    LineError {
        field,
        reason: reason.into(),
    }
}

/// A line that did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub line: usize,
    pub error: LineError,
}

/// A parsed log: its requests in the order of the lines, and the lines that were not.
#[derive(Clone, Debug, PartialEq)]
pub struct Log {
    pub entries: Vec<Entry>,
    /// Non-blank lines read.
    pub lines: usize,
    /// The first [`Log::SHOWN_BAD_LINES`] lines that did not parse.
    pub bad: Vec<BadLine>,
    /// All lines that did not parse.
    pub bad_count: usize,
}

impl Log {
    pub const SHOWN_BAD_LINES: usize = 5;
}

/// Reading a log failed, or none of its lines is a request of the format.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("reading line {line}: {source}")]
    Read { line: usize, source: std::io::Error },
    #[error("no line is a request in the {format:?} format ({lines} lines{first})")]
    NothingParsed {
        format: LogFormat,
        lines: usize,
        /// ", line N: why" for the first bad line, if any.
        first: String,
    },
}

/// Parses every line of `input`; blank lines are skipped, bad ones counted (never fatal
/// unless no line parses).
pub fn parse_log(format: LogFormat, input: impl BufRead) -> Result<Log, LogError> {
    let mut log = Log {
        entries: Vec::new(),
        lines: 0,
        bad: Vec::new(),
        bad_count: 0,
    };
    for (i, line) in input.split(b'\n').enumerate() {
        let number = i + 1;
        let bytes = line.map_err(|source| LogError::Read {
            line: number,
            source,
        })?;
        // A byte that is not UTF-8 (a user agent in Latin-1) must not lose the line.
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim_end_matches('\r');
        if text.trim().is_empty() {
            continue;
        }
        log.lines += 1;
        match parse_line(format, text) {
            Ok(mut entry) => {
                entry.line = number;
                log.entries.push(entry);
            }
            Err(error) => {
                log.bad_count += 1;
                if log.bad.len() < Log::SHOWN_BAD_LINES {
                    log.bad.push(BadLine {
                        line: number,
                        error,
                    });
                }
            }
        }
    }
    if log.entries.is_empty() {
        return Err(LogError::NothingParsed {
            format,
            lines: log.lines,
            first: log
                .bad
                .first()
                .map(|b| format!(", line {}: {}", b.line, b.error))
                .unwrap_or_default(),
        });
    }
    Ok(log)
}

/// Parses one line (its `line` number is left 0).
pub fn parse_line(format: LogFormat, line: &str) -> Result<Entry, LineError> {
    let tokens = tokenize(line)?;
    match format {
        LogFormat::Nginx => nginx(&tokens),
        LogFormat::Envoy => envoy(&tokens),
    }
}

/// A field of a line: bare (up to a space), `[bracketed]` or `"quoted"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Bare(&'a str),
    Bracketed(&'a str),
    Quoted(&'a str),
}

/// Splits a line into its fields. Inside quotes, a backslash escapes the next character (nginx
/// writes a `"` inside a value as `\x22`, Envoy leaves it as is: a quote not followed by a
/// space or the end of the line is taken as part of the value).
fn tokenize(line: &str) -> Result<Vec<Token<'_>>, LineError> {
    let mut tokens = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' => i += 1,
            b'[' => {
                let close = line[i..]
                    .find(']')
                    .ok_or_else(|| bad("line", format!("no ] for the [ at column {}", i + 1)))?;
                tokens.push(Token::Bracketed(&line[i + 1..i + close]));
                i += close + 1;
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                loop {
                    match bytes.get(j) {
                        None => {
                            return Err(bad(
                                "line",
                                format!("no closing quote for the one at column {}", i + 1),
                            ));
                        }
                        Some(b'\\') => j += 2,
                        Some(b'"') if matches!(bytes.get(j + 1), None | Some(b' ' | b'\t')) => {
                            break;
                        }
                        Some(_) => j += 1,
                    }
                }
                // `j` may have stepped past the end on a trailing backslash.
                let end = j.min(bytes.len());
                tokens.push(Token::Quoted(line.get(start..end).unwrap_or_default()));
                i = end + 1;
            }
            _ => {
                let len = line[i..].find([' ', '\t']).unwrap_or(line.len() - i);
                tokens.push(Token::Bare(&line[i..i + len]));
                i += len;
            }
        }
    }
    Ok(tokens)
}

fn bare<'a>(tokens: &[Token<'a>], i: usize, field: &'static str) -> Result<&'a str, LineError> {
    match tokens.get(i) {
        Some(Token::Bare(s)) => Ok(s),
        Some(other) => Err(bad(
            field,
            format!("expected a bare value, found {other:?}"),
        )),
        None => Err(bad(field, "missing")),
    }
}

fn status(text: &str, field: &'static str) -> Result<u16, LineError> {
    match text.parse::<u16>() {
        Ok(code) if code <= 999 => Ok(code),
        _ => Err(bad(field, format!("{text:?} is not an HTTP status"))),
    }
}

/// A non-negative, finite number of seconds (or milliseconds: the caller scales).
fn number(text: &str, field: &'static str) -> Result<f64, LineError> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(bad(field, format!("{text:?} is not a non-negative number"))),
    }
}

/// An upstream time: `-`, or several separated by `,` or `:`, summed (`-` parts count 0).
fn upstream_times(text: &str) -> Result<Option<f64>, LineError> {
    let mut total = None;
    for part in text.split([',', ':', ' ']).filter(|p| !p.is_empty()) {
        if part == "-" {
            continue;
        }
        let v = number(part, "$upstream_response_time")?;
        total = Some(total.unwrap_or(0.0) + v);
    }
    Ok(total)
}

/// Seconds since the epoch beyond which a number at the end of an nginx line is `$msec`
/// rather than one more upstream time (a million seconds is eleven days).
const MSEC_FROM: f64 = 1e6;

fn nginx(tokens: &[Token<'_>]) -> Result<Entry, LineError> {
    // $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    // "$http_referer" "$http_user_agent", then the timings.
    const FIXED: usize = 9;
    let shape = [
        matches!(tokens.first(), Some(Token::Bare(_))),
        matches!(tokens.get(3), Some(Token::Bracketed(_))),
        matches!(tokens.get(4), Some(Token::Quoted(_))),
        matches!(tokens.get(7), Some(Token::Quoted(_))),
        matches!(tokens.get(8), Some(Token::Quoted(_))),
    ];
    if tokens.len() < FIXED + 2 || shape.contains(&false) {
        return Err(bad(
            "line",
            format!(
                "expected the nginx format (combined + $request_time $upstream_response_time \
                 [$msec]), found {} fields",
                tokens.len()
            ),
        ));
    }
    let Some(Token::Bracketed(time_local)) = tokens.get(3) else {
        return Err(bad("$time_local", "missing"));
    };
    let status = status(bare(tokens, 5, "$status")?, "$status")?;
    let request_time = number(bare(tokens, FIXED, "$request_time")?, "$request_time")?;
    let mut rest: Vec<&str> = Vec::with_capacity(tokens.len() - FIXED - 1);
    for i in FIXED + 1..tokens.len() {
        rest.push(bare(tokens, i, "$upstream_response_time")?);
    }
    let msec = match rest.last().and_then(|s| s.parse::<f64>().ok()) {
        Some(v) if rest.len() >= 2 && v.is_finite() && v >= MSEC_FROM => {
            rest.pop();
            Some(v)
        }
        _ => None,
    };
    let upstream = upstream_times(&rest.join(" "))?;
    let end = match msec {
        Some(end) => end,
        // $time_local is the second in which the request ended: take its middle.
        None => parse_time_local(time_local).map_err(|e| bad("$time_local", e))? + 0.5,
    };
    Ok(Entry {
        line: 0,
        start: end - request_time,
        duration: request_time,
        upstream,
        status,
    })
}

fn envoy(tokens: &[Token<'_>]) -> Result<Entry, LineError> {
    // [start] "request" code flags received sent duration upstream_time then 5 quoted.
    let shape = [
        matches!(tokens.first(), Some(Token::Bracketed(_))),
        matches!(tokens.get(1), Some(Token::Quoted(_))),
    ];
    if tokens.len() != 13 || shape.contains(&false) {
        return Err(bad(
            "line",
            format!(
                "expected Envoy's default format ([%START_TIME%] \"request\" and 11 more \
                 fields), found {} fields",
                tokens.len()
            ),
        ));
    }
    let Some(Token::Bracketed(start)) = tokens.first() else {
        return Err(bad("%START_TIME%", "missing"));
    };
    let start = parse_iso8601(start).map_err(|e| bad("%START_TIME%", e))?;
    let status = status(bare(tokens, 2, "%RESPONSE_CODE%")?, "%RESPONSE_CODE%")?;
    let duration = number(bare(tokens, 6, "%DURATION%")?, "%DURATION%")? / 1e3;
    let upstream_field = "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%";
    let upstream = match bare(tokens, 7, upstream_field)? {
        "-" => None,
        ms => Some(number(ms, upstream_field)? / 1e3),
    };
    Ok(Entry {
        line: 0,
        start,
        duration,
        upstream,
        status,
    })
}

#[cfg(test)]
mod tests;
