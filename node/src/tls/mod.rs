//! TLS client settings shared by the node's broker connection and `statestore kv`: PEM files
//! (CA certificates, an optional client certificate chain and its private key) made into a
//! rustls [`ClientConfig`] with the ring provider, and [`Reloading`], which re-reads the files
//! when they change and keeps the last good configuration when the new files are unusable.
//!
//! Every error names the file it is about. Without a CA file the system's CA certificates are
//! trusted (`rustls-native-certs`: `SSL_CERT_FILE`/`SSL_CERT_DIR`, else the distribution's
//! bundle).

mod not_after;
mod verifier;

pub use not_after::{not_after_unix, pem_file_not_after_unix};
pub use verifier::RecordingVerifier;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::error::NodeError;

/// Where the PEM files are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates the server's certificate must chain to; `None`: the system's.
    pub ca: Option<PathBuf>,
    /// Client certificate chain and its private key (X.509 client authentication).
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain and its key, as files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// PEM certificate chain, the client's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// What the files held when they were read (compared between polls).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsContents {
    ca: Option<Vec<u8>>,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
}

/// A usable configuration and what it was made of.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The rustls configuration.
    pub config: Arc<ClientConfig>,
    /// Expiry (notAfter) of the client certificate, seconds since the epoch, when there is one
    /// and it could be read.
    pub client_not_after: Option<i64>,
    /// The server-certificate verifier inside `config`.
    verifier: Arc<WebPkiServerVerifier>,
}

impl Loaded {
    /// `config` for one connection, with a verifier that tells why it refused the server's
    /// certificate (for TLS layers that do not report it).
    pub fn for_one_connection(&self) -> (Arc<ClientConfig>, Arc<RecordingVerifier>) {
        let recorder = Arc::new(RecordingVerifier::new(self.verifier.clone()));
        let mut config = (*self.config).clone();
        config
            .dangerous()
            .set_certificate_verifier(recorder.clone());
        (Arc::new(config), recorder)
    }
}

fn tls_error(message: String) -> NodeError {
    NodeError::Tls(message)
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>, NodeError> {
    std::fs::read(path)
        .map_err(|e| tls_error(format!("cannot read {what} {}: {e}", path.display())))
}

impl TlsFiles {
    /// Reads the files (not the system's CA certificates).
    pub fn read(&self) -> Result<TlsContents, NodeError> {
        Ok(TlsContents {
            ca: self
                .ca
                .as_deref()
                .map(|path| read("CA file", path))
                .transpose()?,
            cert: self
                .client
                .as_ref()
                .map(|c| read("client certificate", &c.cert))
                .transpose()?,
            key: self
                .client
                .as_ref()
                .map(|c| read("client key", &c.key))
                .transpose()?,
        })
    }

    /// Reads the files and builds the configuration.
    pub fn load(&self) -> Result<Loaded, NodeError> {
        self.build(&self.read()?)
    }

    /// Builds the configuration from what [`TlsFiles::read`] returned.
    pub fn build(&self, contents: &TlsContents) -> Result<Loaded, NodeError> {
        let roots = match (&self.ca, &contents.ca) {
            (Some(path), Some(pem)) => ca_roots(path, pem)?,
            _ => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| tls_error(format!("CA certificates: {e}")))?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::DEFAULT_VERSIONS)
            .map_err(|e| tls_error(format!("protocol versions: {e}")))?
            .with_webpki_verifier(verifier.clone());
        let (config, client_not_after) = match (&self.client, &contents.cert, &contents.key) {
            (Some(files), Some(cert), Some(key)) => {
                let chain = certificates(cert).map_err(|e| {
                    tls_error(format!("client certificate {}: {e}", files.cert.display()))
                })?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                    tls_error(format!(
                        "client key {}: no usable PEM private key ({e})",
                        files.key.display()
                    ))
                })?;
                let not_after = chain.first().and_then(|cert| not_after_unix(cert));
                let config = builder.with_client_auth_cert(chain, key).map_err(|e| {
                    tls_error(format!(
                        "client certificate {} with key {}: {e}",
                        files.cert.display(),
                        files.key.display()
                    ))
                })?;
                (config, not_after)
            }
            _ => (builder.with_no_client_auth(), None),
        };
        Ok(Loaded {
            config: Arc::new(config),
            client_not_after,
            verifier,
        })
    }
}

/// The certificates of a PEM file; an error if it holds none or one does not decode.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file ({e})"))?;
    if chain.is_empty() {
        return Err("no PEM certificate (BEGIN CERTIFICATE) in it".to_owned());
    }
    Ok(chain)
}

fn ca_roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, NodeError> {
    let mut roots = RootCertStore::empty();
    for cert in
        certificates(pem).map_err(|e| tls_error(format!("CA file {}: {e}", path.display())))?
    {
        roots
            .add(cert)
            .map_err(|e| tls_error(format!("CA file {}: {e}", path.display())))?;
    }
    Ok(roots)
}

/// The system's CA certificates (`rustls-native-certs`: the OS bundle, or `SSL_CERT_FILE` /
/// `SSL_CERT_DIR`).
pub(crate) fn system_roots() -> Result<RootCertStore, NodeError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        return Err(tls_error(format!(
            "no system CA certificates found{why}: give a CA file"
        )));
    }
    Ok(roots)
}

/// The outcome of one [`Reloading::check`].
#[derive(Debug)]
pub enum Reload {
    /// The files are as last seen.
    Unchanged,
    /// They changed and the new configuration is in use from the next connection on.
    Reloaded(Loaded),
    /// They changed but cannot be used; the last good configuration stays.
    Failed(NodeError),
}

/// A configuration that follows its files: [`Reloading::check`] re-reads them and swaps in a
/// new configuration when they changed and are valid.
#[derive(Debug)]
pub struct Reloading {
    files: TlsFiles,
    current: RwLock<Loaded>,
    /// What the files held at the last check, valid or not (`None`: unreadable), so that an
    /// unusable change is reported once, not at every check.
    seen: Mutex<Option<TlsContents>>,
}

impl Reloading {
    /// Reads and builds the initial configuration (an error if it is unusable).
    pub fn load(files: TlsFiles) -> Result<Reloading, NodeError> {
        let contents = files.read()?;
        let loaded = files.build(&contents)?;
        Ok(Reloading {
            files,
            current: RwLock::new(loaded),
            seen: Mutex::new(Some(contents)),
        })
    }

    /// The files it follows.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The configuration in use.
    pub fn current(&self) -> Loaded {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Re-reads the files (blocking file IO) and swaps the configuration if they changed and
    /// are valid.
    pub fn check(&self) -> Reload {
        let read = self.files.read();
        let now = read.as_ref().ok().cloned();
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == now {
                return Reload::Unchanged;
            }
            *seen = now;
        }
        match read.and_then(|contents| self.files.build(&contents)) {
            Ok(loaded) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = loaded.clone();
                Reload::Reloaded(loaded)
            }
            Err(err) => Reload::Failed(err),
        }
    }
}

#[cfg(test)]
mod tests;
