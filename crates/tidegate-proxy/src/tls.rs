//! TLS on both sides of the proxy, with rustls on the ring provider (no OpenSSL).
//!
//! - **Listener.** With `tls.certificate` and `tls.key` set, every client connection is TLS.
//!   ALPN offers h2 (unless `server.http2` is off) and http/1.1, and hyper serves whichever
//!   the client then speaks. The handshake runs in the connection's own task, within the
//!   connection's `connections.header_read_timeout` (the time to a first request head
//!   includes the handshake), so that a client that stalls or sends garbage costs one task
//!   and a counted failure (`tidegate_tls_handshake_failures_total{reason}`), never another
//!   client's service.
//! - **Reload.** The certificate and key are read again on SIGHUP and when either file changes
//!   (looked at every `tls.reload_interval`). A pair that does not load (half-written,
//!   mismatched) leaves the one in force, with a warning and
//!   `tidegate_tls_reloads_total{result="failed"}`. New handshakes get the new certificate;
//!   open connections keep theirs.
//! - **Upstreams.** An `https://` upstream is reached over TLS, its certificate verified
//!   against `tls.upstream_ca` or the system's roots, for the URL's host (also sent as SNI).
//!   ALPN asks for h2 when `client.http2`, http/1.1 otherwise.
//!
//! A certificate or key file that does not load is an error while the configuration is read,
//! which names the key, its line and the file; a key that does not match its certificate is
//! one of [`Config::validate`](crate::Config::validate), naming `tls.key` and both files.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::{Error as PemError, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Deserializer, Serialize};
use tidegate_core::Nanos;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use crate::error::Error;
use crate::target::Target;

/// TLS for the listener and for `https://` upstreams (`[tls]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The listener's certificate chain (PEM, the server's certificate first). With `key`,
    /// clients must connect with TLS; without both, the listener speaks plain HTTP/1.1 and
    /// h2c.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "certificate_file"
    )]
    pub certificate: Option<PathBuf>,
    /// The private key of `certificate` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "key_file")]
    pub key: Option<PathBuf>,
    /// How often the two files are looked at for a change (they are also read again on
    /// SIGHUP); zero: on SIGHUP only.
    pub reload_interval: Nanos,
    /// The certificates (PEM) an `https://` upstream's certificate must chain to; absent, the
    /// system's roots.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "certificate_file"
    )]
    pub upstream_ca: Option<PathBuf>,
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig {
            certificate: None,
            key: None,
            reload_interval: Nanos::from_secs(10),
            upstream_ca: None,
        }
    }
}

/// Reads each of the configuration's files, so that a bad one is named with its key and line.
fn certificate_file<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let path = PathBuf::deserialize(d)?;
    read_certificates(&path).map_err(serde::de::Error::custom)?;
    Ok(Some(path))
}

fn key_file<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let path = PathBuf::deserialize(d)?;
    read_key(&path).map_err(serde::de::Error::custom)?;
    Ok(Some(path))
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| pem_error(path, "certificate", e))?;
    if certificates.is_empty() {
        return Err(pem_error(path, "certificate", PemError::NoItemsFound));
    }
    Ok(certificates)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error(path, "private key", e))
}

