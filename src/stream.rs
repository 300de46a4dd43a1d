//! The client-side transport: plain TCP, or TLS terminated by the proxy. A [`Rewind`] lets TLS
//! start from bytes that were already read along with the SSLRequest.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::conn::Conn;

/// A client connection's transport.
#[derive(Debug, Default)]
pub enum ClientStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS terminated here.
    Tls(Box<TlsStream<Rewind<TcpStream>>>),
    /// In the middle of an upgrade (or after a failed one): every read and write fails.
    #[default]
    Detached,
}

/// A stream that first yields bytes already read from it.
#[derive(Debug)]
pub struct Rewind<S> {
    prefix: BytesMut,
    inner: S,
}

// === impl ClientStream ===

impl ClientStream {
    /// True once TLS is on.
    pub fn is_tls(&self) -> bool {
        matches!(self, ClientStream::Tls(_))
    }
}

impl Conn<ClientStream> {
    /// Closes the write side (FIN) at once without sending what is queued, which must no
    /// longer reach the peer: nothing of it, not even what TLS holds encrypted and unsent, nor
    /// TLS's own goodbye (which would wait behind it for a peer that may read nothing).
    pub async fn abandon(&mut self) {
        self.discard_pending();
        let tcp = match self.get_mut_stream() {
            ClientStream::Plain(tcp) => tcp,
            ClientStream::Tls(tls) => &mut tls.get_mut().0.inner,
            ClientStream::Detached => return,
        };
        let _ = tcp.shutdown().await;
    }

    /// Switches a plain connection to TLS, starting the TLS handshake from any bytes already
    /// read past the SSLRequest.
    ///
    /// # Errors
    /// The TLS handshake's error; the connection is unusable afterwards.
    pub async fn start_tls(&mut self, acceptor: &TlsAcceptor) -> io::Result<()> {
        let (ClientStream::Plain(tcp), read_ahead) = self.detach() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS is already on",
            ));
        };
        let tls = acceptor.accept(Rewind::new(read_ahead, tcp)).await?;
        self.attach(ClientStream::Tls(Box::new(tls)));
        Ok(())
    }
}

/// `AsyncRead` and `AsyncWrite` for a transport enum by its variants, each holding a stream;
/// its `Detached` variant (mid-upgrade) fails every call.
macro_rules! transport_io {
    ($ty:ident { $($variant:ident),+ }) => {
        impl tokio::io::AsyncRead for $ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(s) => std::pin::Pin::new(s).poll_read(cx, buf),)+
                    $ty::Detached => std::task::Poll::Ready(Err($crate::stream::detached())),
                }
            }
        }

        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($ty::$variant(s) => std::pin::Pin::new(s).poll_write(cx, buf),)+
                    $ty::Detached => std::task::Poll::Ready(Err($crate::stream::detached())),
                }
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(s) => std::pin::Pin::new(s).poll_flush(cx),)+
                    $ty::Detached => std::task::Poll::Ready(Err($crate::stream::detached())),
                }
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(s) => std::pin::Pin::new(s).poll_shutdown(cx),)+
                    $ty::Detached => std::task::Poll::Ready(Err($crate::stream::detached())),
                }
            }
        }
    };
}

pub(crate) use transport_io;

transport_io!(ClientStream { Plain, Tls });

pub(crate) fn detached() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "TLS upgrade did not complete")
}

// === impl Rewind ===

impl<S> Rewind<S> {
    /// A stream that yields `prefix`, then whatever `inner` yields.
    pub fn new(prefix: BytesMut, inner: S) -> Self {
        Rewind { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.has_remaining() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn rewind_yields_the_prefix_first() {
        let (a, mut b) = duplex(64);
        let mut s = Rewind::new(BytesMut::from(&b"hello "[..]), a);
        b.write_all(b"world").await.unwrap();
        drop(b);
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
