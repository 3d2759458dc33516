//! Live reload: a new configuration applied to a running proxy (SIGHUP in the CLI, `POST
//! /reload` on the admin listener, [`Reload::apply`](crate::Reload::apply) in a program),
//! without a restart.
//!
//! Why it must not start over: each gate holds what it learned about its upstream (the limit,
//! the latency estimates, the regulator's state), and a restart forgets it, so the gate
//! relearns from scratch while traffic flows, and connections in flight are cut.
//!
//! What a reload does: the new configuration is checked whole first, as at startup; a bad
//! one changes nothing (the reason goes to the log and to `/status`). Then the set of
//! upstreams is rebuilt: an upstream with the same name and URL as before keeps its gates
//! (limit, estimates, counters), its connection pool and its health, and takes the new mode;
//! a new one gets fresh gates; a removed one leaves the balancing, while the requests already
//! sent to it finish there (each holds its upstream). The new set is swapped in whole
//! ([`ArcSwap`]): a request sees the old set or the new one, never a mix, and no lock is taken
//! on the request path. Client connections and listeners are not touched.
//!
//! What needs a restart: everything else (listeners, timeouts, the gate's algorithm, routes,
//! ...). A reload that changes it applies the upstreams and modes, and names the keys left
//! as they were in the log and in `/status` (`restart_needed`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::Full;
use serde::Serialize;
use serde_json::{Value, json};

use crate::classify::Classifier;
use crate::config::{Config, Mode};
use crate::error::Error;
use crate::metrics::ProxyMetrics;
use crate::stream::Streams;
use crate::target::Target;
use crate::upstream::{Upstream, Upstreams};

/// Where a reload reads the new configuration: a file, with the command line's overrides.
type Source = Box<dyn Fn() -> Result<Config, Error> + Send + Sync>;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The proxy was given nothing to reload from
    /// ([`Proxy::reload_from`](crate::Proxy::reload_from)).
    #[error("no configuration to reload from: the proxy was started without a source")]
    NoSource,
    /// The new configuration is invalid: the running one stays.
    #[error("the new configuration is refused, the running one stays")]
    Invalid(#[from] Error),
}

/// What a reload changed, by upstream name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReloadSummary {
    /// New upstreams, with fresh gates.
    pub added: Vec<String>,
    /// Upstreams taken out of the balancing (their requests in flight finish).
    pub removed: Vec<String>,
    /// Upstreams that kept their gates, pool and health.
    pub kept: Vec<String>,
    /// Top-level keys that changed but apply only at the next start.
    pub restart_needed: Vec<String>,
}

/// What a reload swaps, and what the upstreams it builds register with: parts of the
/// proxy's shared state.
pub(crate) struct Live<'a> {
    pub(crate) upstreams: &'a ArcSwap<Upstreams>,
    pub(crate) metrics: &'a ProxyMetrics,
    pub(crate) streams: &'a Streams,
}

/// The proxy's reload state, held with the rest of what its requests share.
#[derive(Default)]
pub(crate) struct Reloader {
    /// The configuration in force and the partitions its gates were built for; held for the
    /// whole of a reload, so that two never interleave.
    running: Mutex<Option<Running>>,
    source: OnceLock<Source>,
    /// Reloads applied and refused, and the last one, for `/status`.
    history: Mutex<History>,
}

struct Running {
    config: Config,
    partitions: Vec<String>,
}

