//! The listeners: binding them (where startup errors surface), accepting connections, and
//! draining on shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinSet;

use crate::accept;
use crate::classify::Classifier;
use crate::config::Config;
use crate::connection::Connections;
use crate::dashboard::Dashboard;
use crate::error::Error;
use crate::forward::Forwarding;
use crate::handler::Shared;
use crate::metrics::ProxyMetrics;
use crate::readings::GateReadings;
use crate::reload::{ReloadError, ReloadSummary};
use crate::stream::Streams;
use crate::trust::Peer;
use crate::upstream::{LiveGates, Upstream, Upstreams};
use crate::{admin, dashboard, recovery, tls};

/// A proxy with its listeners bound, ready to [`run`](Proxy::run).
#[derive(Debug)]
pub struct Proxy {
    pub(crate) shared: Arc<Shared>,
    listener: TcpListener,
    admin: TcpListener,
    drain_timeout: Duration,
    clients: Connections,
    reconnect_interval: Duration,
    /// Reloads the listener's TLS certificate, when there is one.
    certificates: Option<tls::Reloader>,
}

/// How a [`Proxy::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Connections still busy when the drain timeout passed, and cut (upgraded ones
    /// included).
    pub cut: usize,
}

impl Proxy {
    /// Checks `config`, builds the gates and binds both listeners. Needs a tokio runtime.
    pub async fn bind(config: Config) -> Result<Proxy, Error> {
        config.validate()?;
        let classifier = Classifier::new(&config)?;
        let mut registry = Registry::default();
        let metrics = ProxyMetrics::register(&mut registry);
        let tls = tls::Listener::new(&config.tls, config.server.http2, &mut registry)?;
        let certificates = tls
            .as_ref()
            .map(|tls| tls.reloader(Duration::from(config.tls.reload_interval)));
        let clients =
            Connections::new(&config.connections, config.server.http2, tls, &mut registry);
        let retry_after = Duration::from(config.server.retry_after);
        let streams = Streams::new(&config.streams, clients.open_gauge(), &mut registry);
        let upstream_tls = config
            .any_https()
            .then(|| tls::upstream_client(&config.tls, config.client.http2))
            .transpose()?;
        let upstreams = config
            .upstreams
            .iter()
            .map(|upstream| {
                Upstream::build(
                    &config,
                    upstream,
                    classifier.partitions(),
                    &metrics,
                    &streams,
                    upstream_tls.as_ref(),
                )
                .map(Arc::new)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let upstreams = Arc::new(ArcSwap::from_pointee(Upstreams::new(upstreams)));
        registry.register_collector(Box::new(LiveGates::new(upstreams.clone())));
        let mut forwarding = Forwarding::new(
            config
                .priority
                .forward
                .then(|| classifier.header().cloned())
                .flatten(),
            config.client.http2,
        );
        forwarding.hold_for_chain = config.holds_for_chain();
        let shared = Shared::new(
            upstreams,
            classifier,
            forwarding,
            metrics,
            registry,
            Duration::from(config.client.timeout),
            Duration::from(config.client.read_timeout),
            http::StatusCode::from_u16(config.server.shed_status).map_err(|e| Error::Invalid {
                key: "server.shed_status".to_owned(),
                reason: e.to_string(),
            })?,
            retry_after,
            config.server.on_client_gone,
            Dashboard::new(&config.dashboard),
            config.trust.sources.clone(),
            streams,
        );
        shared
            .reload
            .started(config.clone(), shared.classifier.partitions().to_vec());
        let listener = bind(config.listen, "listen", config.connections.backlog)?;
        let admin = bind(config.admin, "admin", 1024)?;
        Ok(Proxy {
            shared: Arc::new(shared),
            listener,
            admin,
            drain_timeout: Duration::from(config.server.drain_timeout),
            clients,
            reconnect_interval: Duration::from(config.ejection.reconnect_interval),
            certificates,
        })
    }

    /// Where clients connect (with the port chosen, when the configuration asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Where the admin endpoints are served.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Every gate's limit, in-flight count and queue length, readable from this process
    /// while the proxy runs (take it before [`run`](Proxy::run) consumes the proxy).
    pub fn gates(&self) -> GateReadings {
        GateReadings::new(&self.shared.upstreams.load())
    }

    /// Serves until `shutdown` completes, then drains: stops accepting, lets the requests in
    /// flight finish (idle keep-alive connections close at once), and cuts what is left
    /// after the drain timeout. `/readyz` answers 503 while draining.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Drained {
        let Proxy {
            shared,
            listener,
            admin,
            drain_timeout,
            clients,
            reconnect_interval,
            certificates,
        } = self;
        let clients = Arc::new(clients);
        // Changed when draining starts; each connection holds a receiver until it closes.
        let (drain, _) = tokio::sync::watch::channel(());
        let mut connections = JoinSet::new();
        let (admin_stop, admin_stopped) = tokio::sync::watch::channel(false);
        // The dashboard's sampler, which stops with the admin listener: its first reading is
        // taken here, before any request is accepted.
        let sampler_task = tokio::spawn(dashboard::sample(shared.clone(), admin_stop.subscribe()));
        let admin_task = tokio::spawn(admin::serve(
            admin,
            shared.clone(),
            admin_stopped,
            clients.header_read_timeout,
        ));
        let recovery_task = tokio::spawn(recovery::watch(
            shared.clone(),
            reconnect_interval,
            admin_stop.subscribe(),
        ));
        let certificates_task =
            certificates.map(|reloader| tokio::spawn(reloader.run(admin_stop.subscribe())));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(_) = connections.join_next() => {}
                accepted = clients.accept(&listener) => match accepted {
                    (Ok((stream, peer)), slot) => {
                        let client = Peer::new(peer.ip(), &shared.trusted);
                        let serve = clients.clone().serve(
                            stream,
                            shared.clone(),
                            client,
                            drain.subscribe(),
                        );
                        connections.spawn(accept::holding(slot, serve));
                    }
                    // Out of file descriptors or a connection reset before it was accepted:
                    // wait a moment rather than spin, and carry on.
                    (Err(_), _) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
            }
        }
        drop(listener);
        shared.draining.store(true, Ordering::Release);
        // Requests whose clients went away, still at their upstreams, are in flight too, and
        // so are the upgraded connections.
        let tunnels = &shared.streams.tunnels;
        let drained = tokio::time::timeout(drain_timeout, async {
            drain.send_replace(());
            drain.closed().await;
            shared.abandoned.finished().await;
            tunnels.finished().await;
        })
        .await
        .is_ok();
        let cut = if drained {
            0
        } else {
            let cut = connections.len() + tunnels.running();
            shared.abandoned.cut();
            tunnels.cut();
            connections.abort_all();
            cut
        };
        while connections.join_next().await.is_some() {}
        shared.abandoned.finished().await;
        tunnels.finished().await;
        let _ = admin_stop.send(true);
        let _ = admin_task.await;
        let _ = sampler_task.await;
        let _ = recovery_task.await;
        if let Some(task) = certificates_task {
            let _ = task.await;
        }
        Drained { cut }
    }
}

