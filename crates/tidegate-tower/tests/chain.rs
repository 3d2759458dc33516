//! The rules that keep a call chain's work (`docs/feedback.md`), in tokio's paused time: a
//! chain admitted under a hint is not dropped on a deeper one, a caller's line reopens at a
//! bounded rate, and a cutting gate's header holds back the ranks starving in its queue.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is a test failure"
)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Request, Response};
use tidegate_core::Priority;
use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_core::gate::QueueConfig;
use tidegate_tower::SharedGate;
use tidegate_tower::feedback::CutoffLayer;
use tidegate_tower::outbound::{OutboundLayer, PriorityScopeLayer, Throttled, with_priority};
use tower::util::{BoxCloneService, ServiceExt as _};
use tower::{BoxError, Layer, service_fn};

fn rank(rank: u16) -> Priority {
    Priority::from_rank(rank).expect("a rank")
}

/// A callee that answers every call with `cutoff` in `tidegate-cutoff` (none: no header),
/// and keeps the `tidegate-priority` field lines of each call it got.
#[derive(Clone, Default)]
struct Callee {
    cutoff: Arc<Mutex<Option<&'static str>>>,
    seen: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Callee {
    fn says(&self, cutoff: Option<&'static str>) {
        *self.cutoff.lock().expect("lock") = cutoff;
    }

    fn seen(&self) -> Vec<Vec<String>> {
        std::mem::take(&mut *self.seen.lock().expect("lock"))
    }

    fn service(&self) -> BoxCloneService<Request<()>, Response<()>, Infallible> {
        let callee = self.clone();
        BoxCloneService::new(service_fn(move |request: Request<()>| {
            let lines = request
                .headers()
                .get_all("tidegate-priority")
                .iter()
                .map(|v| v.to_str().expect("ascii").to_owned())
                .collect();
            callee.seen.lock().expect("lock").push(lines);
            let mut response = Response::new(());
            if let Some(cutoff) = *callee.cutoff.lock().expect("lock") {
                response
                    .headers_mut()
                    .insert("tidegate-cutoff", HeaderValue::from_static(cutoff));
            }
            async move { Ok::<_, Infallible>(response) }
        }))
    }
}

fn refused_on_hint(result: &Result<Response<()>, BoxError>) -> bool {
    result.as_ref().is_err_and(|e| {
        matches!(
            e.downcast_ref::<Throttled>(),
            Some(Throttled::Cutoff { .. })
        )
    })
}

#[tokio::test(start_paused = true)]
async fn a_chain_admitted_under_a_hint_is_not_dropped_on_a_deeper_one() {
    let callee = Callee::default();
    let outbound = OutboundLayer::new(None, Priority::default()).without_chain_hint();
    let client = outbound.layer(callee.service());
    // A service inside the chain (it stamps no hint of its own) that makes one call to the
    // callee while serving each request, in the scope of the request's `tidegate-priority`
    // (priority and chain hint).
    let scope = PriorityScopeLayer::default();
    let server = scope.layer(service_fn(move |_: Request<()>| {
        let client = client.clone();
        async move { client.oneshot(Request::new(())).await }
    }));
    let serve = |lines: &[&'static str]| {
        let mut request = Request::new(());
        for &line in lines {
            request
                .headers_mut()
                .append("tidegate-priority", HeaderValue::from_static(line));
        }
        server.clone().oneshot(request)
    };

    // The callee cuts past rank 300: a call ranked 350 is dropped before it is sent...
    callee.says(Some("rank=300, ttl=1s"));
    assert!(
        serve(&["2/94"]).await.is_ok(),
        "the first answer brings the hint"
    );
    callee.seen();
    assert!(refused_on_hint(&serve(&["2/94"]).await));
    // ...unless the edge admitted its chain under a hint that admits it: then it is sent,
    // with the priority and the chain's hint on lines of their own.
    assert!(serve(&["2/94", "under=400"]).await.is_ok());
    assert!(
        serve(&["2/94, under=350"]).await.is_ok(),
        "joined into one line"
    );
    assert_eq!(
        callee.seen(),
        vec![vec!["2/94", "under=400"], vec!["2/94", "under=350"]]
    );
    // A hint at admission that did not admit it, or a malformed one (ignored and counted):
    // dropped.
    assert!(refused_on_hint(&serve(&["2/94", "under=349"]).await));
    assert!(refused_on_hint(&serve(&["2/94", "under=high"]).await));
    assert_eq!(scope.ignored(), 1);
    assert_eq!(outbound.stats().cut_off, 3);
    assert!(callee.seen().is_empty());
    // Past the hint's ttl, everything is sent, the old form as it came.
    callee.says(None);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(serve(&["2/94"]).await.is_ok());
    assert!(serve(&["2/94"]).await.is_ok());
    assert_eq!(callee.seen(), vec![vec!["2/94"], vec!["2/94"]]);
}

/// A service whose handler calls the callee twice through `outbound` while serving each
/// request; it answers whether each call was sent.
fn calls_twice(
    outbound: &OutboundLayer,
    callee: &Callee,
) -> impl Fn(&'static str) -> BoxFuture<(bool, bool)> {
    let client = outbound.layer(callee.service());
    let server = PriorityScopeLayer::default().layer(service_fn(move |_: Request<()>| {
        let client = client.clone();
        async move {
            let first = client.clone().oneshot(Request::new(())).await;
            let second = client.oneshot(Request::new(())).await;
            Ok::<_, Infallible>((first.is_ok(), second.is_ok()))
        }
    }));
    move |priority| {
        let mut request = Request::new(());
        request
            .headers_mut()
            .insert("tidegate-priority", HeaderValue::from_static(priority));
        let server = server.clone();
        Box::pin(async move { server.oneshot(request).await.expect("infallible") })
    }
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

#[tokio::test(start_paused = true)]
async fn an_edge_admits_a_chain_at_its_first_call_and_holds_that_hint_for_its_rest() {
    let callee = Callee::default();
    let edge = OutboundLayer::new(None, Priority::default());
    let serve = calls_twice(&edge, &callee);
    // No hint held: the first call admits the chain under every rank.
    assert_eq!(serve("5/127").await, (true, true));
    assert_eq!(
        callee.seen(),
        vec![vec!["5/127", "under=767"], vec!["5/127", "under=767"]]
    );
    // The callee cuts past 400, then past 200 on the answer to the first call: rank 350
    // (2/94) was admitted under 400, and its second call is sent, not dropped with its first
    // call's work done.
    callee.says(Some("rank=400, ttl=1s"));
    assert_eq!(serve("0/0").await, (true, true));
    callee.seen();
    callee.says(Some("rank=200, ttl=1s"));
    assert_eq!(serve("2/94").await, (true, true));
    assert_eq!(
        callee.seen(),
        vec![vec!["2/94", "under=400"], vec!["2/94", "under=400"]]
    );
    // A chain that starts now is admitted under 200: rank 350 is not, rank 138 is.
    assert_eq!(serve("2/94").await, (false, false));
    assert_eq!(serve("1/10").await, (true, true));
    assert_eq!(
        callee.seen(),
        vec![vec!["1/10", "under=200"], vec!["1/10", "under=200"]]
    );
    assert_eq!(edge.stats().cut_off, 2);

    // Without it, the second call of the chain admitted under 400 is dropped on the deeper
    // hint, and no call says a hint.
    let callee = Callee::default();
    let plain = OutboundLayer::new(None, Priority::default()).without_chain_hint();
    let serve = calls_twice(&plain, &callee);
    callee.says(Some("rank=400, ttl=1s"));
    assert_eq!(serve("0/0").await, (true, true));
    callee.seen();
    callee.says(Some("rank=200, ttl=1s"));
    assert_eq!(serve("2/94").await, (true, false));
    assert_eq!(callee.seen(), vec![vec!["2/94"]]);
}

#[tokio::test(start_paused = true)]
async fn the_callers_line_reopens_at_its_rate() {
    let callee = Callee::default();
    let outbound = OutboundLayer::new(None, Priority::default()).reopening(60.0);
    let client = outbound.layer(callee.service());
    let call = |r: u16| with_priority(rank(r), client.clone().oneshot(Request::new(())));
    callee.says(Some("rank=300, ttl=250ms"));
    assert!(call(700).await.is_ok(), "no hint yet");
    callee.says(None);
    assert!(refused_on_hint(&call(301).await), "deeper: at once");
    assert!(call(300).await.is_ok());
    // Just before the hint lapses, then half a second after: 30 ranks more, not every rank.
    tokio::time::advance(Duration::from_millis(249)).await;
    assert!(refused_on_hint(&call(301).await));
    tokio::time::advance(Duration::from_millis(501)).await;
    assert!(call(330).await.is_ok());
    assert!(refused_on_hint(&call(331).await));
    // Seven and a half seconds more: every rank again.
    tokio::time::advance(Duration::from_millis(7_500)).await;
    assert!(call(767).await.is_ok());

    // Without the rate, every rank as soon as the hint lapses.
    let at_once = OutboundLayer::new(None, Priority::default());
    let client = at_once.layer(callee.service());
    let call = |r: u16| with_priority(rank(r), client.clone().oneshot(Request::new(())));
    callee.says(Some("rank=300, ttl=250ms"));
    assert!(call(700).await.is_ok());
    assert!(refused_on_hint(&call(301).await));
    tokio::time::advance(Duration::from_millis(250)).await;
    callee.says(None);
    assert!(call(767).await.is_ok());
}

/// One request at a time, PIE shedding by priority, the queue waiting up to 500 ms.
fn slow_gate(hold_back_starving: bool) -> SharedGate {
    let mut config = GateConfig {
        limit: LimitConfig::of(LimitAlgorithm::Fixed),
        regulator: RegulatorConfig::of(RegulatorAlgorithm::Pie),
        queue: QueueConfig {
            wait_bound: f64::INFINITY,
            hold_back_starving,
            ..QueueConfig::default()
        },
    };
    config.limit.fixed.limit = 1;
    SharedGate::new(&config, Duration::from_secs(1))
}

/// Twice what the gate's service can take (250 ms each, one at a time), half tier 1 and
/// half tier 4, for 10 s.
async fn overload(gate: &SharedGate) {
    for i in 0..80u32 {
        let caller = gate.clone();
        let priority = if i % 2 == 0 {
            rank(128)
        } else {
            rank(512 + (i * 3) as u16 % 128)
        };
        tokio::spawn(async move {
            if let Ok(permit) = caller.acquire(priority).await {
                tokio::time::sleep(Duration::from_millis(250)).await;
                permit.success();
            }
        });
        tokio::time::sleep(Duration::from_millis(125)).await;
    }
}

fn cutoff_said(headers: &HeaderMap) -> Option<u16> {
    let value = headers.get("tidegate-cutoff")?.to_str().ok()?;
    value
        .parse::<tidegate_core::feedback::CutoffHeader>()
        .ok()
        .map(|h| h.rank)
}

#[tokio::test(start_paused = true)]
async fn a_cutting_gate_holds_back_the_ranks_starving_in_its_queue() {
    let mut said = Vec::new();
    for hold_back_starving in [false, true] {
        let gate = slow_gate(hold_back_starving);
        let service = CutoffLayer::new(gate.clone(), Duration::from_millis(250)).layer(service_fn(
            |_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) },
        ));
        overload(&gate).await;
        // A request the gate sheds carries the cut-off it tells.
        let shed = gate.acquire(Priority::LOWEST).await.expect_err("shed");
        assert_eq!(
            shed.cutoff_rank(),
            gate.told_cutoff(),
            "{hold_back_starving}"
        );
        // What the regulator cuts, and what the header says, at one instant.
        let regulator = gate.snapshot().regulator.cutoff_rank;
        assert!(regulator.is_some(), "PIE cuts");
        let response = service.oneshot(Request::new(())).await.expect("ok");
        let header = cutoff_said(response.headers());
        said.push((regulator, gate.told_cutoff(), header));
    }
    let [
        (regulator, told, header),
        (_, told_starving, header_starving),
    ] = said[..]
    else {
        panic!("two runs");
    };
    // Off: the regulator's cut-off, the rank before it in the header.
    assert_eq!(told, regulator);
    assert_eq!(header.map(|r| r + 1), regulator);
    // On: tier 1 has waited past half the queue's timeout behind the one slot, and every
    // rank from it on is held back, though PIE admits them.
    assert_eq!(told_starving, Some(128), "{said:?}");
    assert_eq!(header_starving, Some(127));
    assert!(regulator.is_some_and(|r| r > 128), "{said:?}");
}
