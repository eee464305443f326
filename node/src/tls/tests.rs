//! PEM loading and reloading against the files in `testdata/` (see its README).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;

/// notAfter of `testdata/client.pem`.
const CLIENT_NOT_AFTER: i64 = 4_949_112_556;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/tls/testdata")
        .join(name)
}

fn files(ca: &Path, cert: &Path, key: &Path) -> TlsFiles {
    TlsFiles {
        ca: Some(ca.to_owned()),
        client: Some(ClientIdentity {
            cert: cert.to_owned(),
            key: key.to_owned(),
        }),
    }
}

fn error_of(files: &TlsFiles) -> String {
    match files.load() {
        Ok(_) => panic!("{files:?} must be refused"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn a_ca_and_a_client_certificate_load_and_the_expiry_is_read() {
    let loaded = files(&data("ca.pem"), &data("client.pem"), &data("client.key"))
        .load()
        .expect("valid files load");
    assert_eq!(loaded.client_not_after, Some(CLIENT_NOT_AFTER));
    assert!(loaded.config.client_auth_cert_resolver.has_certs());
    let anonymous = TlsFiles {
        ca: Some(data("ca.pem")),
        client: None,
    }
    .load()
    .expect("a CA alone loads");
    assert_eq!(anonymous.client_not_after, None);
    assert!(!anonymous.config.client_auth_cert_resolver.has_certs());
}

#[test]
fn unusable_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let missing = dir.path().join("missing.pem");
    let cases: Vec<(&str, TlsFiles, Vec<String>)> = vec![
        (
            "missing CA file",
            files(&missing, &data("client.pem"), &data("client.key")),
            vec!["CA file".into(), missing.display().to_string()],
        ),
        (
            "CA file without certificates",
            files(&garbage, &data("client.pem"), &data("client.key")),
            vec!["CA file".into(), garbage.display().to_string()],
        ),
        (
            "client certificate without certificates",
            files(&data("ca.pem"), &garbage, &data("client.key")),
            vec!["client certificate".into(), garbage.display().to_string()],
        ),
        (
            "key file holding a certificate",
            files(&data("ca.pem"), &data("client.pem"), &data("client.pem")),
            vec![
                "client key".into(),
                data("client.pem").display().to_string(),
            ],
        ),
        (
            "missing key file",
            files(&data("ca.pem"), &data("client.pem"), &missing),
            vec!["client key".into(), missing.display().to_string()],
        ),
        (
            "key of another certificate",
            files(&data("ca.pem"), &data("client.pem"), &data("other.key")),
            vec![
                data("client.pem").display().to_string(),
                data("other.key").display().to_string(),
            ],
        ),
    ];
    for (name, files, expected) in cases {
        let message = error_of(&files);
        for part in expected {
            assert!(
                message.contains(&part),
                "{name}: {message:?} lacks {part:?}"
            );
        }
    }
}

#[test]
fn reloading_follows_the_files_and_keeps_the_last_good_configuration() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("cert.key"),
    );
    for (from, to) in [("ca.pem", &ca), ("client.pem", &cert), ("client.key", &key)] {
        std::fs::copy(data(from), to).expect("copy");
    }
    let reloading = Reloading::load(files(&ca, &cert, &key)).expect("loads");
    let first = reloading.current().config;
    assert!(matches!(reloading.check(), Reload::Unchanged));

    // A key that does not match: refused once, the configuration stays.
    std::fs::copy(data("other.key"), &key).expect("copy");
    assert!(matches!(reloading.check(), Reload::Failed(_)));
    assert!(matches!(reloading.check(), Reload::Unchanged));
    assert!(Arc::ptr_eq(&first, &reloading.current().config));
    // Unreadable: refused once too.
    std::fs::remove_file(&key).expect("remove");
    assert!(matches!(reloading.check(), Reload::Failed(_)));
    assert!(matches!(reloading.check(), Reload::Unchanged));
    assert!(Arc::ptr_eq(&first, &reloading.current().config));

    // Back to a valid key: a new configuration.
    std::fs::copy(data("client.key"), &key).expect("copy");
    match reloading.check() {
        Reload::Reloaded(loaded) => assert_eq!(loaded.client_not_after, Some(CLIENT_NOT_AFTER)),
        other => panic!("expected a reload, got {other:?}"),
    }
    assert!(!Arc::ptr_eq(&first, &reloading.current().config));
    assert!(matches!(reloading.check(), Reload::Unchanged));
}

#[test]
fn a_pem_files_expiry_is_its_first_certificates_and_unreadable_files_have_none() {
    assert_eq!(
        pem_file_not_after_unix(&data("client.pem")),
        Some(CLIENT_NOT_AFTER)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    assert_eq!(pem_file_not_after_unix(&garbage), None);
    assert_eq!(
        pem_file_not_after_unix(&dir.path().join("missing.pem")),
        None
    );
}