/// Binds a listener with an accept backlog of `backlog` (by default a deep one: a burst of
/// connections must wait in the kernel, not be refused).
fn bind(addr: SocketAddr, role: &'static str, backlog: u32) -> Result<TcpListener, Error> {
    let fail = |source| Error::Bind { role, addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(fail)?;
    socket.set_reuseaddr(true).map_err(fail)?;
    socket.bind(addr).map_err(fail)?;
    socket.listen(backlog).map_err(fail)
}

/// A handle that reloads a running proxy: for a signal handler, or a program that builds
/// its configuration itself. Clone it freely.
#[derive(Clone, Debug)]
pub struct Reload {
    shared: Arc<Shared>,
}

impl Reload {
    /// Reads the configuration from the proxy's source ([`Proxy::reload_from`]) and applies
    /// it; the outcome is logged and shown in `/status`.
    pub fn reload(&self) -> Result<ReloadSummary, ReloadError> {
        self.shared.reload.reload(self.shared.live())
    }

    /// Applies `config`; the outcome is logged and shown in `/status`.
    pub fn apply(&self, config: Config) -> Result<ReloadSummary, ReloadError> {
        self.shared.reload.apply(self.shared.live(), config)
    }
}

impl Proxy {
    /// Where `SIGHUP`-style reloads and `POST /reload` read the new configuration: typically
    /// the file the proxy started from, with the same command-line overrides. Without it,
    /// `POST /reload` answers 404.
    pub fn reload_from(&self, source: impl Fn() -> Result<Config, Error> + Send + Sync + 'static) {
        self.shared.reload.set_source(source);
    }

    /// A handle that reloads this proxy while it runs (take it before
    /// [`run`](Proxy::run) consumes the proxy).
    pub fn reloader(&self) -> Reload {
        Reload {
            shared: self.shared.clone(),
        }
    }
}
