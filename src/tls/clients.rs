//! The certificate clients and replicas see: the configured one, or one strongsync makes at its
//! first start and keeps next to the state file (so that clients can pin it), or none at all
//! under `tls.disabled`.

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use super::{provider, TlsError};
use crate::config::{generated_files, TlsConfig, TlsFiles};

/// What the client leg offers.
#[derive(Clone)]
pub struct ClientTls {
    /// What terminates TLS.
    pub acceptor: TlsAcceptor,
    /// Where the certificate came from.
    pub cert: ClientCert,
    /// SHA-256 of the leaf certificate (DER), in hex: what a client pins.
    pub fingerprint: String,
}

/// Where the client leg's certificate came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCert {
    /// `tls.cert`.
    Configured(PathBuf),
    /// Made by strongsync at its first start and kept in this file.
    Generated(PathBuf),
    /// Made at this start and kept in memory only: there is no state file to keep it next to.
    Ephemeral,
}

impl fmt::Display for ClientCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientCert::Configured(path) => write!(f, "configured ({})", path.display()),
            ClientCert::Generated(path) => write!(f, "self-signed ({})", path.display()),
            ClientCert::Ephemeral => f.write_str("self-signed (this run only)"),
        }
    }
}

impl ClientTls {
    /// The client leg's TLS as `config` and the state file's place say: `None` when it is off.
    ///
    /// # Errors
    /// [`TlsError`] naming the file or the problem.
    pub fn new(config: &TlsConfig, state_file: Option<&Path>) -> Result<Option<Self>, TlsError> {
        if config.disabled {
            return Ok(None);
        }
        let files = config.files().map_err(TlsError::Files)?;
        let (certs, key, cert) = match (files, state_file) {
            (Some(files), _) => {
                let (certs, key) = load(files)?;
                (certs, key, ClientCert::Configured(files.cert.to_owned()))
            }
            (None, Some(state)) => {
                // The key readable by its owner only.
                let (cert_path, key_path) = generated_files(state);
                kept(&cert_path, &key_path)?;
                let files = TlsFiles {
                    cert: &cert_path,
                    key: &key_path,
                };
                let (certs, key) = load(files)?;
                (certs, key, ClientCert::Generated(cert_path.clone()))
            }
            (None, None) => {
                let (cert_pem, key_pem) = generate()?;
                let certs = parse_certs(cert_pem.as_bytes(), Path::new("<generated>"))?;
                let key = parse_key(key_pem.as_bytes(), Path::new("<generated>"))?;
                (certs, key, ClientCert::Ephemeral)
            }
        };
        let fingerprint = hex(ring::digest::digest(&ring::digest::SHA256, &certs[0]).as_ref());
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        Ok(Some(ClientTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            cert,
            fingerprint,
        }))
    }
}

/// Makes the certificate and its key at `cert` and `key` unless both are there.
fn kept(cert: &Path, key: &Path) -> Result<(), TlsError> {
    match (cert.exists(), key.exists()) {
        (true, true) => Ok(()),
        (true, false) | (false, true) => {
            let (present, missing) = if cert.exists() {
                (cert, key)
            } else {
                (key, cert)
            };
            Err(TlsError::HalfGenerated {
                present: present.to_owned(),
                missing: missing.to_owned(),
            })
        }
        (false, false) => {
            let (cert_pem, key_pem) = generate()?;
            // The key first, so that a certificate on disk always has its key.
            write_new(key, key_pem.as_bytes(), 0o600)?;
            write_new(cert, cert_pem.as_bytes(), 0o644)?;
            tracing::info!(cert = %cert.display(), key = %key.display(), "made a self-signed certificate for clients");
            Ok(())
        }
    }
}

/// A self-signed certificate and its key, PEM: ECDSA P-256, for `localhost` and loopback
/// (clients that check the name pin the certificate or configure their own).
fn generate() -> Result<(String, String), TlsError> {
    let names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let mut params = rcgen::CertificateParams::new(names).map_err(TlsError::Generate)?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "strongsync auto-generated server certificate",
    );
    let key = rcgen::KeyPair::generate().map_err(TlsError::Generate)?;
    let cert = params.self_signed(&key).map_err(TlsError::Generate)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes `bytes` to a new file at `path` with `mode`, durably: renamed into place once
/// written and synced, so a crash leaves the whole file or none.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let error = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let partial = path.with_extension("pem.partial");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&partial)
        .map_err(error)?;
    file.write_all(bytes).map_err(error)?;
    file.sync_all().map_err(error)?;
    fs::rename(&partial, path).map_err(error)
}

fn load(
    files: TlsFiles<'_>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let read = |path: &Path| {
        fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let certs = parse_certs(&read(files.cert)?, files.cert)?;
    let key = parse_key(&read(files.key)?, files.key)?;
    Ok((certs, key))
}

fn parse_certs(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

fn parse_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut &pem[..])
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsError::NoKey(path.to_owned()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_certificate_is_made_once_next_to_the_state_file_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let first = ClientTls::new(&TlsConfig::default(), Some(&state))
            .unwrap()
            .unwrap();
        let (cert, key) = generated_files(&state);
        assert_eq!(first.cert, ClientCert::Generated(cert.clone()));
        let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the key is its owner's only");
        let again = ClientTls::new(&TlsConfig::default(), Some(&state))
            .unwrap()
            .unwrap();
        assert_eq!(again.fingerprint, first.fingerprint, "the same certificate");
        assert_eq!(first.fingerprint.len(), 64);

        fs::remove_file(&key).unwrap();
        let err = ClientTls::new(&TlsConfig::default(), Some(&state))
            .err()
            .unwrap();
        assert!(matches!(err, TlsError::HalfGenerated { .. }), "{err}");
    }

    #[test]
    fn without_a_state_file_each_start_makes_its_own_and_off_means_none() {
        let a = ClientTls::new(&TlsConfig::default(), None)
            .unwrap()
            .unwrap();
        let b = ClientTls::new(&TlsConfig::default(), None)
            .unwrap()
            .unwrap();
        assert_eq!(a.cert, ClientCert::Ephemeral);
        assert_ne!(a.fingerprint, b.fingerprint);
        let off = TlsConfig {
            disabled: true,
            ..TlsConfig::default()
        };
        assert!(ClientTls::new(&off, None).unwrap().is_none());
    }

    #[test]
    fn a_configured_certificate_replaces_the_made_one() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_pem, key_pem) = generate().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        fs::write(&cert, cert_pem).unwrap();
        fs::write(&key, key_pem).unwrap();
        let state = dir.path().join("state.json");
        let tls = ClientTls::new(&TlsConfig::with_files(&cert, &key), Some(&state))
            .unwrap()
            .unwrap();
        assert_eq!(tls.cert, ClientCert::Configured(cert));
        assert!(!generated_files(&state).0.exists());
    }
}
