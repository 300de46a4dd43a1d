//! The compressed protocol on one connection: frames read from the socket are inflated into
//! the connection's packet buffer a bounded step at a time, only while no whole packet is
//! buffered (so a peer's frames never inflate faster than its packets are taken); packets
//! queued are deflated into frames when they are flushed.

use bytes::BytesMut;

/// A buffer that grew past this for one large frame or response is given back once drained.
const SHRINK_ABOVE: usize = 1 << 20;
use strongsync_proto::compress::{FrameDecoder, FrameEncoder, Step};
use strongsync_proto::ProtoError;

/// The compression state of a connection.
#[derive(Debug)]
pub(super) struct Compressed {
    /// Frames read and not inflated yet.
    pub raw: BytesMut,
    /// Frames ready to write.
    pub out: BytesMut,
    decoder: FrameDecoder,
    encoder: FrameEncoder,
    /// Sequence id of the next frame written: the one after the last frame read (the peer
    /// starts each command at 0), or after the last written.
    next_seq: u8,
}

// === impl Compressed ===

impl Compressed {
    /// Compression from now on, `raw` holding what was already read; a frame may carry at
    /// most `max_plain` bytes; what is sent is deflated at zlib `level`.
    pub(super) fn new(raw: BytesMut, max_plain: usize, level: u32) -> Self {
        Compressed {
            raw,
            out: BytesMut::new(),
            decoder: FrameDecoder::new(max_plain),
            encoder: FrameEncoder::new(level),
            next_seq: 0,
        }
    }

    /// Inflates a step of the frames in `raw` onto `plain` (at most 64 KiB); false if nothing
    /// could be taken without more bytes.
    pub(super) fn inflate_step(&mut self, plain: &mut BytesMut) -> Result<bool, ProtoError> {
        let step = self.decoder.decode(&mut self.raw, plain)?;
        if self.raw.is_empty() && self.raw.capacity() > SHRINK_ABOVE {
            self.raw = BytesMut::new();
        }
        match step {
            Some(Step::End(seq)) => {
                self.next_seq = seq.wrapping_add(1);
                Ok(true)
            }
            Some(Step::Partial) => Ok(true),
            None => Ok(false),
        }
    }

    /// Whether a frame has begun arriving (its header taken, or bytes of it buffered) and is
    /// not all inflated.
    pub(super) fn mid_frame(&self) -> bool {
        !self.raw.is_empty() || self.decoder.in_frame()
    }

    /// Bytes still missing from the frame at the front of `raw`.
    pub(super) fn missing(&self) -> Result<usize, ProtoError> {
        self.decoder.missing(&self.raw)
    }

    /// Deflates what `plain` holds (whole packets) into frames ready to write. Like a
    /// server's, the packets' own sequence ids start again from the first frame's: clients
    /// of the compressed protocol count packets by frames (MariaDB's own libraries check only
    /// the frames' ids; mysql_common takes a packet whose id is its frame's).
    pub(super) fn seal(&mut self, plain: &mut BytesMut) {
        if self.out.is_empty() && self.out.capacity() > SHRINK_ABOVE {
            self.out = BytesMut::new();
        }
        if !plain.is_empty() {
            renumber(plain, self.next_seq);
            self.next_seq = self.encoder.encode(self.next_seq, plain, &mut self.out);
            plain.clear();
        }
    }

    /// The next frame written carries `seq`.
    pub(super) fn restart_seq(&mut self, seq: u8) {
        self.next_seq = seq;
    }

    pub(super) fn set_max_plain(&mut self, max_plain: usize) {
        self.decoder.set_max_plain(max_plain);
    }
}

/// Gives the whole packets in `plain` consecutive sequence ids from `seq`.
fn renumber(plain: &mut [u8], mut seq: u8) {
    let mut at = 0;
    while let Some(header) = plain.get_mut(at..at + 4) {
        let len =
            usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        header[3] = seq;
        seq = seq.wrapping_add(1);
        at += 4 + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_renumbered_from_the_frame() {
        let mut plain = BytesMut::from(&b"\x01\x00\x00\x07a\x00\x00\x00\x08\x02\x00\x00\x09bc"[..]);
        let mut c = Compressed::new(BytesMut::new(), 1 << 20, 1);
        c.restart_seq(3);
        c.seal(&mut plain);
        let mut back = BytesMut::new();
        let mut out = std::mem::take(&mut c.out);
        let mut decoder = FrameDecoder::new(1 << 20);
        assert_eq!(
            decoder.decode(&mut out, &mut back).unwrap(),
            Some(Step::End(3))
        );
        assert_eq!(
            &back[..],
            b"\x01\x00\x00\x03a\x00\x00\x00\x04\x02\x00\x00\x05bc"
        );
    }
}
