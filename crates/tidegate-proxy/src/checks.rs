//! The configuration's rules that the types alone do not carry, each in one place and applied
//! twice: while the file is parsed, so that the error names the key and its line (the
//! parser adds them to the message of a failing `deserialize_with`), and by
//! [`Config::validate`](crate::Config::validate) for what the command line or code set.

use http::HeaderName;
use http::header::{
    CONNECTION, CONTENT_LENGTH, HOST, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use serde::{Deserialize, Deserializer};
use tidegate_core::Nanos;

use crate::target::Target;

/// The most worker threads: beyond it the runtime would fail to start them (the process
/// aborted at 100,000) long before they could help on any machine.
pub(crate) const MAX_THREADS: usize = 1024;

pub(crate) fn threads_reason(threads: usize) -> Option<String> {
    (threads > MAX_THREADS).then(|| {
        format!("{threads} is more than {MAX_THREADS} (0 runs one worker thread per core)")
    })
}

/// Headers that frame, route or describe one connection: a client choosing its priority or
/// caller key through them would change how the message is read, and the proxy removes or
/// rewrites them anyway.
static RESERVED: [&HeaderName; 8] = [
    &HOST,
    &CONTENT_LENGTH,
    &TRANSFER_ENCODING,
    &CONNECTION,
    &TE,
    &TRAILER,
    &UPGRADE,
    &PROXY_AUTHORIZATION,
];

/// Why `value` cannot name the priority or caller-key header (empty turns the feature off).
pub(crate) fn header_reason(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    let Ok(name) = HeaderName::from_bytes(value.as_bytes()) else {
        return Some(format!("{value:?} is not a valid header name"));
    };
    let reserved =
        RESERVED.contains(&&name) || matches!(name.as_str(), "keep-alive" | "proxy-connection");
    reserved.then(|| {
        format!("{value:?} frames or routes the message itself: choose a header of its own")
    })
}

pub(crate) fn refuse<'de, D: Deserializer<'de>, T>(
    reason: Option<String>,
    value: T,
) -> Result<T, D::Error> {
    match reason {
        Some(reason) => Err(serde::de::Error::custom(reason)),
        None => Ok(value),
    }
}

pub(crate) fn threads<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let threads = usize::deserialize(deserializer)?;
    refuse::<D, _>(threads_reason(threads), threads)
}

pub(crate) fn header<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    refuse::<D, _>(header_reason(&value), value)
}

pub(crate) fn url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let url = String::deserialize(deserializer)?;
    let reason = Target::parse(&url).err().map(|e| e.to_string());
    refuse::<D, _>(reason, url)
}

/// The smallest head bound hyper accepts (it panics below it).
pub(crate) const MIN_HEADER_BYTES: usize = 8192;

pub(crate) fn header_bytes_reason(bytes: usize) -> Option<String> {
    (bytes < MIN_HEADER_BYTES).then(|| format!("{bytes} is less than {MIN_HEADER_BYTES}"))
}

pub(crate) fn header_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let bytes = usize::deserialize(deserializer)?;
    refuse::<D, _>(header_bytes_reason(bytes), bytes)
}

pub(crate) fn positive_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Nanos, D::Error> {
    let nanos = Nanos::deserialize(deserializer)?;
    let reason = nanos
        .is_zero()
        .then(|| "must be longer than zero".to_owned());
    refuse::<D, _>(reason, nanos)
}
