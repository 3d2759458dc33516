//! An axum service protected by tidegate.
//!
//! `GET /work` stands for a service that does 20 things at once well (a pool of 20 "workers"
//! at 50 ms each, about 400 requests per second); past that, requests wait inside it, as
//! they would for a database connection. tidegate learns that limit, keeps the excess in its
//! own priority queue for at most 300 ms, and turns away what it cannot serve in time with
//! `503` and `Retry-After`, lowest priority first:
//!
//! - `tidegate-priority: T` or `T/C` sets the tier (0 most important, 5 least) and cohort;
//! - `x-user-id: ...` puts the caller in a cohort that every instance computes alike, so
//!   that under overload the same users are shed everywhere (rotating every 10 minutes);
//! - every response carries `tidegate-lease` for proxies in front;
//! - `GET /metrics` is the gate's Prometheus metrics (not behind the gate).
//!
//! ```sh
//! cargo run --example axum                          # listens on 127.0.0.1:3000
//! curl -i -H 'tidegate-priority: 1' localhost:3000/work
//! curl -s localhost:3000/metrics | grep tidegate_limit
//! ```
//!
//! `PORT=8080 cargo run --example axum` listens elsewhere.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::State;
use axum::http::{Request, Response, StatusCode, header};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tidegate_core::priority::CohortMap;
use tidegate_core::{Priority, Time};
use tidegate_tower::lease::LeaseLayer;
use tidegate_tower::{Shed, TidegateLayer, metrics};
use tower::{BoxError, ServiceBuilder};

/// The priority of a request: its `tidegate-priority` header (default tier 3), with the
/// cohort of its `x-user-id` when it has one.
pub(crate) fn priority(request: &Request<Body>) -> Priority {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    let priority: Priority = header("tidegate-priority")
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    match header("x-user-id") {
        Some(user) => {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let cohort = CohortMap::default().cohort(user.as_bytes(), Time::ZERO + wall.into());
            priority.with_cohort(cohort)
        }
        None => priority,
    }
}

/// A shed request becomes `503` with `Retry-After`; any other failure of the gate's inner
/// service (none here) a `500`.
async fn shed_response(error: BoxError) -> Response<Body> {
    match error.downcast_ref::<Shed>() {
        Some(shed) => shed.to_http_response(),
        None => {
            let mut response = Response::new(Body::from(error.to_string()));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

/// The "service": 20 workers, 50 ms each.
async fn work(State(workers): State<Arc<tokio::sync::Semaphore>>) -> &'static str {
    if let Ok(_worker) = workers.acquire().await {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    "done\n"
}

async fn metrics_text(State(registry): State<Arc<Registry>>) -> Response<Body> {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => {
            let mut response = Response::new(Body::from(text));
            let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(content_type),
            );
            response
        }
        Err(_) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

/// The whole application: `/work` behind the gate, `/metrics` beside it.
pub(crate) fn app() -> Router {
    let gate = TidegateLayer::builder()
        .priority(priority)
        .queue_timeout(Duration::from_millis(300))
        .build();
    let mut registry = Registry::default();
    metrics::register(&mut registry, gate.gate(), "work");
    let protection = ServiceBuilder::new()
        .layer(LeaseLayer::new(gate.gate().clone(), Duration::from_secs(1)))
        .layer(HandleErrorLayer::new(shed_response))
        .layer(gate);
    let workers = Arc::new(tokio::sync::Semaphore::new(20));
    Router::new()
        .route("/work", get(work).with_state(workers).layer(protection))
        .route("/metrics", get(metrics_text).with_state(Arc::new(registry)))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let address = listener.local_addr()?;
    println!("axum behind tidegate on http://{address}");
    println!("  curl -i -H 'tidegate-priority: 1' http://{address}/work");
    println!("  curl -s http://{address}/metrics | grep tidegate_");
    println!("Ctrl-C to stop.");
    axum::serve(listener, app())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
