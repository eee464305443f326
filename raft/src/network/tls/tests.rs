//! Unit tests of [`super`]: server names from peer addresses and refused PEM input.

use super::*;

#[test]
fn server_names_come_from_the_host_of_the_address() {
    let ip = server_name("127.0.0.1:7481").expect("ipv4");
    assert!(matches!(ip, ServerName::IpAddress(_)), "{ip:?}");
    let v6 = server_name("[::1]:7481").expect("ipv6");
    assert!(matches!(v6, ServerName::IpAddress(_)), "{v6:?}");
    let dns =
        server_name("statestore-0.statestore-headless.ns.svc.cluster.local:7481").expect("dns");
    assert_eq!(
        dns,
        ServerName::try_from("statestore-0.statestore-headless.ns.svc.cluster.local")
            .expect("name")
    );
    assert!(server_name("no-port").is_err());
    assert!(server_name("host:notaport").is_err());
    assert!(server_name("bad name:1").is_err());
}

#[test]
fn pem_without_certificates_is_refused_naming_the_setting() {
    let err = PeerTls::from_pem(b"", b"", b"").expect_err("empty CA");
    assert!(err.to_string().contains("ca_file"), "{err}");
}
