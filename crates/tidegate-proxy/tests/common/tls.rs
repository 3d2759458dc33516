//! TLS for the tests: a certificate authority made at test time (rcgen), certificate and key
//! files in a directory of their own, clients that trust the authority, and an origin server
//! that speaks TLS and remembers the name each client asked for (SNI).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

use super::within;

/// A certificate authority that exists for one test.
pub(crate) struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate issued by a [`TestCa`], with its key, in PEM.
#[derive(Clone)]
pub(crate) struct Leaf {
    pub(crate) certificate: String,
    pub(crate) key: String,
    pub(crate) der: Vec<u8>,
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        TestCa { issuer }
    }

    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub(crate) fn leaf(&self, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let certificate = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        Leaf {
            certificate: certificate.pem(),
            key: key.serialize_pem(),
            der: certificate.der().to_vec(),
        }
    }

    /// A client configuration that trusts this authority and offers `alpn`.
    pub(crate) fn client(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

/// A directory of files for one test, removed with it.
pub(crate) struct Files {
    pub(crate) dir: PathBuf,
}

impl Files {
    pub(crate) fn new() -> Files {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tidegate-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Files { dir }
    }

    /// Writes `text` to the file `name`, and returns its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes `leaf` as `cert.pem` and `key.pem`.
    pub(crate) fn leaf(&self, leaf: &Leaf) -> (PathBuf, PathBuf) {
        (
            self.write("cert.pem", &leaf.certificate),
            self.write("key.pem", &leaf.key),
        )
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TLS connection to `addr`, the server checked as `name`.
pub(crate) async fn connect(
    addr: SocketAddr,
    client: Arc<ClientConfig>,
    name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    within(
        "a TLS handshake",
        tokio_rustls::TlsConnector::from(client).connect(name, tcp),
    )
    .await
}

/// The certificate a TLS server at `addr` presents now (DER).
pub(crate) async fn served_certificate(addr: SocketAddr, ca: &TestCa) -> Vec<u8> {
    let stream = connect(addr, ca.client(&[b"h2"]), "localhost")
        .await
        .unwrap();
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// An HTTP/2 connection over TLS, ALPN `h2`.
pub(crate) async fn h2(
    addr: SocketAddr,
    ca: &TestCa,
) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let stream = connect(addr, ca.client(&[b"h2"]), "localhost")
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// An HTTP/1.1 connection over TLS, ALPN `http/1.1`.
pub(crate) async fn http1(
    addr: SocketAddr,
    ca: &TestCa,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = connect(addr, ca.client(&[b"http/1.1"]), "localhost")
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// A GET of `path` with `authority`, answered whole: the status and the body as text.
pub(crate) async fn get_h2(
    sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    path: &str,
) -> (http::StatusCode, String) {
    let request = Request::get(format!("https://localhost{path}"))
        .body(Full::default())
        .unwrap();
    let response = within("a response", sender.send_request(request))
        .await
        .unwrap();
    let status = response.status();
    let body = within("a body", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// A TLS origin: answers every request with `tls origin, PATH, VERSION`, and records the
/// server name each client asked for.
pub(crate) struct TlsOrigin {
    pub(crate) addr: SocketAddr,
    names: Arc<Mutex<Vec<Option<String>>>>,
    task: JoinHandle<()>,
}

impl TlsOrigin {
    pub(crate) async fn start(certificate: &Path, key: &Path) -> TlsOrigin {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let names = Arc::new(Mutex::new(Vec::new()));
        let task = super::accept_each(listener, {
            let names = names.clone();
            move |tcp| {
                let acceptor = acceptor.clone();
                let names = names.clone();
                async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let name = stream.get_ref().1.server_name().map(str::to_owned);
                    names.lock().unwrap().push(name);
                    let service = service_fn(|request: Request<hyper::body::Incoming>| {
                        let text = format!(
                            "tls origin, {}, {:?}",
                            request.uri().path(),
                            request.version()
                        );
                        async move { Ok::<_, Infallible>(Response::new(Full::<Bytes>::from(text))) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
        TlsOrigin { addr, names, task }
    }

    /// The server name (SNI) of each connection so far; `None` for a client that sent none.
    pub(crate) fn names(&self) -> Vec<Option<String>> {
        self.names.lock().unwrap().clone()
    }
}

impl Drop for TlsOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}
