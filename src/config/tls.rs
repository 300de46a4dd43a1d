//! TLS settings: the client leg's certificate (`[tls]`, or one strongsync makes itself) and how
//! the primary leg uses TLS (`primary_tls`, named as MySQL's clients name their `--ssl-mode`).

use std::path::{Path, PathBuf};

use super::define::{settings, Meta};
use super::ConfigError;

settings! {
    /// TLS for clients and replicas, on by default: with `tls.cert` and `tls.key` strongsync
    /// uses them; without, it makes a self-signed certificate at start (kept next to the state
    /// file when there is one), as MySQL does at its first start.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TlsConfig in "tls" {
        /// PEM certificate chain, leaf first, with `tls.key`: replaces the certificate
        /// strongsync would make itself.
        #[setting(Meta::FLAG)]
        pub cert: Option<PathBuf> = None,
        /// PEM private key (PKCS#8, PKCS#1 or SEC1) for `tls.cert`.
        #[setting(Meta::FLAG)]
        pub key: Option<PathBuf> = None,
        /// No TLS for clients: the greeting offers none. A client that then sends a password
        /// in clear (`caching_sha2_password`'s full authentication) is refused. Read at start.
        #[setting(Meta::FLAG.formerly("no-tls"))]
        pub disabled: bool = false,
    }
}

/// PEM files for the client-facing TLS endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsFiles<'a> {
    /// Certificate chain, leaf first.
    pub cert: &'a Path,
    /// Private key.
    pub key: &'a Path,
}

/// How strongsync's connections to the primary use TLS: its sessions' (and so the replicas'
/// dumps), the probe's, and those of follow and promote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PrimaryTls {
    /// Plain TCP.
    Disabled,
    /// TLS when the primary offers it, its certificate unchecked; plain TCP otherwise.
    Preferred,
    /// TLS, or no connection; the certificate unchecked.
    Required,
    /// TLS with a certificate signed by `primary_tls_ca`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host strongsync connects to.
    VerifyIdentity,
}

words!(PrimaryTls {
    Disabled = "disabled",
    Preferred = "preferred",
    Required = "required",
    VerifyCa = "verify_ca",
    VerifyIdentity = "verify_identity",
});

impl PrimaryTls {
    /// TLS is tried at all.
    pub fn wanted(self) -> bool {
        self != PrimaryTls::Disabled
    }

    /// A primary that offers no TLS is not used.
    pub fn required(self) -> bool {
        self >= PrimaryTls::Required
    }

    /// The certificate is checked against `primary_tls_ca`.
    pub fn verifies(self) -> bool {
        self >= PrimaryTls::VerifyCa
    }
}

/// File names of the certificate strongsync makes, and of its key, in the state file's
/// directory.
pub const GENERATED_FILES: (&str, &str) = ("strongsync-cert.pem", "strongsync-key.pem");

// === impl TlsConfig ===

impl TlsConfig {
    /// Where the certificate clients see is kept, if it is in a file: `tls.cert`, or the one
    /// strongsync makes next to `state_file`. `None` when TLS is off or the certificate lives
    /// in memory only.
    pub fn certificate_file(&self, state_file: Option<&Path>) -> Option<PathBuf> {
        if self.disabled {
            return None;
        }
        self.cert
            .clone()
            .or_else(|| state_file.map(|state| generated_files(state).0))
    }

    /// The certificate and key, if they are configured.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] if only one of the two is given.
    pub fn files(&self) -> Result<Option<TlsFiles<'_>>, ConfigError> {
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(ConfigError::Missing { key: "tls.key" }),
            (None, Some(_)) => Err(ConfigError::Missing { key: "tls.cert" }),
        }
    }

    /// Configured certificate and key (as tests and embedders give them).
    pub fn with_files(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        TlsConfig {
            cert: Some(cert.into()),
            key: Some(key.into()),
            disabled: false,
        }
    }
}

/// The certificate strongsync makes and its key, next to `state_file`.
pub fn generated_files(state_file: &Path) -> (PathBuf, PathBuf) {
    let dir = state_file.parent().unwrap_or(Path::new("."));
    (dir.join(GENERATED_FILES.0), dir.join(GENERATED_FILES.1))
}
