//! Test certificates made with the `openssl` command, for every TLS test (the broker, the
//! node's broker connection, peers, HTTPS):
//! - [`Pki`]: CAs and the leaves they sign (EC P-256, valid two days, server and client use) in
//!   a temporary directory that lives as long as the [`Pki`];
//! - [`make_pki`]: an RSA CA and its leaves in a directory the test owns, named per CA, and the
//!   file-swap helpers the reload tests use ([`replace_file`], [`replace_contents`]).

use std::path::{Path, PathBuf};
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
        sign(dir, &ca_pem, &ca_key, &csr, &days, &ext, &pem);
    }
}

/// Signs the request `csr` with the CA `ca_pem`/`ca_key` for `days`, with the extensions in
/// `ext`, into `pem` (all names relative to `dir`).
fn sign(dir: &Path, ca_pem: &str, ca_key: &str, csr: &str, days: &str, ext: &str, pem: &str) {
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            ca_pem,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-days",
            days,
            "-extfile",
            ext,
            "-out",
            pem,
        ],
    );
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

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

/// A directory of CAs and certificates.
pub struct Pki {
    dir: tempfile::TempDir,
}

const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

impl Pki {
    /// An empty directory.
    pub fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn openssl(&self, args: &[&str]) {
        openssl(self.dir(), args);
    }

    /// A self-signed CA `name`; returns its certificate (`<name>.pem`; key `<name>.key`).
    pub fn ca(&self, name: &str) -> PathBuf {
        let (pem, key, subject) = (
            format!("{name}.pem"),
            format!("{name}.key"),
            format!("/CN={name}"),
        );
        let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-subj", &subject];
        args.extend(EC_KEY);
        args.extend(["-keyout", &key, "-out", &pem]);
        self.openssl(&args);
        self.dir().join(pem)
    }

    /// A certificate `name` signed by CA `ca` (made with [`Pki::ca`]) for subjectAltName
    /// `san` (e.g. `IP:127.0.0.1` or `DNS:node-1,IP:10.0.0.1`).
    pub fn leaf(&self, ca: &str, name: &str, san: &str) -> CertFiles {
        let (pem, key, csr, ext) = (
            format!("{name}.pem"),
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
        );
        std::fs::write(
            self.dir().join(&ext),
            format!(
                "subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )
        .expect("extensions file");
        let subject = format!("/CN={name}");
        let mut args = vec!["req", "-new", "-nodes", "-subj", &subject];
        args.extend(EC_KEY);
        args.extend(["-keyout", &key, "-out", &csr]);
        self.openssl(&args);
        let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
        sign(self.dir(), &ca_pem, &ca_key, &csr, "2", &ext, &pem);
        CertFiles {
            cert: self.dir().join(pem),
            key: self.dir().join(key),
        }
    }

    /// Writes `text` to `name` in the directory (a token file, a CA bundle) and returns its
    /// path.
    pub fn file(&self, name: &str, text: &[u8]) -> PathBuf {
        let path = self.dir().join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}
