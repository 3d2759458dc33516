//! The admin listener, on its own port so that it stays reachable (and private) whatever the
//! traffic does: `/metrics` (Prometheus text), `/status` (JSON of every gate), `/healthz` (the
//! process answers), `/readyz` (it accepts traffic: not draining, and some upstream not
//! ejected), `/dashboard` with its data (see [`crate::dashboard`]), and `POST /reload` (see
//! [`crate::reload`]). The listener is on loopback unless configured otherwise: `/reload`
//! changes what the proxy runs, so whoever reaches it must be trusted.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::dashboard;
use crate::handler::Shared;

/// Serves the admin endpoints until `stop` turns true. A client has `header_read_timeout`
/// for each request head (a slowloris on the admin port would otherwise hold its connection,
/// and the monitoring that reads it, forever).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    header_read_timeout: Duration,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            Some(_) = connections.join_next() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| {
                        let response = respond(&shared, &request);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_read_timeout)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
    connections.abort_all();
}

fn respond(shared: &Arc<Shared>, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.uri().path() == "/reload" {
        return crate::reload::respond(&shared.reload, shared.live(), request.method());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".to_owned());
    }
    match request.uri().path() {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, &shared.registry) {
                Ok(()) => {
                    let mut response = text(StatusCode::OK, body);
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static(
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        ),
                    );
                    response
                }
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
            }
        }
        "/status" => {
            let mut response = text(StatusCode::OK, status(shared).to_string());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
        "/dashboard" | "/dashboard/" => {
            let mut response = text(StatusCode::OK, dashboard::PAGE.to_owned());
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/html; charset=utf-8"),
            );
            // Everything the page needs is in it: it may talk to this listener and nothing
            // else.
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                header::HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; \
                     style-src 'unsafe-inline'; connect-src 'self'",
                ),
            );
            response
        }
        "/dashboard/data" => match dashboard::data(&**shared, request.uri().query()) {
            Ok(body) => {
                let mut response = text(StatusCode::OK, body);
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                headers.insert(
                    header::CACHE_CONTROL,
                    header::HeaderValue::from_static("no-store"),
                );
                response
            }
            Err(reason) => text(StatusCode::BAD_REQUEST, format!("{reason}\n")),
        },
        "/healthz" => text(StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => {
            if shared.draining.load(Ordering::Acquire) {
                text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_owned())
            } else if shared
                .upstreams
                .load()
                .list
                .iter()
                .all(|u| u.health.is_ejected())
            {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "every upstream is ejected\n".to_owned(),
                )
            } else {
                text(StatusCode::OK, "ready\n".to_owned())
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /status, /dashboard, /healthz, /readyz or POST /reload\n"
                .to_owned(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// Every upstream, its health and its gates.
fn status(shared: &Shared) -> Value {
    let now = shared.now();
    let upstreams: Vec<Value> = shared
        .upstreams
        .load()
        .list
        .iter()
        .map(|upstream| {
            let streams = &upstream.streams;
            let gates: Vec<Value> = upstream
                .gates
                .iter()
                .zip(shared.classifier.partitions())
                .map(|(slot, partition)| {
                    let s = slot.gate.snapshot();
                    let c = s.counters.total();
                    // The lease's expiry is on the gate's clock: only its allowance means
                    // anything here.
                    let lease = s.lease.map(|lease| json!({ "allowed": lease.allowed }));
                    json!({
                        "gate": slot.name,
                        "partition": partition,
                        "limit": s.limit,
                        "inflight": s.inflight,
                        "outstanding": slot.outstanding.load(Ordering::Relaxed),
                        "queued": s.queued,
                        "oldest_wait_seconds": s.oldest_wait.as_secs_f64(),
                        "callers_wait_seconds": s.callers_wait.map(|wait| wait.as_secs_f64()),
                        "lease": lease,
                        "reject_ratio": s.regulator.reject_ratio,
                        "cutoff_rank": s.regulator.cutoff_rank,
                        "overloaded": s.regulator.overloaded,
                        "burst": s.regulator.burst,
                        "would_shed": crate::would_shed::status(&slot.would_shed),
                        "requests": {
                            "arrived": c.arrived,
                            "ok": c.completed_ok,
                            "dropped": c.completed_dropped,
                            "ignored": c.completed_ignored,
                            "rejected_regulator": c.rejected_regulator,
                            "rejected_queue_full": c.rejected_queue_full,
                            "rejected_no_lease": c.rejected_no_lease,
                            "expired": c.expired,
                            "cancelled_queued": c.cancelled_queued,
                            "cancelled_inflight": c.cancelled_inflight,
                        },
                    })
                })
                .collect();
            json!({
                "name": upstream.name,
                "url": upstream.url,
                "mode": if upstream.dry_run.load(Ordering::Relaxed) { "dry-run" } else { "enforce" },
                "ejected": upstream.health.is_ejected(),
                "ejected_for_seconds": upstream.health.ejected_for(now).map(|n| n.as_secs_f64()),
                "consecutive_failures": upstream.health.failures(),
                "gates": gates,
                "streams": { "open": streams.open(), "max": streams.max() },
            })
        })
        .collect();
    json!({
        "draining": shared.draining.load(Ordering::Acquire),
        "dashboard": shared.dashboard.status(),
        "reload": shared.reload.status(),
        "upstreams": upstreams,
    })
}
