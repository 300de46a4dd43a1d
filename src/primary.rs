//! The way to the primary: TCP to `HOST:PORT`, upgraded to TLS at login when `primary_tls` asks
//! and the primary offers it, or its Unix socket when strongsync runs on the same host.

use std::io;

use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::conn::Conn;
use crate::stream::transport_io;

/// A connection to the primary.
#[derive(Debug, Default)]
pub enum PrimaryStream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// The primary's Unix socket (strongsync a sidecar on the primary's host). It skips the
    /// TCP/IP stack on both ends of the busiest leg the proxy has: point selects through
    /// strongsync ran 9 % faster over it than over TCP loopback (docs/benchmarks-history.md,
    /// "The primary over its Unix socket").
    Unix(UnixStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
    /// In the middle of an upgrade (or after a failed one): every read and write fails.
    #[default]
    Detached,
}

transport_io!(PrimaryStream { Tcp, Unix, Tls });

impl PrimaryStream {
    /// True on TLS or the Unix socket: a transport no one else on the network can read, over
    /// which the primary takes a password in clear.
    pub fn is_secure(&self) -> bool {
        matches!(self, PrimaryStream::Tls(_) | PrimaryStream::Unix(_))
    }

    /// True once TLS is on.
    pub fn is_tls(&self) -> bool {
        matches!(self, PrimaryStream::Tls(_))
    }

    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            PrimaryStream::Tcp(tcp) => Some(tcp),
            PrimaryStream::Tls(tls) => Some(tls.get_ref().0),
            PrimaryStream::Unix(_) | PrimaryStream::Detached => None,
        }
    }
}

/// True if `addr` names a Unix socket (an absolute path) rather than `HOST:PORT`.
pub fn is_socket_path(addr: &str) -> bool {
    addr.starts_with('/')
}

/// Connects to the primary at `addr` (see [`is_socket_path`]); Nagle is off on TCP, as every
/// packet the proxy writes is a whole request or response.
///
/// # Errors
/// The connect's error.
pub async fn connect(addr: &str) -> io::Result<PrimaryStream> {
    if is_socket_path(addr) {
        return Ok(PrimaryStream::Unix(UnixStream::connect(addr).await?));
    }
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok(PrimaryStream::Tcp(tcp))
}

impl Conn<PrimaryStream> {
    /// Switches a plain TCP connection to TLS, after the SSLRequest went out: the primary
    /// sends nothing more until the handshake.
    ///
    /// # Errors
    /// The TLS handshake's error (a certificate refused included); the connection is unusable
    /// afterwards.
    pub async fn start_tls(
        &mut self,
        connector: &TlsConnector,
        name: ServerName<'static>,
    ) -> io::Result<()> {
        let (PrimaryStream::Tcp(tcp), read_ahead) = self.detach() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS only starts on plain TCP",
            ));
        };
        if !read_ahead.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the primary sent bytes after the SSLRequest, before the TLS handshake",
            ));
        }
        let tls = connector.connect(name, tcp).await?;
        self.attach(PrimaryStream::Tls(Box::new(tls)));
        Ok(())
    }
}

/// Makes closing `conn` drop what is queued and reset the connection (TCP: `SO_LINGER` 0),
/// so that nothing written to it but not yet sent reaches the primary: for a primary that is
/// fenced or retired. A Unix socket's peer is on this host, where nothing is in flight.
pub fn reset_on_close(conn: &mut Conn<PrimaryStream>) {
    conn.discard_pending();
    if let Some(tcp) = conn.get_ref().tcp() {
        if let Err(error) = tcp.set_zero_linger() {
            tracing::debug!(%error, "cannot set SO_LINGER on the primary connection");
        }
    }
}
