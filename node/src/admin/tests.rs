use super::*;

#[test]
fn endpoints_parse_into_host_port_and_scheme() {
    let plain = AdminClient::new("http://127.0.0.1:7480/", None, None).expect("plain");
    assert_eq!(
        (plain.host.as_str(), plain.port, plain.prefix.as_str()),
        ("127.0.0.1", 7480, "")
    );
    assert!(plain.tls.is_none());
    let v6 = AdminClient::new("http://[::1]:7480", None, None).expect("v6");
    assert_eq!(
        (v6.host.as_str(), v6.authority.as_str()),
        ("::1", "[::1]:7480")
    );
    assert!(AdminClient::new("ftp://x:1", None, None).is_err());
    assert!(
        AdminClient::new("127.0.0.1:7480", None, None).is_err(),
        "no scheme"
    );
    assert!(
        AdminClient::new("http://x:1", Some(Path::new("/ca.pem")), None).is_err(),
        "--ca needs https"
    );
    let missing = AdminClient::new("https://x:1", Some(Path::new("/nonexistent.pem")), None);
    assert!(missing.is_err(), "an unreadable --ca is an error");
}
