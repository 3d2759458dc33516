use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tidegate_core::outbound::{RetryBudgetConfig, RetryPolicy};
use tower::ServiceBuilder;
use tower::service_fn;
use tower::util::ServiceExt as _;

use super::*;

type Handler = Arc<dyn Fn(&Request<()>) -> Response<()> + Send + Sync>;

/// A callee answering each request with `answer`, counting the requests that reach it and
/// keeping the priority header of the last.
#[derive(Clone)]
struct Callee {
    calls: Arc<AtomicU32>,
    last_priority: Arc<Mutex<Option<String>>>,
    answer: Handler,
}

impl Callee {
    fn new(answer: impl Fn(&Request<()>) -> Response<()> + Send + Sync + 'static) -> Callee {
        Callee {
            calls: Arc::new(AtomicU32::new(0)),
            last_priority: Arc::new(Mutex::new(None)),
            answer: Arc::new(answer),
        }
    }

    fn service(
        &self,
    ) -> impl Service<
        Request<()>,
        Response = Response<()>,
        Error = BoxError,
        Future = impl Future<Output = Result<Response<()>, BoxError>> + Send,
    > + Clone
    + Send
    + 'static {
        let callee = self.clone();
        service_fn(move |request: Request<()>| {
            callee.calls.fetch_add(1, Ordering::SeqCst);
            let priority = request
                .headers()
                .get(PRIORITY_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let Ok(mut last) = callee.last_priority.lock() {
                *last = priority;
            }
            let response = (callee.answer)(&request);
            async move { Ok::<_, BoxError>(response) }
        })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    fn last_priority(&self) -> Option<String> {
        self.last_priority.lock().ok().and_then(|p| p.clone())
    }
}

fn answer(status: StatusCode, headers: &[(&'static str, &'static str)]) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = status;
    for (name, value) in headers {
        response
            .headers_mut()
            .insert(*name, HeaderValue::from_static(value));
    }
    response
}

fn p(tier: u32, cohort: u32) -> Priority {
    Priority::new(tier, cohort).expect("valid")
}

#[tokio::test(start_paused = true)]
async fn stamps_the_priority_of_the_request_being_served() {
    let callee = Callee::new(|_| answer(StatusCode::OK, &[]));
    let layer = OutboundLayer::new(None, p(3, 0));
    let client = layer.layer(callee.service());
    // Outside any scope: the default.
    client
        .clone()
        .oneshot(Request::new(()))
        .await
        .expect("sent");
    assert_eq!(callee.last_priority().as_deref(), Some("3/0"));
    // Inside the scope of a request being served: its priority.
    with_priority(p(1, 17), client.clone().oneshot(Request::new(())))
        .await
        .expect("sent");
    assert_eq!(callee.last_priority().as_deref(), Some("1/17"));
    // A priority the caller set itself wins.
    let mut own = Request::new(());
    own.headers_mut()
        .insert(PRIORITY_HEADER, HeaderValue::from_static("0/5"));
    with_priority(p(1, 17), client.oneshot(own))
        .await
        .expect("sent");
    assert_eq!(callee.last_priority().as_deref(), Some("0/5"));
}

#[tokio::test(start_paused = true)]
async fn a_served_request_priority_reaches_the_next_hop() {
    // Hop 2 records what hop 1 sends it; hop 1 serves in its request's scope.
    let hop2 = Callee::new(|_| answer(StatusCode::OK, &[]));
    let client = OutboundLayer::new(None, Priority::default()).layer(hop2.service());
    let hop1 = ServiceBuilder::new()
        .layer(PriorityScopeLayer::default())
        .service_fn(move |_request: Request<()>| {
            let client = client.clone();
            async move { client.oneshot(Request::new(())).await }
        });
    let mut request = Request::new(());
    request
        .headers_mut()
        .insert(PRIORITY_HEADER, HeaderValue::from_static("2/99"));
    hop1.oneshot(request).await.expect("served");
    assert_eq!(hop2.last_priority().as_deref(), Some("2/99"));
}

