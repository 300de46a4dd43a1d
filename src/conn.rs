//! One connection: the socket, its read and write buffers, and packet framing (under the
//! compressed protocol's frames, once a client negotiated it). Sessions read and write
//! [`Packet`]s here and never touch bytes, frames or sockets themselves.

use std::io;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use strongsync_proto::packet::{self, Packet, PacketDecoder, MAX_PACKET_PAYLOAD};
use strongsync_proto::ProtoError;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// Bytes read from the socket at a time, at least.
const READ_CHUNK: usize = 8 * 1024;
/// Most buffer space reserved ahead of one read: a large packet's buffer grows with the bytes
/// that actually arrive, never with what a header merely claims.
const READ_AHEAD_MAX: usize = 256 * 1024;
/// A read buffer that grew past this for one large packet is given back once it is drained.
const SHRINK_ABOVE: usize = 1 << 20;

mod compressed;

use compressed::Compressed;

/// A connection that speaks MySQL packets over `S`, compressed or not.
#[derive(Debug)]
pub struct Conn<S> {
    stream: S,
    /// Packet bytes read (inflated, when compressed) and not taken yet.
    rbuf: BytesMut,
    /// Packet bytes queued and not written (deflated when flushed, when compressed).
    wbuf: BytesMut,
    decoder: PacketDecoder,
    /// The compressed protocol, once negotiated.
    compressed: Option<Box<Compressed>>,
    /// Bytes written since [`take_written`](Self::take_written) last asked.
    written: u64,
    /// When a [`read_packet_within`](Self::read_packet_within) began waiting for the packet it
    /// has not got yet; kept here so that a cancelled read does not restart the clock.
    read_wait_since: Option<Instant>,
}

/// Where the time allowed to [`read_packet_within`](Conn::read_packet_within) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadDeadline {
    /// Once the packet has begun (the read finds some of it buffered): waiting for a packet
    /// to begin is not limited (a client between commands may idle for hours).
    FromFirstByte,
    /// Now: the peer owes the packet (the next piece of an exchange it is in the middle of).
    FromNow,
}

