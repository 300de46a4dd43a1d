//! The way to the primary: TCP to `HOST:PORT`, or its Unix socket when strongsync runs on the
//! same host (a sidecar). The socket skips the TCP/IP stack on both ends of the busiest leg
//! the proxy has: point selects through strongsync ran 9 % faster over it than over TCP
//! loopback (docs/benchmarks.md).

use std::io;

use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

/// A connection to the primary.
pub type PrimaryStream = Either<TcpStream, UnixStream>;

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
        return Ok(Either::Right(UnixStream::connect(addr).await?));
    }
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok(Either::Left(tcp))
}

/// Makes closing `conn` drop what is queued and reset the connection (TCP: `SO_LINGER` 0),
/// so that nothing written to it but not yet sent reaches the primary: for a primary that is
/// fenced or retired. A Unix socket's peer is on this host, where nothing is in flight.
pub fn reset_on_close(conn: &mut crate::conn::Conn<PrimaryStream>) {
    conn.discard_pending();
    if let Either::Left(tcp) = conn.get_ref() {
        if let Err(error) = tcp.set_zero_linger() {
            tracing::debug!(%error, "cannot set SO_LINGER on the primary connection");
        }
    }
}
