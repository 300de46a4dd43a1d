//! How strongsync's connections to the primary use TLS (`primary_tls`): the rustls client the
//! sessions' connections use, and the same choice as `mysql_async` options for the probe's and
//! the failover calls' connections.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_rustls::TlsConnector;

use super::{provider, reader, TlsError};
use crate::config::PrimaryTls;

/// The primary leg's TLS, built once at start.
#[derive(Clone)]
pub struct PrimaryTlsConnector {
    mode: PrimaryTls,
    ca: Option<PathBuf>,
    /// `None` under `disabled`.
    connector: Option<TlsConnector>,
}

impl std::fmt::Debug for PrimaryTlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimaryTlsConnector")
            .field("mode", &self.mode)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl PrimaryTlsConnector {
    /// The connector for `mode`, trusting the authorities in `ca` where the mode checks.
    ///
    /// # Errors
    /// [`TlsError`]: the CA file cannot be read or holds no authority.
    pub fn new(mode: PrimaryTls, ca: Option<&Path>) -> Result<Self, TlsError> {
        let verifier: Option<Arc<dyn ServerCertVerifier>> = match (mode, ca) {
            (PrimaryTls::Disabled, _) => None,
            (PrimaryTls::Preferred | PrimaryTls::Required, _) => Some(Arc::new(Unchecked)),
            (PrimaryTls::VerifyCa | PrimaryTls::VerifyIdentity, None) => {
                return Err(TlsError::Authorities {
                    path: PathBuf::new(),
                    problem: format!("primary_tls = \"{mode}\" needs primary_tls_ca"),
                })
            }
            (PrimaryTls::VerifyCa | PrimaryTls::VerifyIdentity, Some(ca)) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(authorities(ca)?),
                    provider(),
                )
                .build()
                .map_err(|e| TlsError::Authorities {
                    path: ca.to_owned(),
                    problem: e.to_string(),
                })?;
                Some(if mode == PrimaryTls::VerifyCa {
                    Arc::new(AnyName(webpki))
                } else {
                    webpki
                })
            }
        };
        let connector = verifier
            .map(|verifier| -> Result<TlsConnector, TlsError> {
                let config = ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()?
                    .dangerous()
                    .with_custom_certificate_verifier(verifier)
                    .with_no_client_auth();
                Ok(TlsConnector::from(Arc::new(config)))
            })
            .transpose()?;
        Ok(PrimaryTlsConnector {
            mode,
            ca: ca.map(Path::to_owned),
            connector,
        })
    }

    /// Plain TCP only (tests and embedders that want none).
    pub fn disabled() -> Self {
        PrimaryTlsConnector {
            mode: PrimaryTls::Disabled,
            ca: None,
            connector: None,
        }
    }

    /// The mode.
    pub fn mode(&self) -> PrimaryTls {
        self.mode
    }

    /// What starts TLS on a session's connection, unless the mode is `disabled`.
    pub fn connector(&self) -> Option<&TlsConnector> {
        self.connector.as_ref()
    }

    /// The name the certificate must bear for a primary at `addr` (`HOST:PORT`).
    ///
    /// # Errors
    /// A host that is neither an IP address nor a DNS name.
    pub fn server_name(
        addr: &str,
    ) -> Result<ServerName<'static>, rustls::pki_types::InvalidDnsNameError> {
        let host = addr
            .rsplit_once(':')
            .map_or(addr, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        ServerName::try_from(host.to_owned())
    }
}

/// `mode` as `mysql_async` options, trusting `ca` where the mode checks: `None` under
/// `disabled`.
pub fn ssl_opts(mode: PrimaryTls, ca: Option<&Path>) -> Option<mysql_async::SslOpts> {
    let opts = mysql_async::SslOpts::default();
    match mode {
        PrimaryTls::Disabled => None,
        PrimaryTls::Preferred | PrimaryTls::Required => {
            Some(opts.with_danger_accept_invalid_certs(true))
        }
        PrimaryTls::VerifyCa | PrimaryTls::VerifyIdentity => Some(
            opts.with_root_certs(ca.iter().map(|ca| ca.to_path_buf().into()).collect())
                .with_disable_built_in_roots(true)
                .with_danger_skip_domain_validation(mode == PrimaryTls::VerifyCa),
        ),
    }
}

fn authorities(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut reader(ca)?) {
        let cert = cert.map_err(|source| TlsError::Read {
            path: ca.to_owned(),
            source,
        })?;
        roots.add(cert).map_err(|e| TlsError::Authorities {
            path: ca.to_owned(),
            problem: e.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(TlsError::Authorities {
            path: ca.to_owned(),
            problem: "no PEM certificate in it".into(),
        });
    }
    Ok(roots)
}

/// `preferred` and `required`: any certificate, as MySQL's clients take one in those modes.
/// The handshake's signatures are still checked, so the session keys are the peer's.
#[derive(Debug)]
struct Unchecked;

/// `verify_ca`: a chain to a trusted authority, whatever name the certificate bears.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

fn schemes() -> Vec<SignatureScheme> {
    provider()
        .signature_verification_algorithms
        .supported_schemes()
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        schemes()
    }
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