/// Why a packet could not be read or written.
#[derive(Debug, Error)]
pub enum ConnError {
    /// The peer closed the connection between packets.
    #[error("connection closed")]
    Closed,
    /// The peer closed the connection in the middle of a packet.
    #[error("connection closed in the middle of a packet")]
    ClosedMidPacket,
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The bytes are not a valid packet stream.
    #[error(transparent)]
    Protocol(#[from] ProtoError),
    /// The packet did not arrive whole within the time allowed.
    #[error("no complete packet within {0:?}")]
    ReadTimedOut(Duration),
    /// The peer took none of the queued bytes for this long.
    #[error("no write progress for {0:?}")]
    WriteStalled(Duration),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Wraps `stream`, accepting payloads of up to `max_payload` bytes.
    pub fn new(stream: S, max_payload: usize) -> Self {
        Conn::with_buffer(stream, BytesMut::new(), max_payload)
    }

    /// Wraps `stream` whose first bytes were already read into `rbuf`.
    pub fn with_buffer(stream: S, rbuf: BytesMut, max_payload: usize) -> Self {
        Conn {
            stream,
            rbuf,
            wbuf: BytesMut::new(),
            decoder: PacketDecoder::new(max_payload),
            compressed: None,
            written: 0,
            read_wait_since: None,
        }
    }

    /// Changes the payload limit.
    pub fn set_max_payload(&mut self, max_payload: usize) {
        self.decoder.set_max_payload(max_payload);
        if let Some(c) = &mut self.compressed {
            c.set_max_plain(frame_limit(max_payload));
        }
    }

    /// Speaks the compressed protocol from now on (both ways), deflating at zlib `level`. A
    /// frame may carry at most a packet of the payload limit (and never more than a frame can).
    pub fn start_compression(&mut self, max_payload: usize, level: u32) {
        self.decoder.set_max_payload(max_payload);
        let raw = std::mem::take(&mut self.rbuf);
        self.compressed = Some(Box::new(Compressed::new(
            raw,
            frame_limit(max_payload),
            level,
        )));
    }

    /// Whether the compressed protocol is on.
    pub fn is_compressed(&self) -> bool {
        self.compressed.is_some()
    }

    /// Ends the frame being written with what is queued, and numbers the next frame `seq`
    /// (a semisync replica that answered an ACK request starts its count again). Nothing
    /// without compression.
    pub fn restart_frame_seq(&mut self, seq: u8) {
        if let Some(c) = &mut self.compressed {
            c.seal(&mut self.wbuf);
            c.restart_seq(seq);
        }
    }

    /// Whether bytes of a packet (or of a frame) have arrived and not been taken.
    fn has_partial(&self) -> bool {
        !self.rbuf.is_empty() || self.compressed.as_ref().is_some_and(|c| c.mid_frame())
    }

    /// Reads the next packet.
    ///
    /// # Cancel safety
    /// Cancel safe: bytes read before cancellation stay in the buffer and the next call
    /// continues from them, so this can be a `select!` arm.
    ///
    /// # Errors
    /// [`ConnError::Closed`] at a clean end of stream; other variants for broken streams.
    pub async fn read_packet(&mut self) -> Result<Packet, ConnError> {
        loop {
            if let Some(packet) = self.buffered_packet()? {
                return Ok(packet);
            }
            if self.fill().await? == 0 {
                return Err(if self.has_partial() {
                    ConnError::ClosedMidPacket
                } else {
                    ConnError::Closed
                });
            }
        }
    }

    /// Reads the next packet, which must arrive whole within `limit` of when `from` says: a
    /// peer that trickles a packet in (slow-loris) or stops in the middle of one gets
    /// [`ConnError::ReadTimedOut`] instead of holding the connection forever. The limit is per
    /// packet: a payload of 16 MiB or more travels as several, each allowed `limit`.
    ///
    /// # Cancel safety
    /// Cancel safe like [`read_packet`](Self::read_packet); the clock keeps running across a
    /// cancelled call and stops only when a packet is taken.
    ///
    /// # Errors
    /// Those of [`read_packet`](Self::read_packet), and [`ConnError::ReadTimedOut`].
    pub async fn read_packet_within(
        &mut self,
        limit: Duration,
        from: ReadDeadline,
    ) -> Result<Packet, ConnError> {
        loop {
            if let Some(packet) = self.buffered_packet()? {
                return Ok(packet);
            }
            if self.read_wait_since.is_none()
                && (from == ReadDeadline::FromNow || self.has_partial())
            {
                self.read_wait_since = Some(Instant::now());
            }
            let filled = match self.read_wait_since {
                None => self.fill().await?,
                Some(since) => tokio::time::timeout_at(since + limit, self.fill())
                    .await
                    .map_err(|_| ConnError::ReadTimedOut(limit))??,
            };
            if filled == 0 {
                return Err(if self.has_partial() {
                    ConnError::ClosedMidPacket
                } else {
                    ConnError::Closed
                });
            }
        }
    }

    /// Takes a packet that is already buffered, without reading.
    ///
    /// # Errors
    /// [`ConnError::Protocol`] if the buffered header breaks the size limit.
    pub fn buffered_packet(&mut self) -> Result<Option<Packet>, ConnError> {
        loop {
            let packet = self.decoder.decode(&mut self.rbuf)?;
            if packet.is_some() {
                self.read_wait_since = None;
                if self.rbuf.is_empty() && self.rbuf.capacity() > SHRINK_ABOVE {
                    self.rbuf = BytesMut::new();
                }
                return Ok(packet);
            }
            // Compressed: a step more of the frames, only now that the packets before are taken.
            let inflated = match &mut self.compressed {
                Some(c) => c.inflate_step(&mut self.rbuf)?,
                None => false,
            };
            if !inflated {
                return Ok(None);
            }
        }
    }

    /// True if a whole packet is buffered (or the buffer already breaks the limit), so that
    /// reading one will not wait for the socket. Compressed, a packet still in a frame that is
    /// not inflated yet does not count: false may mean a read finds one anyway, true never
    /// means it waits.
    pub fn has_buffered_packet(&self) -> bool {
        self.decoder.missing(&self.rbuf).map_or(true, |n| n == 0)
    }

    /// Bytes received but not yet taken as packets (frames not inflated yet included).
    pub fn buffered_len(&self) -> usize {
        self.rbuf.len() + self.compressed.as_ref().map_or(0, |c| c.raw.len())
    }

    /// Reads whatever the peer sends next into the buffer; `Ok(0)` means end of stream.
    ///
    /// # Cancel safety
    /// Cancel safe (a single `read_buf`).
    ///
    /// # Errors
    /// Socket errors, or a buffered header that breaks the size limit.
    pub async fn fill(&mut self) -> Result<usize, ConnError> {
        let (missing, buf) = match &mut self.compressed {
            None => (self.decoder.missing(&self.rbuf)?, &mut self.rbuf),
            Some(c) => (c.missing()?, &mut c.raw),
        };
        buf.reserve(missing.clamp(READ_CHUNK, READ_AHEAD_MAX));
        Ok(self.stream.read_buf(buf).await?)
    }

    /// Whether the peer sent something, closed or failed, without waiting: one read that
    /// would not block (what it reads stays buffered).
    pub fn readable_now(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let fill = std::pin::pin!(self.fill());
        std::future::Future::poll(fill, &mut cx).is_ready()
    }

    /// Queues `packet` exactly as it was received.
    pub fn forward(&mut self, packet: &Packet) {
        self.wbuf.extend_from_slice(packet.wire());
    }

    /// Queues `packet`'s payload under another sequence id.
    pub fn forward_as(&mut self, packet: &Packet, seq: u8) {
        if packet.seq() == seq {
            return self.forward(packet);
        }
        let payload = packet.payload();
        packet::put_header(&mut self.wbuf, payload.len(), seq);
        self.wbuf.extend_from_slice(payload);
    }

    /// Queues `packet`'s payload under sequence id `seq`, with `bytes` written over it from
    /// offset `at` (a statement id renumbered; the payload keeps its length, so a packet of
    /// the maximum size goes on as one).
    pub fn forward_patched(&mut self, packet: &Packet, seq: u8, at: usize, bytes: &[u8]) {
        let payload = packet.payload();
        packet::put_header(&mut self.wbuf, payload.len(), seq);
        let start = self.wbuf.len();
        self.wbuf.extend_from_slice(payload);
        self.wbuf[start + at..start + at + bytes.len()].copy_from_slice(bytes);
    }

    /// Queues one packet (`payload` must fit in one).
    pub fn write_packet(&mut self, seq: u8, payload: &[u8]) {
        packet::put_header(&mut self.wbuf, payload.len(), seq);
        self.wbuf.extend_from_slice(payload);
    }

    /// Queues a packet whose payload is written by `fill`; the header is fixed up afterwards,
    /// so the payload is built in place without a temporary buffer. The payload must fit in
    /// one packet.
    pub fn write_packet_with(&mut self, seq: u8, fill: impl FnOnce(&mut BytesMut)) {
        let start = self.wbuf.len();
        packet::put_header(&mut self.wbuf, 0, seq);
        fill(&mut self.wbuf);
        let len = self.wbuf.len() - start - packet::HEADER_LEN;
        debug_assert!(len < MAX_PACKET_PAYLOAD);
        self.wbuf[start..start + 3].copy_from_slice(&(len as u32).to_le_bytes()[..3]);
    }

    /// Bytes queued and not yet written.
    pub fn pending_write(&self) -> usize {
        self.wbuf.len()
    }

    /// Drops what was queued after the first `len` bytes (packets that must not be sent).
    pub fn truncate_pending(&mut self, len: usize) {
        self.wbuf.truncate(len);
    }

    /// Queues bytes written by `fill` (whole packets, headers included) and returns what it
    /// returns.
    pub fn queue<R>(&mut self, fill: impl FnOnce(&mut BytesMut) -> R) -> R {
        fill(&mut self.wbuf)
    }

    /// Writes everything queued.
    ///
    /// # Cancel safety
    /// Cancel safe in the sense that matters here: what was written is gone from the queue,
    /// what was not stays queued.
    ///
    /// # Errors
    /// Socket errors.
    pub async fn flush(&mut self) -> io::Result<()> {
        let (stream, out, written) = self.outgoing();
        let queued = out.len();
        let result = stream.write_all_buf(out).await;
        *written += (queued - out.len()) as u64;
        result?;
        stream.flush().await
    }

    /// The socket, the bytes to write to it (what is queued, deflated into frames when
    /// compressed) and the count of bytes written.
    fn outgoing(&mut self) -> (&mut S, &mut BytesMut, &mut u64) {
        let Conn {
            stream,
            wbuf,
            compressed,
            written,
            ..
        } = self;
        let out = match compressed {
            None => wbuf,
            Some(c) => {
                c.seal(wbuf);
                &mut c.out
            }
        };
        (stream, out, written)
    }

    /// Writes everything queued, giving up if the peer takes nothing for `limit` (it stopped
    /// reading): what is queued stays bounded by what the caller queued, never by what the
    /// peer refuses to take.
    ///
    /// # Cancel safety
    /// As [`flush`](Self::flush).
    ///
    /// # Errors
    /// Socket errors, and [`ConnError::WriteStalled`].
    pub async fn flush_within(&mut self, limit: Duration) -> Result<(), ConnError> {
        // Nearly every flush goes out at once: the timer is armed only for one that must wait.
        if self.flush_now()? {
            return Ok(());
        }
        let stalled = |_| ConnError::WriteStalled(limit);
        let (stream, out, written) = self.outgoing();
        while !out.is_empty() {
            let n = tokio::time::timeout(limit, stream.write_buf(out))
                .await
                .map_err(stalled)??;
            if n == 0 {
                return Err(ConnError::Io(io::ErrorKind::WriteZero.into()));
            }
            *written += n as u64;
        }
        tokio::time::timeout(limit, stream.flush())
            .await
            .map_err(stalled)??;
        Ok(())
    }

    /// Writes everything queued as [`flush_within`](Self::flush_within) does, as long as
    /// `keep_going` says so before each write and `stop` has not resolved: otherwise what is
    /// left stays queued and it returns false. A write that waits for the peer ends as soon as
    /// `stop` resolves. So a connection that must stop (a fenced replica pipe) stops within
    /// one write, however much is queued and however slowly the peer reads.
    ///
    /// # Errors
    /// Socket errors, and [`ConnError::WriteStalled`].
    pub async fn flush_within_while<F: std::future::Future<Output = ()>>(
        &mut self,
        limit: Duration,
        keep_going: impl Fn() -> bool,
        mut stop: Pin<&mut F>,
    ) -> Result<bool, ConnError> {
        let stalled = |_| ConnError::WriteStalled(limit);
        let (stream, out, written) = self.outgoing();
        while !out.is_empty() {
            if !keep_going() {
                return Ok(false);
            }
            let n = tokio::select! {
                biased;
                () = stop.as_mut() => return Ok(false),
                n = tokio::time::timeout(limit, stream.write_buf(out)) => n.map_err(stalled)??,
            };
            if n == 0 {
                return Err(ConnError::Io(io::ErrorKind::WriteZero.into()));
            }
            *written += n as u64;
        }
        tokio::select! {
            biased;
            () = stop.as_mut() => Ok(false),
            flushed = tokio::time::timeout(limit, stream.flush()) => {
                flushed.map_err(stalled)??;
                Ok(true)
            }
        }
    }

    /// Writes what the socket takes without waiting; true if everything went (and the stream
    /// flushed).
    fn flush_now(&mut self) -> io::Result<bool> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let (stream, out, written) = self.outgoing();
        while !out.is_empty() {
            match Pin::new(&mut *stream).poll_write(&mut cx, out) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    out.advance(n);
                    *written += n as u64;
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(false),
            }
        }
        match Pin::new(stream).poll_flush(&mut cx) {
            Poll::Ready(result) => result.map(|()| true),
            Poll::Pending => Ok(false),
        }
    }

    /// Bytes written to the socket since the last call (for the relayed-bytes metric).
    pub fn take_written(&mut self) -> u64 {
        std::mem::take(&mut self.written)
    }

    /// Drops what is queued and not written.
    pub fn discard_pending(&mut self) {
        self.wbuf.clear();
        if let Some(c) = &mut self.compressed {
            c.out.clear();
        }
    }

    /// Flushes, then closes the write side (FIN): the peer sees a clean end of stream.
    pub async fn shutdown(&mut self) {
        if self.flush().await.is_ok() {
            let _ = self.stream.shutdown().await;
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The socket, to close it in a way of its own.
    pub fn get_mut_stream(&mut self) -> &mut S {
        &mut self.stream
    }
}

impl<S: Default> Conn<S> {
    /// Takes the transport out to replace it (TLS upgrade), with the bytes read but not yet
    /// decoded (e.g. the start of a TLS ClientHello that arrived with the SSLRequest).
    pub fn detach(&mut self) -> (S, BytesMut) {
        (
            std::mem::take(&mut self.stream),
            std::mem::take(&mut self.rbuf),
        )
    }

    /// Puts a transport back after [`detach`](Self::detach).
    pub fn attach(&mut self, stream: S) {
        self.stream = stream;
    }
}

#[cfg(test)]
mod tests;

/// The most bytes one frame may carry on a connection whose payloads are limited to
/// `max_payload`: a whole packet of that size with its header.
fn frame_limit(max_payload: usize) -> usize {
    max_payload.saturating_add(packet::HEADER_LEN)
}
