//! [`PeerNames::check`] against certificates made by `openssl` (the harness's [`Pki`]): a
//! certificate is accepted when it is valid for a configured or member host (IP addresses,
//! DNS names, wildcards), refused otherwise with its names and the hosts in the message.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use statestore_harness::pki::Pki;

use super::*;

fn cert(pki: &Pki, name: &str, san: &str) -> CertificateDer<'static> {
    let files = pki.leaf("ca", name, san);
    CertificateDer::from_pem_file(&files.cert).expect("certificate")
}

#[test]
fn a_certificate_must_be_valid_for_a_configured_or_member_host() {
    let pki = Pki::new();
    pki.ca("ca");
    let loopback = cert(&pki, "loopback", "IP:127.0.0.1");
    let wildcard = cert(
        &pki,
        "wildcard",
        "DNS:*.store-headless.ns.svc.cluster.local",
    );
    let intruder = cert(&pki, "intruder", "DNS:intruder.test,IP:10.9.9.9");
    let v6 = cert(&pki, "v6", "IP:::1");

    let names = PeerNames::default();
    let err = names
        .check(&loopback)
        .expect_err("no hosts: nobody")
        .to_string();
    assert!(err.contains("IpAddress(127.0.0.1)"), "{err}");

    names.add_configured(["127.0.0.1:7481", "not an address", "[::1]:7482"]);
    assert_eq!(names.hosts(), ["127.0.0.1", "::1"]);
    names.check(&loopback).expect("a configured IP address");
    names.check(&v6).expect("a configured IPv6 address");
    names
        .check(&wildcard)
        .expect_err("no member under the wildcard yet");

    names.set_members([
        "store-0.store-headless.ns.svc.cluster.local:7481",
        "store-1.store-headless.ns.svc.cluster.local:7481",
    ]);
    names
        .check(&wildcard)
        .expect("a wildcard covering a member's name");
    let err = names
        .check(&intruder)
        .expect_err("a certificate naming no member")
        .to_string();
    assert!(
        err.contains(r#"DnsName("intruder.test")"#) && err.contains("IpAddress(10.9.9.9)"),
        "the names found: {err}"
    );
    assert!(
        err.contains("store-0.store-headless.ns.svc.cluster.local") && err.contains("127.0.0.1"),
        "the hosts checked: {err}"
    );

    // Members replace members; configured hosts stay.
    names.set_members(["store-9.other-headless.ns.svc.cluster.local:7481"]);
    names.check(&wildcard).expect_err("the member left");
    names.check(&loopback).expect("configured");
}