/// What is wrong with a PEM file, said for a person (the library's message shows the
/// markers as byte arrays).
fn pem_error(path: &Path, what: &str, error: PemError) -> String {
    let path = path.display();
    match error {
        PemError::Io(e) => format!("cannot read {path}: {e}"),
        PemError::NoItemsFound => format!("{path}: no PEM {what} in it"),
        PemError::MissingSectionEnd { .. } => format!("{path}: a PEM section has no END line"),
        PemError::IllegalSectionStart { .. } => format!("{path}: a malformed BEGIN line"),
        e => format!("{path}: {e}"),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The listener's certificate and key, both files read, checked against each other.
fn certified_key(
    certificate: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let invalid = |key: &str, reason: String| Error::Invalid {
        key: key.to_owned(),
        reason,
    };
    let chain = read_certificates(certificate).map_err(|r| invalid("tls.certificate", r))?;
    let private = read_key(key).map_err(|r| invalid("tls.key", r))?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| {
        invalid(
            "tls.key",
            format!(
                "{} with the certificate {}: {e}",
                key.display(),
                certificate.display()
            ),
        )
    })
}

/// What [`Config::validate`](crate::Config::validate) checks of `[tls]`: both listener files
/// or neither, a key that matches its certificate, and the upstream roots.
pub(crate) fn check(config: &TlsConfig, https_upstreams: bool) -> Result<(), Error> {
    if let Some((certificate, key)) = listener_files(config)? {
        certified_key(certificate, key, &provider())?;
    }
    if https_upstreams {
        upstream_client(config, false)?;
    }
    Ok(())
}

fn listener_files(config: &TlsConfig) -> Result<Option<(&Path, &Path)>, Error> {
    match (&config.certificate, &config.key) {
        (Some(certificate), Some(key)) => Ok(Some((certificate, key))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::Invalid {
            key: "tls.key".to_owned(),
            reason: "missing: tls.certificate is set, and needs its private key".to_owned(),
        }),
        (None, Some(_)) => Err(Error::Invalid {
            key: "tls.certificate".to_owned(),
            reason: "missing: tls.key is set, and needs its certificate".to_owned(),
        }),
    }
}

/// The certificate in force, swapped whole on reload.
#[derive(Debug)]
struct Certificate {
    certificate: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// `ok`, `failed`.
    reloads: [Counter; 2],
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

impl Certificate {
    /// Reads both files again; on failure the certificate in force stays.
    fn reload(&self, why: &str) {
        match certified_key(&self.certificate, &self.key, &self.provider) {
            Ok(loaded) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(loaded);
                self.reloads[0].inc();
                tracing::info!(
                    certificate = %self.certificate.display(),
                    "tls: certificate reloaded ({why})"
                );
            }
            Err(error) => {
                self.reloads[1].inc();
                tracing::warn!(
                    certificate = %self.certificate.display(),
                    "tls: certificate not reloaded ({why}), the previous one stays: {error}"
                );
            }
        }
    }

    /// The files' modification times and lengths: a change of either is a change.
    fn stamps(&self) -> [Option<(SystemTime, u64)>; 2] {
        [&self.certificate, &self.key].map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
    }
}

/// Why a client's handshake failed.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// Not TLS, or TLS the proxy does not accept.
    Error,
    /// Not finished within the connection's deadline.
    Timeout,
}

/// TLS termination for the client listener.
#[derive(Debug)]
pub(crate) struct Listener {
    config: Arc<ServerConfig>,
    certificate: Arc<Certificate>,
    /// By [`Failure`].
    failures: [Counter; 2],
}

impl Listener {
    /// The listener's TLS, or `None` when `[tls]` sets no certificate.
    pub(crate) fn new(
        config: &TlsConfig,
        http2: bool,
        registry: &mut Registry,
    ) -> Result<Option<Listener>, Error> {
        let Some((certificate, key)) = listener_files(config)? else {
            return Ok(None);
        };
        let provider = provider();
        let loaded = certified_key(certificate, key, &provider)?;
        let reloads = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "tidegate_tls_reloads",
            "Reloads of the listener's certificate and key (on SIGHUP or a change of the files), by result: ok, or failed (the previous certificate stays)",
            reloads.clone(),
        );
        let failures = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "tidegate_tls_handshake_failures",
            "Client TLS handshakes that failed, by reason: error (not TLS, or refused), timeout (not finished within connections.header_read_timeout)",
            failures.clone(),
        );
        let certificate = Arc::new(Certificate {
            certificate: certificate.to_owned(),
            key: key.to_owned(),
            provider: provider.clone(),
            current: RwLock::new(Arc::new(loaded)),
            reloads: ["ok", "failed"].map(|r| reloads.get_or_create(&vec![("result", r)]).clone()),
        });
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Invalid {
                key: "tls".to_owned(),
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(certificate.clone());
        server.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(Some(Listener {
            config: Arc::new(server),
            certificate,
            failures: ["error", "timeout"]
                .map(|r| failures.get_or_create(&vec![("reason", r)]).clone()),
        }))
    }

    /// The client's handshake, finished by `deadline`; `None` (counted) when it failed.
    pub(crate) async fn accept<S>(
        &self,
        io: S,
        deadline: tokio::time::Instant,
    ) -> Option<tokio_rustls::server::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.clone());
        let failure = match tokio::time::timeout_at(deadline, acceptor.accept(io)).await {
            Ok(Ok(stream)) => return Some(stream),
            Ok(Err(_)) => Failure::Error,
            Err(_) => Failure::Timeout,
        };
        self.failures[failure as usize].inc();
        None
    }

    /// What reloads the certificate, with its SIGHUP handler in place now.
    pub(crate) fn reloader(&self, interval: Duration) -> Reloader {
        Reloader {
            certificate: self.certificate.clone(),
            interval,
            hangup: hangup(),
        }
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

#[cfg(unix)]
fn hangup() -> Hangup {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup())
        .inspect_err(|e| {
            tracing::warn!("tls: no certificate reload on SIGHUP (cannot watch for it: {e})");
        })
        .ok()
}

