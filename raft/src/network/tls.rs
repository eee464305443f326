//! Mutual TLS between peers (rustls with the ring provider), and the stream type every peer
//! connection runs over: [`PeerStream`] is a plain `TcpStream` or a TLS stream over one, so the
//! framed protocol does not care which. Without [`PeerTls`] connections stay plain text, as
//! before; the only cost on that path is one `match` per read and write.
//!
//! With [`PeerTls`], every node holds a certificate signed by the cluster's CA:
//! - a server (the Raft listener) requires a client certificate that chains to the CA and is
//!   valid for the host of a configured peer or current member ([`PeerNames`]), and refuses
//!   the handshake otherwise — the connection is closed before its first frame is read, so
//!   nothing from an unauthenticated peer reaches Raft;
//! - a client checks the server's certificate against the CA and against the host of the
//!   peer's address (`host:port`; an IP address is checked against the certificate's IP
//!   subjectAltNames, a name against its DNS names).
//!
//! Handshake failures are counted in `statestore_raft_peer_tls_failures_total{side}`
//! ([`crate::metrics::PeerRpcMetrics::tls_failures`]) and logged.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::error::{PeerError, PeerTlsError, Result};
use crate::metrics::PeerRpcMetrics;
use crate::network::peer_names::{MemberCertVerifier, PeerNames};

/// TLS settings of the peer network: the cluster CA and this node's certificate and key,
/// ready for both directions. The accepting side checks client certificates against a
/// [`PeerNames`]: [`PeerTls::for_members`] binds it to a node's set (as built by
/// [`PeerTls::from_pem`] it is empty, and every client is refused).
#[derive(Clone)]
pub struct PeerTls {
    connector: TlsConnector,
    acceptor: TlsAcceptor,
    server: Arc<ServerParts>,
}

