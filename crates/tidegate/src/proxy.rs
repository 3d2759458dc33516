//! `tidegate proxy`: the reverse proxy in front of any HTTP service.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use tidegate_proxy::{Config, DEFAULT_CONFIG, Proxy, UpstreamConfig};

/// Run tidegate as a reverse proxy in front of HTTP services
///
/// Starts with no configuration at all: `tidegate proxy --upstream http://127.0.0.1:3000`
/// learns the service's capacity, queues a little and sheds the rest with 503 and
/// Retry-After, least important first (the `tidegate-priority` request header: TIER or
/// TIER/COHORT). A TOML file (--config) sets the rest; --print-default-config prints every key
/// with its default. The flags override the file.
///
/// Admin endpoints on --admin: /metrics (Prometheus), /status (JSON), /dashboard (a live page),
/// /healthz, /readyz, and POST /reload.
/// SIGTERM or SIGINT: stop accepting, let requests in flight finish (server.drain_timeout),
/// exit 0. SIGHUP (or POST /reload): read --config again, with the same flags, and apply its
/// upstreams and modes; each upstream kept keeps its gate's learned limit. A bad file changes
/// nothing (the reason is logged and in /status). SIGHUP also reads the TLS certificate and key
/// again ([tls]).
///
/// Examples:
///   tidegate proxy --upstream http://127.0.0.1:3000
///   tidegate proxy --upstream http://10.0.0.5:8000 --upstream http://10.0.0.6:8000 --listen 0.0.0.0:8080
///   tidegate proxy --print-default-config > tidegate.toml
///   tidegate proxy --config tidegate.toml --check
///   tidegate proxy --config tidegate.toml --log-format json --log-level debug
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ProxyArgs {
    /// An upstream service, http://HOST:PORT[/PATH] or https://... (repeat for several: each
    /// gets its own gate, and a request goes to the one with the most room). Replaces the
    /// file's upstreams.
    #[arg(long, value_name = "URL")]
    upstream: Vec<String>,
    /// Where clients connect, HTTP/1.1 and h2c [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Where /metrics, /status, /dashboard, /healthz and /readyz are served [default:
    /// 127.0.0.1:9090]
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// A TOML configuration file (see --print-default-config).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Worker threads: 1 runs everything on one thread (a current-thread runtime), 0 one per
    /// core [default: the file's `threads`, else 0]
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Print the default configuration, every key with its default and a comment, and exit.
    #[arg(long)]
    print_default_config: bool,
    /// Check the configuration, print it as the proxy would run it, and exit (binds nothing).
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    log: crate::logging::LogArgs,
}

pub(crate) fn run(args: ProxyArgs) -> anyhow::Result<()> {
    if args.print_default_config {
        print!("{DEFAULT_CONFIG}");
        return Ok(());
    }
    let sources = Sources {
        config: args.config.clone(),
        upstream: args.upstream.clone(),
        listen: args.listen,
        admin: args.admin,
        threads: args.threads,
    };
    let config = sources.load()?;
    config.validate()?;
    if args.check {
        print!("{}", config.to_toml()?);
        return Ok(());
    }
    let runtime = match config.threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        threads => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if threads > 1 {
                builder.worker_threads(threads);
            }
            builder.enable_all().build()
        }
    }
    .context("starting the runtime")?;
    args.log.init();
    runtime.block_on(serve(config, sources))
}

/// Where the configuration comes from: the file, then the flags over it. Read at startup and
/// again on each reload.
#[derive(Clone, Debug)]
struct Sources {
    config: Option<PathBuf>,
    upstream: Vec<String>,
    listen: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    threads: Option<usize>,
}

impl Sources {
    fn load(&self) -> Result<Config, tidegate_proxy::Error> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if !self.upstream.is_empty() {
            config.upstreams = self.upstream.iter().map(UpstreamConfig::new).collect();
        }
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(admin) = self.admin {
            config.admin = admin;
        }
        if let Some(threads) = self.threads {
            config.threads = threads;
        }
        Ok(config)
    }
}

async fn serve(config: Config, sources: Sources) -> anyhow::Result<()> {
    let upstreams: Vec<String> = config.upstreams.iter().map(|u| u.url.clone()).collect();
    let proxy = Proxy::bind(config).await?;
    proxy.reload_from(move || sources.load());
    reload_on_hangup(proxy.reloader()).context("installing the SIGHUP handler")?;
    // The handlers are in place before the startup line: a signal sent as soon as it is read
    // drains rather than kills.
    let shutdown = shutdown_signal().context("installing the signal handlers")?;
    tracing::info!(
        listen = %proxy.local_addr(),
        admin = %proxy.admin_addr(),
        "tidegate proxy: listening on {}, admin on {}, upstreams {}",
        proxy.local_addr(),
        proxy.admin_addr(),
        upstreams.join(", ")
    );
    let drained = proxy.run(shutdown).await;
    match drained.cut {
        0 => tracing::info!("tidegate proxy: drained, stopped"),
        n => tracing::warn!(
            cut = n,
            "tidegate proxy: drain timeout passed, cut {n} connections, stopped"
        ),
    }
    Ok(())
}

/// Reloads on each SIGHUP, in a task of its own; the reload logs its outcome.
#[cfg(unix)]
fn reload_on_hangup(reload: tidegate_proxy::Reload) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            // Logged and kept for /status by the proxy, whatever the outcome.
            let _ = reload.reload();
        }
    });
    Ok(())
}

/// No SIGHUP here: POST /reload on the admin listener reloads.
#[cfg(not(unix))]
fn reload_on_hangup(_reload: tidegate_proxy::Reload) -> std::io::Result<()> {
    Ok(())
}

/// A future that completes on SIGTERM or SIGINT (Ctrl-C), with the handlers installed now.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

/// A future that completes on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