#[cfg(not(unix))]
fn hangup() -> Hangup {
    None
}

/// Reloads the listener's certificate on SIGHUP and when its files change.
#[derive(Debug)]
pub(crate) struct Reloader {
    certificate: Arc<Certificate>,
    interval: Duration,
    hangup: Hangup,
}

impl Reloader {
    /// Until `stop` turns true.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut seen = self.certificate.stamps();
        loop {
            // The files are looked at before they are read: one written while it was read (a
            // failed reload, or a success with the old half) differs from what was seen, and
            // is read again at the next look. A failed pair is otherwise tried again when
            // either file changes.
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return,
                () = hung_up(&mut self.hangup) => {
                    seen = self.certificate.stamps();
                    self.certificate.reload("SIGHUP");
                }
                () = tokio::time::sleep(self.interval), if !self.interval.is_zero() => {
                    let now = self.certificate.stamps();
                    if now != seen {
                        seen = now;
                        self.certificate.reload("the files changed");
                    }
                }
            }
        }
    }
}

#[cfg(unix)]
async fn hung_up(hangup: &mut Hangup) {
    if let Some(signal) = hangup
        && signal.recv().await.is_some()
    {
        return;
    }
    std::future::pending().await
}

#[cfg(not(unix))]
async fn hung_up(_: &mut Hangup) {
    std::future::pending().await
}

/// The client side of TLS to `https://` upstreams: roots and ALPN, shared by every upstream.
pub(crate) fn upstream_client(config: &TlsConfig, http2: bool) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    match &config.upstream_ca {
        Some(path) => {
            let invalid = |reason: String| Error::Invalid {
                key: "tls.upstream_ca".to_owned(),
                reason,
            };
            for certificate in read_certificates(path).map_err(invalid)? {
                roots
                    .add(certificate)
                    .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(Error::Invalid {
                    key: "tls.upstream_ca".to_owned(),
                    reason: "not set, and no root certificate found on the system for the \
                             https:// upstreams: give the CA file their certificates chain to"
                        .to_owned(),
                });
            }
        }
    }
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Invalid {
            key: "tls".to_owned(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![if http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    Ok(Arc::new(client))
}

/// TLS to one upstream: the shared client configuration and the upstream's name.
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl Connector {
    /// TLS to the upstream at `url`, parsed as `target`, if it is `https://` (`client` is then
    /// [`upstream_client`]'s configuration).
    pub(crate) fn for_target(
        client: Option<&Arc<ClientConfig>>,
        target: &Target,
        url: &str,
    ) -> Result<Option<Connector>, Error> {
        let Some(config) = client.filter(|_| target.tls()) else {
            return Ok(None);
        };
        // An IPv6 address is in brackets in the URL, not in a certificate.
        let host = target
            .hostname()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| Error::Url {
            url: url.to_owned(),
            reason: format!("{host:?} is not a name TLS can check: {e}"),
        })?;
        Ok(Some(Connector {
            config: config.clone(),
            name,
        }))
    }

    pub(crate) async fn connect<S>(&self, io: S) -> io::Result<tokio_rustls::client::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(self.name.clone(), io)
            .await
    }
}

/// A connection with or without TLS, on either side.
#[derive(Debug)]
pub(crate) enum Stream<P, T> {
    Plain(P),
    Tls(Box<T>),
}

/// What both kinds of [`Stream`] are.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin {}

impl<I: AsyncRead + AsyncWrite + Unpin> Io for I {}

impl<P: Io, T: Io> Stream<P, T> {
    fn io(self: Pin<&mut Self>) -> Pin<&mut dyn Io> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io),
            Stream::Tls(io) => Pin::new(&mut **io),
        }
    }
}

impl<P: Io, T: Io> AsyncRead for Stream<P, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io().poll_read(cx, buf)
    }
}

impl<P: Io, T: Io> AsyncWrite for Stream<P, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(io) => io.is_write_vectored(),
            Stream::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}