/// What a server configuration is built from.
struct ServerParts {
    provider: Arc<CryptoProvider>,
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl ServerParts {
    /// A server configuration whose client certificates must chain to the CA and name one of
    /// `names`.
    fn config(&self, names: PeerNames) -> Result<rustls::ServerConfig, PeerTlsError> {
        let ca =
            WebPkiClientVerifier::builder_with_provider(self.roots.clone(), self.provider.clone())
                .build()
                .map_err(PeerTlsError::Verifier)?;
        let verifier = Arc::new(MemberCertVerifier { inner: ca, names });
        rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(refused("server"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(refused("cert_file/key_file"))
    }
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls { .. }")
    }
}

/// rustls's refusal of `what`.
fn refused(what: &'static str) -> impl FnOnce(rustls::Error) -> PeerTlsError {
    move |source| PeerTlsError::Rustls { what, source }
}

/// A PEM file of `setting` that does not parse.
fn bad_pem(setting: &'static str) -> impl FnOnce(rustls::pki_types::pem::Error) -> PeerTlsError {
    move |source| PeerTlsError::Pem { setting, source }
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, PeerTlsError> {
    std::fs::read(path).map_err(|source| PeerTlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

impl PeerTls {
    /// Reads the CA certificates, this node's certificate chain and its private key from PEM
    /// files.
    pub fn from_files(ca: &Path, cert: &Path, key: &Path) -> Result<PeerTls, PeerTlsError> {
        PeerTls::from_pem(
            &read("ca_file", ca)?,
            &read("cert_file", cert)?,
            &read("key_file", key)?,
        )
    }

    /// Builds both sides from PEM text: `ca` (one or more CA certificates), `cert` (this
    /// node's certificate, then any intermediates) and `key` (its private key).
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<PeerTls, PeerTlsError> {
        let mut roots = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(ca) {
            let der = der.map_err(bad_pem("ca_file"))?;
            roots.add(der).map_err(refused("ca_file"))?;
        }
        if roots.is_empty() {
            return Err(PeerTlsError::NoCertificate { setting: "ca_file" });
        }
        let roots = Arc::new(roots);
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(bad_pem("cert_file"))?;
        if chain.is_empty() {
            return Err(PeerTlsError::NoCertificate {
                setting: "cert_file",
            });
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(bad_pem("key_file"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let client = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(refused("client"))?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(refused("cert_file/key_file"))?;
        let server = ServerParts {
            provider,
            roots,
            chain,
            key,
        };
        let acceptor = TlsAcceptor::from(Arc::new(server.config(PeerNames::default())?));
        Ok(PeerTls {
            connector: TlsConnector::from(Arc::new(client)),
            acceptor,
            server: Arc::new(server),
        })
    }

    /// The same settings, accepting client certificates valid for one of `names`' hosts (a
    /// node's own set: clones of one `PeerTls` given to several nodes in one process must
    /// each be bound to their node's names).
    pub fn for_members(&self, names: PeerNames) -> Result<PeerTls, PeerTlsError> {
        Ok(PeerTls {
            connector: self.connector.clone(),
            acceptor: TlsAcceptor::from(Arc::new(self.server.config(names)?)),
            server: self.server.clone(),
        })
    }
}

/// The name a peer's certificate must carry: the host part of its `host:port` address (an
/// IP address stays one, `[v6]` loses its brackets).
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, PeerError> {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => {
            return Err(PeerError::NotHostPort {
                addr: addr.to_owned(),
            });
        }
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_owned()).map_err(|source| PeerError::BadHost {
        addr: addr.to_owned(),
        host: host.to_owned(),
        source,
    })
}

/// How a node's peer connections are made and accepted: plain or TLS, and where handshake
/// failures are counted.
#[derive(Clone)]
pub(crate) struct Transport {
    tls: Option<PeerTls>,
    metrics: PeerRpcMetrics,
    handshake_timeout: Duration,
}

impl Transport {
    pub(crate) fn new(
        tls: Option<PeerTls>,
        metrics: PeerRpcMetrics,
        handshake_timeout: Duration,
    ) -> Self {
        Transport {
            tls,
            metrics,
            handshake_timeout,
        }
    }

    /// How long an accepted connection has for its TLS handshake and its hello together (the
    /// dialling side's connect deadline, which also covers both).
    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// Where the peer network's counters are.
    pub(crate) fn metrics(&self) -> &PeerRpcMetrics {
        &self.metrics
    }

    /// Opens a TCP connection to `addr` and, with TLS, does the handshake (the caller bounds
    /// the whole with its connect timeout).
    pub(crate) async fn connect(&self, addr: &str) -> Result<PeerStream, PeerError> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| PeerError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return Ok(PeerStream::Plain(tcp));
        };
        let name = server_name(addr)?;
        match tls.connector.connect(name, tcp).await {
            Ok(stream) => Ok(PeerStream::Tls(Box::new(stream.into()))),
            Err(source) => {
                self.metrics.tls_failures("client").inc();
                Err(PeerError::Handshake {
                    addr: addr.to_owned(),
                    source,
                })
            }
        }
    }

    /// Completes an accepted connection: with TLS, the handshake, which must present a client
    /// certificate signed by the CA and naming a peer ([`PeerNames`]). A failure is counted
    /// and logged; the connection is closed by dropping it.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        peer: std::net::SocketAddr,
    ) -> Option<PeerStream> {
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return Some(PeerStream::Plain(tcp));
        };
        let failed = |reason: PeerError| {
            self.metrics.tls_failures("server").inc();
            tracing::warn!(%peer, %reason, "refused a peer connection: TLS handshake failed");
            None
        };
        match tokio::time::timeout(self.handshake_timeout, tls.acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => Some(PeerStream::Tls(Box::new(stream.into()))),
            Ok(Err(err)) => failed(PeerError::InboundHandshake(err)),
            Err(_) => failed(PeerError::InboundHandshakeTimeout {
                within: self.handshake_timeout,
            }),
        }
    }
}

/// Why an inbound handshake failed, readable: rustls shows a custom certificate refusal (a
/// certificate naming no peer, see [`PeerNames`]) through its `Debug`; this gives its message.
pub(crate) fn describe_handshake_failure(
    err: &io::Error,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    match err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))) => {
            write!(f, "invalid peer certificate: {other}")
        }
        _ => write!(f, "{err}"),
    }
}

/// A peer connection: plain TCP, or TLS over TCP.
pub(crate) enum PeerStream {
    /// Plain text (no `cluster.tls`).
    Plain(TcpStream),
    /// TLS, either side (boxed: the TLS state is large, the plain variant should not pay for
    /// it).
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            PeerStream::Plain(s) => s.is_write_vectored(),
            PeerStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests;