#[tokio::test(start_paused = true)]
async fn drops_what_the_callee_cuts_until_the_hint_expires() {
    let callee = Callee::new(|request| {
        let tier0 = request.headers()[PRIORITY_HEADER] == "0/0";
        if tier0 {
            answer(StatusCode::OK, &[("tidegate-cutoff", "rank=127, ttl=1s")])
        } else {
            answer(
                StatusCode::SERVICE_UNAVAILABLE,
                &[("tidegate-cutoff", "rank=127, ttl=1s")],
            )
        }
    });
    let layer = OutboundLayer::new(None, Priority::default());
    let client = layer.layer(callee.service());
    let send = |priority| with_priority(priority, client.clone().oneshot(Request::new(())));
    let first = send(p(2, 0)).await.expect("sent");
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The hint: ranks past 127 (tier 1 on) are not sent for a second.
    let error = send(p(2, 0)).await.expect_err("cut off");
    assert_eq!(
        error.downcast_ref::<Throttled>(),
        Some(&Throttled::Cutoff { rank: 127 })
    );
    assert!(send(p(1, 0)).await.is_err());
    assert_eq!(send(p(0, 0)).await.expect("sent").status(), StatusCode::OK);
    assert_eq!(callee.calls(), 2);
    tokio::time::advance(Duration::from_millis(1_001)).await;
    send(p(2, 0)).await.expect("the hint expired: sent");
    assert_eq!(callee.calls(), 3);
    let stats = layer.stats();
    assert_eq!((stats.sent, stats.cut_off, stats.refused), (3, 2, 2));
}

#[tokio::test(start_paused = true)]
async fn a_bad_cutoff_header_is_ignored_and_counted() {
    let callee = Callee::new(|_| {
        answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &[("tidegate-cutoff", "rank=all, ttl=1s")],
        )
    });
    let layer = OutboundLayer::new(None, Priority::LOWEST);
    let client = layer.layer(callee.service());
    for _ in 0..3 {
        client
            .clone()
            .oneshot(Request::new(()))
            .await
            .expect("sent");
    }
    assert_eq!(callee.calls(), 3);
    assert_eq!(layer.stats().feedback_invalid, 3);
}

#[tokio::test(start_paused = true)]
async fn throttles_a_callee_that_refuses_everything() {
    let callee = Callee::new(|_| answer(StatusCode::SERVICE_UNAVAILABLE, &[]));
    let layer = OutboundLayer::default();
    let client = layer.layer(callee.service());
    for _ in 0..1_000 {
        let _ = client.clone().oneshot(Request::new(())).await;
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    let stats = layer.stats();
    // Nothing accepted: after the first few, nearly every request stays home.
    assert!(callee.calls() < 50, "{stats:?}");
    assert_eq!(stats.throttled + stats.sent, 1_000);
    assert_eq!(u64::from(callee.calls()), stats.sent);
}

#[tokio::test(start_paused = true)]
async fn retries_after_what_retry_after_asks() {
    let callee = Callee::new({
        let calls = AtomicU32::new(0);
        move |_| match calls.fetch_add(1, Ordering::SeqCst) {
            0 => answer(StatusCode::SERVICE_UNAVAILABLE, &[("retry-after", "1")]),
            _ => answer(StatusCode::OK, &[]),
        }
    });
    let client = RetryLayer::default().layer(callee.service());
    let start = Instant::now();
    let response = client.oneshot(Request::new(())).await.expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(callee.calls(), 2);
    assert!(start.elapsed() >= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn the_budget_keeps_retries_to_a_tenth() {
    let callee = Callee::new(|_| answer(StatusCode::SERVICE_UNAVAILABLE, &[]));
    let retry = RetryLayer::new(
        RetryPolicy::naive(5),
        RetryBudgetConfig {
            min_per_second: 0.0,
            ..RetryBudgetConfig::default()
        },
    );
    let client = retry.layer(callee.service());
    for _ in 0..500 {
        let response = client
            .clone()
            .oneshot(Request::new(()))
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    // Naive retries would make 2,500 attempts; the budget allows 500 + 10%.
    assert!((540..=550).contains(&callee.calls()), "{}", callee.calls());
}

#[tokio::test(start_paused = true)]
async fn what_the_outbound_layer_refuses_is_not_retried() {
    let callee = Callee::new(|_| {
        answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &[("tidegate-cutoff", "rank=0, ttl=10s")],
        )
    });
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(
            RetryPolicy::naive(5),
            RetryBudgetConfig::default(),
        ))
        .layer(OutboundLayer::new(None, Priority::LOWEST))
        .service(callee.service());
    // The first request is refused and retried once: the retry meets the hint.
    let error = client
        .clone()
        .oneshot(Request::new(()))
        .await
        .expect_err("cut off");
    assert!(error.is::<Throttled>());
    assert_eq!(callee.calls(), 1);
}
