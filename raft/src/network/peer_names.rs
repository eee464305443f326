//! Who may connect to this node's Raft listener as a peer, beyond holding a certificate of the
//! cluster CA: a client certificate must be valid (as a server certificate would be, wildcards
//! included) for the host of one of [`PeerNames`]: the configured addresses (the `--peer` list
//! and this node's own advertised address) and the Raft addresses of the current members, which
//! [`crate::RaftNode`] updates from openraft's membership as it changes. So a certificate the CA
//! issued for something else (a broker client, another service) cannot join as a voter.
//!
//! [`MemberCertVerifier`] wraps rustls's WebPKI client verifier: the chain is checked first,
//! then the names; a refusal fails the handshake with a message naming the certificate's names
//! and the hosts it was checked against.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::client::verify_server_name;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme,
};

use crate::network::refusal::CertificateRefusal;
use crate::network::tls::server_name;

/// The hosts a peer's certificate may name: configured ones and the current members'. Clones
/// share the set.
#[derive(Clone, Debug, Default)]
pub struct PeerNames(Arc<RwLock<Hosts>>);

#[derive(Debug, Default)]
struct Hosts {
    configured: BTreeSet<String>,
    members: BTreeSet<String>,
}

/// The host of a `host:port` address (`[v6]` without brackets); `None` when it is not one.
fn host_of(addr: &str) -> Option<String> {
    server_name(addr).ok().map(|name| match name {
        ServerName::DnsName(dns) => dns.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(ip).to_string(),
        other => format!("{other:?}"),
    })
}

impl PeerNames {
    /// Adds the hosts of configured peer addresses (`host:port`); an address that is not one
    /// is skipped (it cannot be dialled either).
    pub fn add_configured<'a>(&self, addrs: impl IntoIterator<Item = &'a str>) {
        let hosts: Vec<String> = addrs.into_iter().filter_map(host_of).collect();
        self.write(|h| h.configured.extend(hosts));
    }

    /// Replaces the members' hosts with those of `addrs` (the current membership's Raft
    /// addresses, voters and learners).
    pub fn set_members<'a>(&self, addrs: impl IntoIterator<Item = &'a str>) {
        let hosts: BTreeSet<String> = addrs.into_iter().filter_map(host_of).collect();
        self.write(|h| h.members = hosts);
    }

    /// Every host a peer certificate is checked against, sorted.
    pub fn hosts(&self) -> Vec<String> {
        let hosts = self.0.read().unwrap_or_else(PoisonError::into_inner);
        hosts
            .configured
            .union(&hosts.members)
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    fn write(&self, change: impl FnOnce(&mut Hosts)) {
        change(&mut self.0.write().unwrap_or_else(PoisonError::into_inner));
    }

    /// Accepts `cert` when it is valid for one of the hosts; otherwise says which names it
    /// carries and which hosts it was checked against.
    pub fn check(&self, cert: &CertificateDer<'_>) -> Result<(), CertificateRefusal> {
        let parsed = ParsedCertificate::try_from(cert).map_err(CertificateRefusal::Unparsable)?;
        let hosts = self.hosts();
        for host in &hosts {
            let Ok(name) = ServerName::try_from(host.as_str()) else {
                continue;
            };
            if verify_server_name(&parsed, &name).is_ok() {
                return Ok(());
            }
        }
        Err(CertificateRefusal::NoMemberHost {
            names: presented_names(&parsed),
            hosts,
        })
    }
}

/// The subjectAltNames of `cert` as rustls reports them (`DnsName("a.b")`, `IpAddress(10.0.0.1)`),
/// read from the refusal of a name no certificate carries.
fn presented_names(cert: &ParsedCertificate<'_>) -> String {
    let probe = ServerName::try_from("statestore-peer-check.invalid")
        .unwrap_or_else(|e| unreachable!("a static DNS name: {e}"));
    match verify_server_name(cert, &probe) {
        Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            presented,
            ..
        })) if !presented.is_empty() => format!("[{}]", presented.join(", ")),
        _ => "no usable subjectAltName".to_owned(),
    }
}

/// The CA check of `inner`, then [`PeerNames::check`].
#[derive(Debug)]
pub(crate) struct MemberCertVerifier {
    pub(crate) inner: Arc<dyn ClientCertVerifier>,
    pub(crate) names: PeerNames,
}

impl ClientCertVerifier for MemberCertVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        // The refusal travels as a rustls error: the handshake fails with a
        // `bad_certificate` alert.
        self.names.check(end_entity).map_err(|refusal| {
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                refusal,
            ))))
        })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
