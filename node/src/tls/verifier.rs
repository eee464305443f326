//! A server-certificate verifier that checks exactly like rustls's WebPKI verifier and keeps
//! the reason of a refusal: ntex-tls's handshake reports a refused certificate only as
//! "disconnected", and "the broker's certificate is not valid for this name" is what an
//! operator needs to read in the log.

use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// Delegates every check to the WebPKI verifier; remembers the last refusal.
#[derive(Debug)]
pub struct RecordingVerifier {
    inner: Arc<WebPkiServerVerifier>,
    refusal: Mutex<Option<Error>>,
}

impl RecordingVerifier {
    /// Wraps `inner`.
    pub fn new(inner: Arc<WebPkiServerVerifier>) -> RecordingVerifier {
        RecordingVerifier {
            inner,
            refusal: Mutex::new(None),
        }
    }

    /// Why the server's certificate or signature was refused, if it was.
    pub fn refusal(&self) -> Option<Error> {
        self.refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(err) = &result {
            *self.refusal.lock().unwrap_or_else(PoisonError::into_inner) = Some(err.clone());
        }
        result
    }
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.record(self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.record(self.inner.verify_tls12_signature(message, cert, dss))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.record(self.inner.verify_tls13_signature(message, cert, dss))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}
