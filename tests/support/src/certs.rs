//! Throwaway TLS material for tests: a self-signed CA and a server certificate it signed, as
//! PEM files in a temporary directory that disappears with the value.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use strongsync::config::TlsConfig;
use tempfile::TempDir;

/// A CA certificate and a server certificate plus key signed by it.
#[derive(Debug)]
pub struct TestCerts {
    /// The CA certificate a client verifies the server with.
    pub ca: PathBuf,
    /// The server's certificate chain (leaf only).
    pub cert: PathBuf,
    /// The server's private key (PKCS#8).
    pub key: PathBuf,
    _dir: TempDir,
}

impl TestCerts {
    /// A fresh CA and a server certificate for `names` (IP addresses become IP SANs, anything
    /// else DNS SANs; the first name is also the subject's common name).
    pub fn generate(names: &[&str]) -> TestCerts {
        let dir = tempfile::Builder::new()
            .prefix("strongsync-certs-")
            .tempdir()
            .expect("create a directory for test certificates");

        let mut ca_params = CertificateParams::new(Vec::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "strongsync test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign the CA");
        let issuer = Issuer::new(ca_params, ca_key);

        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server parameters");
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(DnType::CommonName, first.as_str());
        }
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("server key");
        let cert = params
            .signed_by(&key, &issuer)
            .expect("sign the server cert");

        let certs = TestCerts {
            ca: dir.path().join("ca.pem"),
            cert: dir.path().join("server-cert.pem"),
            key: dir.path().join("server-key.pem"),
            _dir: dir,
        };
        write(&certs.ca, &ca_cert.pem());
        write(&certs.cert, &cert.pem());
        write(&certs.key, &key.serialize_pem());
        certs
    }

    /// The server certificate and key as the proxy's TLS setting.
    pub fn tls_config(&self) -> TlsConfig {
        TlsConfig::with_files(&self.cert, &self.key)
    }
}

fn write(path: &Path, pem: &str) {
    fs::write(path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
