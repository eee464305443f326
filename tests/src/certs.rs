//! Test certificates for peer TLS and HTTPS: CAs and the leaf certificates they sign (EC P-256,
//! valid two days, for server and client use), in a temporary directory that lives as long as
//! the [`Pki`]. The broker and reload tests use [`crate::pki`] (RSA, files named per CA, and
//! the file-swap helpers); both run `openssl` through [`crate::pki::openssl`].

use std::path::{Path, PathBuf};

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
        crate::pki::openssl(self.dir(), args);
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
        self.openssl(&[
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
            "2",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ]);
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
