//! HTTPS for the HTTP listener (`[admin.tls]`: `/metrics`, health and the admin API), with
//! rustls and the ring provider.
//!
//! [`TlsListener`] is an [`axum::serve::Listener`]: a background task accepts TCP connections
//! and runs each TLS handshake in a task of its own (bounded by [`HANDSHAKE_TIMEOUT`]), so a
//! slow or silent client holds up nobody else; finished handshakes queue for axum. Graceful
//! shutdown works as with a plain listener. A failed handshake is logged at DEBUG (scanners and
//! plain-HTTP clients are common) and the connection dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::error::NodeError;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for axum to take them.
const READY_QUEUE: usize = 64;

fn invalid(setting: &str, err: impl std::fmt::Display) -> NodeError {
    NodeError::Config(format!("{setting}: {err}"))
}

/// The server side of HTTPS from a PEM certificate chain and its private key (`setting`
/// prefixes the errors, e.g. `admin.tls`).
pub fn server_config(
    setting: &str,
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ServerConfig>, NodeError> {
    let read = |name: &str, path: &Path| {
        std::fs::read(path).map_err(|e| {
            invalid(
                &format!("{setting}.{name}"),
                format!("{}: {e}", path.display()),
            )
        })
    };
    let chain = CertificateDer::pem_slice_iter(&read("cert_file", cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&format!("{setting}.cert_file"), e))?;
    if chain.is_empty() {
        return Err(invalid(
            &format!("{setting}.cert_file"),
            "no certificate in it",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&read("key_file", key)?)
        .map_err(|e| invalid(&format!("{setting}.key_file"), e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| invalid(setting, e))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| invalid(&format!("{setting}.cert_file/key_file"), e))?;
    // axum serves HTTP/1.1 here (its auto builder would take h2 too, but clients of the
    // admin API and Prometheus speak HTTP/1.1).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client side: trust the PEM CA certificates in `ca` (the admin API client's `--ca`), or
/// the system's CA certificates when there is none.
pub fn client_config(ca: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, NodeError> {
    let roots = match ca {
        None => crate::tls::system_roots()?,
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for der in CertificateDer::pem_slice_iter(ca) {
                let der = der.map_err(|e| invalid("--ca", e))?;
                roots.add(der).map_err(|e| invalid("--ca", e))?;
            }
            if roots.is_empty() {
                return Err(invalid("--ca", "no certificate in it"));
            }
            roots
        }
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| invalid("--ca", e))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener that hands axum TLS streams.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `config` on `listener`.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        let accepting = tokio::spawn(accept_loop(listener, acceptor, tx));
        Ok(TlsListener {
            ready,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "accepting an HTTPS connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if ready.is_closed() {
            return;
        }
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = ready.send((stream, peer)).await;
                }
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "HTTPS handshake failed");
                }
                Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (it never does while the listener lives): no more
            // connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
