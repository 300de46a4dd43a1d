//! TLS on both legs: the certificate clients and replicas see ([`clients`]), and how
//! strongsync's own connections to the primary use TLS ([`primary`]).

pub mod clients;
pub mod password_key;
pub mod primary;

use std::io;
use std::path::PathBuf;

use thiserror::Error;
use tokio_rustls::rustls;

pub use clients::{ClientCert, ClientTls};
pub use password_key::{PasswordKey, PasswordKeyError};
pub use primary::PrimaryTlsConnector;

/// Why TLS could not be set up.
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
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
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
    /// Of the certificate strongsync made and its key, only one is there.
    #[error("{present} exists but {missing} does not: remove the first to have both made again, or restore the second")]
    HalfGenerated {
        /// The one found.
        present: PathBuf,
        /// The one missing.
        missing: PathBuf,
    },
    /// The certificate could not be made.
    #[error("cannot make a self-signed certificate: {0}")]
    Generate(#[source] rcgen::Error),
    /// `[tls]` names only one of the certificate and its key (a configuration that was not
    /// validated): strongsync would make a certificate over the one given.
    #[error("cannot make a self-signed certificate: {0}")]
    Files(#[source] crate::config::ConfigError),
    /// rustls refused the material.
    #[error("invalid certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
    /// The CA file holds nothing rustls takes as a trust anchor.
    #[error("primary_tls_ca {path}: {problem}")]
    Authorities {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// The one crypto provider strongsync's TLS uses, on both legs (made once: every handshake's
/// signature check asks for it).
fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: std::sync::OnceLock<std::sync::Arc<rustls::crypto::CryptoProvider>> =
        std::sync::OnceLock::new();
    std::sync::Arc::clone(
        PROVIDER.get_or_init(|| std::sync::Arc::new(rustls::crypto::ring::default_provider())),
    )
}

/// Makes ring the process's default provider, for the clients built without one given
/// (`mysql_async`'s). Harmless when one is installed already.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn reader(path: &std::path::Path) -> Result<io::BufReader<std::fs::File>, TlsError> {
    std::fs::File::open(path)
        .map(io::BufReader::new)
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
}
