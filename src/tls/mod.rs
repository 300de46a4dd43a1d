//! TLS for the client leg: loads the configured certificate and key into a rustls acceptor.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

/// Why the TLS endpoint could not be set up.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{0} contains no PEM certificate")]
    NoCertificate(PathBuf),
    /// The key file holds no private key.
    #[error("{0} contains no PEM private key")]
    NoKey(PathBuf),
    /// rustls refused the pair.
    #[error("invalid certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Builds the acceptor for `files`.
///
/// # Errors
/// [`TlsError`] naming the file or the problem.
pub fn acceptor(files: TlsFiles<'_>) -> Result<TlsAcceptor, TlsError> {
    let certs = rustls_pemfile::certs(&mut reader(files.cert)?)
        .collect::<Result<Vec<CertificateDer<'static>>, _>>()
        .map_err(|source| TlsError::Read {
            path: files.cert.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(files.cert.to_owned()));
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut reader(files.key)?)
        .map_err(|source| TlsError::Read {
            path: files.key.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsError::NoKey(files.key.to_owned()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn reader(path: &Path) -> Result<BufReader<File>, TlsError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
}