#[derive(Default)]
struct History {
    applied: u64,
    refused: u64,
    last: Option<Value>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("has_source", &self.source.get().is_some())
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is whole or not at all: a panic elsewhere leaves nothing half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Reloader {
    /// Called once the proxy is built from `config`.
    pub(crate) fn started(&self, config: Config, partitions: Vec<String>) {
        *lock(&self.running) = Some(Running { config, partitions });
    }

    /// Where reloads read the new configuration from; the first one set stays.
    pub(crate) fn set_source(
        &self,
        source: impl Fn() -> Result<Config, Error> + Send + Sync + 'static,
    ) {
        let _ = self.source.set(Box::new(source));
    }

    /// For `/status`: `{"applied": N, "refused": N, "last": {...}}`, `last` null before any.
    pub(crate) fn status(&self) -> Value {
        let history = lock(&self.history);
        json!({
            "applied": history.applied,
            "refused": history.refused,
            "last": history.last,
        })
    }

    /// Reads the configuration from the source and applies it.
    pub(crate) fn reload(&self, live: Live<'_>) -> Result<ReloadSummary, ReloadError> {
        let result = match self.source.get() {
            Some(source) => source()
                .map_err(ReloadError::from)
                .and_then(|config| self.swap(live, config)),
            None => Err(ReloadError::NoSource),
        };
        self.record(&result);
        result
    }

    /// Checks `config` and applies it; the outcome is logged and kept for `/status`.
    pub(crate) fn apply(
        &self,
        live: Live<'_>,
        config: Config,
    ) -> Result<ReloadSummary, ReloadError> {
        let result = self.swap(live, config);
        self.record(&result);
        result
    }

    /// Checks `new` and applies it (see the module docs).
    fn swap(&self, live: Live<'_>, new: Config) -> Result<ReloadSummary, ReloadError> {
        new.validate()?;
        Classifier::new(&new)?;
        let mut running = lock(&self.running);
        let Some(running) = running.as_mut() else {
            return Err(ReloadError::NoSource);
        };
        // What runs from now on: the old configuration with the new upstreams and modes.
        let mut applied = running.config.clone();
        applied.upstreams = new.upstreams.clone();
        applied.mode = new.mode;
        let restart_needed = restart_needed(&running.config, &new);

        let current = live.upstreams.load_full();
        let mut summary = ReloadSummary {
            restart_needed,
            ..ReloadSummary::default()
        };
        let mut list = Vec::with_capacity(applied.upstreams.len());
        // TLS for the https:// upstreams added (the kept ones keep their connector).
        let upstream_tls = applied
            .any_https()
            .then(|| crate::tls::upstream_client(&applied.tls, applied.client.http2))
            .transpose()?;
        // Mode changes of kept upstreams wait until nothing can fail any more.
        let mut modes = Vec::new();
        for upstream in &applied.upstreams {
            let name = match &upstream.name {
                Some(name) => name.clone(),
                None => Target::parse(&upstream.url)?.authority().to_owned(),
            };
            let dry_run = applied.mode_of(upstream) == Mode::DryRun;
            match current
                .list
                .iter()
                .find(|u| u.name == name && u.url == upstream.url)
            {
                Some(kept) => {
                    modes.push((kept.clone(), dry_run));
                    list.push(kept.clone());
                    summary.kept.push(name);
                }
                None => {
                    let built = Upstream::build(
                        &applied,
                        upstream,
                        &running.partitions,
                        live.metrics,
                        live.streams,
                        upstream_tls.as_ref(),
                    )?;
                    list.push(Arc::new(built));
                    summary.added.push(name);
                }
            }
        }
        summary.removed = current
            .list
            .iter()
            .filter(|old| !list.iter().any(|new| Arc::ptr_eq(old, new)))
            .map(|old| old.name.clone())
            .collect();
        for (upstream, dry_run) in modes {
            upstream.dry_run.store(dry_run, Ordering::Relaxed);
        }
        live.upstreams.store(Arc::new(Upstreams::new(list)));
        running.config = applied;
        Ok(summary)
    }

    /// Logs the outcome of a reload and keeps it for `/status`.
    fn record(&self, result: &Result<ReloadSummary, ReloadError>) {
        let at_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut history = lock(&self.history);
        match result {
            Ok(summary) => {
                history.applied += 1;
                tracing::info!(
                    added = ?summary.added,
                    removed = ?summary.removed,
                    kept = ?summary.kept,
                    "configuration reloaded: upstreams added {:?}, removed {:?}, kept {:?}",
                    summary.added,
                    summary.removed,
                    summary.kept,
                );
                if !summary.restart_needed.is_empty() {
                    tracing::warn!(
                        keys = ?summary.restart_needed,
                        "configuration reloaded, but {:?} changed and apply only at the next \
                         start: the running values stay",
                        summary.restart_needed,
                    );
                }
                history.last = Some(json!({
                    "at_unix_ms": at_unix_ms,
                    "ok": true,
                    "summary": summary,
                }));
            }
            Err(error) => {
                history.refused += 1;
                let reason = chain(error);
                tracing::error!(error = %reason, "configuration reload refused: {reason}");
                history.last = Some(json!({
                    "at_unix_ms": at_unix_ms,
                    "ok": false,
                    "error": reason,
                }));
            }
        }
    }
}

/// An error with its causes, `: `-separated (the parser's line and column are in a cause).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The top-level keys, other than the upstreams and the mode, whose values differ.
fn restart_needed(old: &Config, new: &Config) -> Vec<String> {
    let table = |config: &Config| match toml::Value::try_from(config) {
        Ok(toml::Value::Table(table)) => table,
        _ => toml::Table::new(),
    };
    let (old, new) = (table(old), table(new));
    let mut keys: Vec<String> = old
        .keys()
        .chain(new.keys())
        .filter(|key| !matches!(key.as_str(), "upstreams" | "mode"))
        .filter(|key| old.get(*key) != new.get(*key))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Answers `/reload` on the admin listener: `POST` reloads from the source.
pub(crate) fn respond(
    reloader: &Reloader,
    live: Live<'_>,
    method: &Method,
) -> Response<Full<Bytes>> {
    if method != Method::POST {
        let mut response = Response::new(Full::new(Bytes::from_static(b"POST only\n")));
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return response;
    }
    let (status, body) = match reloader.reload(live) {
        Ok(summary) => (StatusCode::OK, json!({ "ok": true, "summary": summary })),
        Err(error) => {
            let status = match error {
                ReloadError::NoSource => StatusCode::NOT_FOUND,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, json!({ "ok": false, "error": chain(&error) }))
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}
