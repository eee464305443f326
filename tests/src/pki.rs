//! Test certificates made with the `openssl` command: a CA per name and the leaf certificates
//! it signs (brokers, nodes, clients), in a directory the test owns.

use std::path::Path;
use std::process::Command;

/// Runs `openssl` with `args` in `dir`, failing the test with its output if it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed");
    assert!(output.status.success(), "openssl {args:?}: {output:?}");
}

/// A CA (`<name>-ca.pem`/`-ca.key`) in `dir`, and `leaves` it signs: `<leaf>.pem`/`<leaf>.key`
/// for each (leaf, subjectAltName, e.g. `IP:127.0.0.1` or `DNS:broker.test`), the leaf also
/// being its subject CN. Everything is valid for `days` days (RSA 2048, X.509 v3).
pub fn make_pki(dir: &Path, name: &str, days: u32, leaves: &[(&str, &str)]) {
    let days = days.to_string();
    let ca_key = format!("{name}-ca.key");
    let ca_pem = format!("{name}-ca.pem");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            &days,
            "-subj",
            &format!("/CN={name} test CA"),
            "-keyout",
            &ca_key,
            "-out",
            &ca_pem,
        ],
    );
    for (leaf, san) in leaves {
        let key = format!("{leaf}.key");
        let csr = format!("{leaf}.csr");
        let pem = format!("{leaf}.pem");
        let ext = format!("{leaf}.ext");
        std::fs::write(dir.join(&ext), format!("subjectAltName={san}\n")).expect("ext file");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={leaf}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                &days,
                "-extfile",
                &ext,
                "-out",
                &pem,
            ],
        );
    }
}

/// notAfter of the certificate in `pem`, seconds since the epoch (`openssl x509 -enddate`
/// read by GNU `date`).
pub fn not_after(pem: &Path) -> i64 {
    let output = Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-in"])
        .arg(pem)
        .output()
        .expect("openssl must be installed");
    let text = String::from_utf8_lossy(&output.stdout);
    let date = text
        .trim()
        .strip_prefix("notAfter=")
        .unwrap_or_else(|| panic!("openssl -enddate: {output:?}"));
    let output = Command::new("date")
        .args(["-u", "+%s", "-d", date])
        .output()
        .expect("date");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("date -d {date:?}: {e} ({output:?})"))
}

/// Replaces `to` with a copy of `from` in one step (written aside, then renamed), as
/// Kubernetes and cert-manager swap certificate files: a reader never sees half a file.
pub fn replace_file(from: &Path, to: &Path) {
    let aside = to.with_extension("incoming");
    std::fs::copy(from, &aside).expect("copy");
    std::fs::rename(&aside, to).expect("rename into place");
}

/// Like [`replace_file`], with `contents`.
pub fn replace_contents(to: &Path, contents: &[u8]) {
    let aside = to.with_extension("incoming");
    std::fs::write(&aside, contents).expect("write");
    std::fs::rename(&aside, to).expect("rename into place");
}
