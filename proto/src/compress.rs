//! The compressed protocol (`CLIENT_COMPRESS`): the frames under the packets, taken off a
//! buffer and made, sans-IO.

use bytes::{Buf, BufMut, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::ProtoError;

// A frame is `u24 compressed_len | u8 seq | u24 plain_len`, then the body: zlib of `plain_len`
// bytes, or those bytes as they are when `plain_len` is 0. It carries any run of the packet
// stream (several packets, or part of one), and frames count their own sequence ids.

/// Bytes of a frame header.
pub const FRAME_HEADER_LEN: usize = 7;
/// The most bytes one frame may carry (a u24).
pub const MAX_FRAME_PLAIN: usize = 0xFF_FFFF;
/// Runs shorter than this go uncompressed (MariaDB's `MIN_COMPRESS_LENGTH`): zlib would only
/// make them longer.
pub const MIN_COMPRESS_LENGTH: usize = 50;
/// Output grows by at most this much at a time while a frame inflates, so a frame that claims
/// much and carries little costs little.
const INFLATE_STEP: usize = 64 * 1024;

/// Takes frames off a byte stream and inflates what they carry, a bounded step at a time: the
/// header's claim is checked against a limit before anything is inflated, and each call adds
/// at most 64 KiB of output, so that a caller inflates only as far as it needs (a frame that
/// claims much and carries little costs little; one that inflates past its claim is an error).
#[derive(Debug)]
pub struct FrameDecoder {
    max_plain: usize,
    inflate: Decompress,
    /// The frame being taken, once its header is.
    frame: Option<Frame>,
}

/// A frame whose header was taken.
#[derive(Debug, Clone, Copy)]
struct Frame {
    seq: u8,
    /// Body bytes not taken yet.
    body_left: usize,
    /// What it carries: `plain_len` bytes, inflated from the body, or the body itself.
    plain_len: usize,
    stored: bool,
    /// Bytes it has given so far.
    produced: usize,
    /// Its zlib stream ended (checksum checked).
    ended: bool,
}

/// What one [`FrameDecoder::decode`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Part of a frame was taken (and perhaps bytes added to the output).
    Partial,
    /// A frame ended; its sequence id.
    End(u8),
}

// === impl FrameDecoder ===

impl FrameDecoder {
    /// A decoder that refuses frames carrying more than `max_plain` bytes (at most
    /// [`MAX_FRAME_PLAIN`]).
    pub fn new(max_plain: usize) -> Self {
        FrameDecoder {
            max_plain: max_plain.min(MAX_FRAME_PLAIN),
            inflate: Decompress::new(true),
            frame: None,
        }
    }

    /// Changes the limit (for frames whose header is still to come).
    pub fn set_max_plain(&mut self, max_plain: usize) {
        self.max_plain = max_plain.min(MAX_FRAME_PLAIN);
    }

    /// Whether a frame was begun and not finished.
    pub fn in_frame(&self) -> bool {
        self.frame.is_some()
    }

    /// Bytes that must arrive before [`decode`](Self::decode) can take a step (0: it can). A
    /// header that breaks the limit is an error here already, so that a reader never waits
    /// for (or reserves room for) a frame it will refuse.
    ///
    /// # Errors
    /// [`ProtoError::TooLarge`] for a frame that claims more than the limit.
    pub fn missing(&self, src: &[u8]) -> Result<usize, ProtoError> {
        if let Some(frame) = &self.frame {
            return Ok(usize::from(src.is_empty() && frame.body_left > 0));
        }
        match src.get(..FRAME_HEADER_LEN) {
            None => Ok(FRAME_HEADER_LEN - src.len()),
            Some(header) => self.header(header).map(|_| 0),
        }
    }

    /// Takes a step through the frames at the front of `src`, appending what they carry to
    /// `dst`: a header, and up to 64 KiB of what its frame carries. `Ok(None)`: more bytes
    /// are needed (nothing was taken).
    ///
    /// # Errors
    /// A frame that claims more than the limit, whose body does not inflate, or inflates to
    /// more or fewer bytes than it claims. The stream is unusable afterwards.
    pub fn decode(
        &mut self,
        src: &mut BytesMut,
        dst: &mut BytesMut,
    ) -> Result<Option<Step>, ProtoError> {
        let began = self.frame.is_none();
        if began {
            let Some(header) = src.get(..FRAME_HEADER_LEN) else {
                return Ok(None);
            };
            let (body_len, plain_len) = self.header(header)?;
            let seq = header[3];
            src.advance(FRAME_HEADER_LEN);
            self.inflate.reset(true);
            self.frame = Some(Frame {
                seq,
                body_left: body_len,
                plain_len: if plain_len == 0 { body_len } else { plain_len },
                stored: plain_len == 0,
                produced: 0,
                ended: plain_len == 0,
            });
        }
        let Some(mut frame) = self.frame else {
            return Ok(None);
        };
        let took = if frame.stored {
            let take = src.len().min(frame.body_left).min(INFLATE_STEP);
            dst.extend_from_slice(&src[..take]);
            src.advance(take);
            frame.body_left -= take;
            frame.produced += take;
            take > 0
        } else {
            self.inflate_step(&mut frame, src, dst)?
        };
        if frame.body_left == 0 && frame.produced == frame.plain_len && frame.ended {
            self.frame = None;
            return Ok(Some(Step::End(frame.seq)));
        }
        self.frame = Some(frame);
        Ok((began || took).then_some(Step::Partial))
    }

    /// The body length and the plain length a header announces (0: stored).
    fn header(&self, header: &[u8]) -> Result<(usize, usize), ProtoError> {
        let body =
            usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        let plain =
            usize::from(header[4]) | usize::from(header[5]) << 8 | usize::from(header[6]) << 16;
        let carried = if plain == 0 { body } else { plain };
        if carried > self.max_plain {
            return Err(ProtoError::TooLarge {
                len: carried,
                max: self.max_plain,
            });
        }
        Ok((body, plain))
    }

    /// Inflates what has arrived of `frame`'s body, giving at most [`INFLATE_STEP`] bytes;
    /// true if it took anything.
    fn inflate_step(
        &mut self,
        frame: &mut Frame,
        src: &mut BytesMut,
        dst: &mut BytesMut,
    ) -> Result<bool, ProtoError> {
        const BAD: ProtoError = ProtoError::Malformed {
            what: "compressed packet (its body is not zlib data of the length its header gives)",
        };
        let available = src.len().min(frame.body_left);
        let last = available == frame.body_left;
        // One byte of room past the claim shows a body that inflates to more.
        let room = (frame.plain_len + 1 - frame.produced).min(INFLATE_STEP);
        let at = dst.len();
        dst.resize(at + room, 0);
        let (in_before, out_before) = (self.inflate.total_in(), self.inflate.total_out());
        // The end shows as StreamEnd: no flush mode asks for it, so a small output buffer is
        // only a pause.
        let status =
            self.inflate
                .decompress(&src[..available], &mut dst[at..], FlushDecompress::None);
        let consumed = (self.inflate.total_in() - in_before) as usize;
        let wrote = (self.inflate.total_out() - out_before) as usize;
        dst.truncate(at + wrote);
        src.advance(consumed);
        frame.body_left -= consumed;
        frame.produced += wrote;
        if frame.produced > frame.plain_len {
            return Err(ProtoError::Malformed {
                what: "compressed packet (it inflates to more than its header gives)",
            });
        }
        match status {
            Ok(Status::StreamEnd) if frame.body_left == 0 && frame.produced == frame.plain_len => {
                frame.ended = true;
                Ok(true)
            }
            Ok(Status::StreamEnd) | Err(_) => Err(BAD),
            Ok(_) if consumed > 0 || wrote > 0 => Ok(true),
            // No progress with the whole body in: it ends before its stream does.
            Ok(_) if last => Err(BAD),
            Ok(_) => Ok(false),
        }
    }
}

/// Turns runs of packet bytes into frames.
#[derive(Debug)]
pub struct FrameEncoder {
    deflate: Compress,
}

// === impl FrameEncoder ===

impl FrameEncoder {
    /// An encoder at zlib `level` (0–9; MariaDB uses 6).
    pub fn new(level: u32) -> Self {
        FrameEncoder {
            deflate: Compress::new(Compression::new(level.min(9)), true),
        }
    }

    /// Appends `plain` to `dst` as frames starting at sequence id `seq` (one per
    /// [`MAX_FRAME_PLAIN`] bytes); returns the sequence id after the last. A run shorter than
    /// [`MIN_COMPRESS_LENGTH`], or one zlib does not shrink, goes stored.
    pub fn encode(&mut self, mut seq: u8, plain: &[u8], dst: &mut BytesMut) -> u8 {
        for run in plain.chunks(MAX_FRAME_PLAIN) {
            let start = dst.len();
            if run.len() >= MIN_COMPRESS_LENGTH && self.deflate_frame(seq, run, dst) {
                seq = seq.wrapping_add(1);
                continue;
            }
            dst.truncate(start);
            put_header(dst, run.len(), seq, 0);
            dst.extend_from_slice(run);
            seq = seq.wrapping_add(1);
        }
        seq
    }

    /// Writes one compressed frame of `run`; false if zlib did not make it shorter (then
    /// what was written must be dropped).
    fn deflate_frame(&mut self, seq: u8, run: &[u8], dst: &mut BytesMut) -> bool {
        self.deflate.reset();
        let start = dst.len();
        // No more room than the run itself: a body that would not fit is not worth sending.
        dst.resize(start + FRAME_HEADER_LEN + run.len(), 0);
        let status = self.deflate.compress(
            run,
            &mut dst[start + FRAME_HEADER_LEN..],
            FlushCompress::Finish,
        );
        let body = self.deflate.total_out() as usize;
        if !matches!(status, Ok(Status::StreamEnd)) || body >= run.len() {
            return false;
        }
        dst.truncate(start + FRAME_HEADER_LEN + body);
        let mut header = &mut dst[start..start + FRAME_HEADER_LEN];
        header.put_uint_le(body as u64, 3);
        header.put_u8(seq);
        header.put_uint_le(run.len() as u64, 3);
        true
    }
}

/// Writes a frame header.
fn put_header(dst: &mut BytesMut, body_len: usize, seq: u8, plain_len: usize) {
    dst.put_uint_le(body_len as u64, 3);
    dst.put_u8(seq);
    dst.put_uint_le(plain_len as u64, 3);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn decode_all(
        decoder: &mut FrameDecoder,
        mut src: BytesMut,
    ) -> Result<(Vec<u8>, Vec<u8>), ProtoError> {
        let mut plain = BytesMut::new();
        let mut seqs = Vec::new();
        while let Some(step) = decoder.decode(&mut src, &mut plain)? {
            if let Step::End(seq) = step {
                seqs.push(seq);
            }
        }
        assert!(src.is_empty() && !decoder.in_frame(), "whole frames only");
        Ok((plain.to_vec(), seqs))
    }

    #[test]
    fn short_runs_go_stored_and_long_ones_compressed() {
        let mut enc = FrameEncoder::new(6);
        let mut out = BytesMut::new();
        let next = enc.encode(3, b"\x01\x00\x00\x00\x0e", &mut out);
        assert_eq!(next, 4);
        assert_eq!(
            &out[..],
            b"\x05\x00\x00\x03\x00\x00\x00\x01\x00\x00\x00\x0e"
        );
        let long = vec![b'a'; 1000];
        out.clear();
        enc.encode(0, &long, &mut out);
        assert!(out.len() < 100, "{} bytes", out.len());
        assert_eq!(&out[4..7], &[0xe8, 0x03, 0x00], "plain length 1000");
        let mut dec = FrameDecoder::new(MAX_FRAME_PLAIN);
        assert_eq!(decode_all(&mut dec, out).unwrap(), (long, vec![0]));
    }

    #[test]
    fn a_frame_cut_anywhere_gives_the_same_bytes_in_steps() {
        let mut enc = FrameEncoder::new(6);
        let mut out = BytesMut::new();
        let plain: Vec<u8> = (0..200_000u32).map(|i| (i % 7) as u8).collect();
        enc.encode(7, &plain, &mut out);
        for cut in [0, 3, 7, 8, out.len() / 2, out.len() - 1] {
            let mut dec = FrameDecoder::new(MAX_FRAME_PLAIN);
            let mut got = BytesMut::new();
            let mut first = BytesMut::from(&out[..cut]);
            let mut end = None;
            loop {
                let before = got.len();
                match dec.decode(&mut first, &mut got).unwrap() {
                    None => break,
                    Some(Step::End(seq)) => end = Some(seq),
                    Some(Step::Partial) => {}
                }
                assert!(got.len() - before <= INFLATE_STEP, "a bounded step");
            }
            assert_eq!(end, None, "cut at {cut}: not whole yet");
            assert_eq!(
                dec.missing(&first).unwrap(),
                if cut < FRAME_HEADER_LEN {
                    FRAME_HEADER_LEN - cut
                } else {
                    1
                }
            );
            let mut rest = first;
            rest.extend_from_slice(&out[cut..]);
            while let Some(step) = dec
                .decode(&mut rest, &mut got)
                .unwrap_or_else(|e| panic!("cut at {cut} of {}: {e}", out.len()))
            {
                if let Step::End(seq) = step {
                    end = Some(seq);
                }
            }
            assert_eq!((end, &got[..]), (Some(7), &plain[..]), "cut at {cut}");
        }
    }

    #[test]
    fn claims_past_the_limit_and_bodies_that_lie_are_refused() {
        let mut dec = FrameDecoder::new(1000);
        // Claims 2000 plain bytes: refused from the header alone, before any body arrived.
        let header = BytesMut::from(&b"\x10\x00\x00\x00\xd0\x07\x00"[..]);
        assert!(matches!(
            dec.missing(&header),
            Err(ProtoError::TooLarge {
                len: 2000,
                max: 1000
            })
        ));
        let mut src = header.clone();
        assert!(dec.decode(&mut src, &mut BytesMut::new()).is_err());
        // A stored frame longer than the limit.
        assert!(dec.missing(b"\xe9\x03\x00\x00\x00\x00\x00").is_err());

        // A body that inflates to more than its header claims (a bomb): 100,000 zeros
        // claimed as 500.
        let mut enc = FrameEncoder::new(9);
        let mut bomb = BytesMut::new();
        enc.encode(0, &vec![0u8; 100_000], &mut bomb);
        bomb[4..7].copy_from_slice(&[0xf4, 0x01, 0x00]);
        let mut plain = BytesMut::new();
        assert!(matches!(
            dec.decode(&mut bomb, &mut plain),
            Err(ProtoError::Malformed { .. })
        ));
        assert!(
            plain.len() <= 501,
            "inflated only up to the claim: {}",
            plain.len()
        );

        // Fewer than it claims, and garbage.
        let mut short = BytesMut::new();
        enc.encode(0, &[b'y'; 200], &mut short);
        short[4..7].copy_from_slice(&[0x2c, 0x01, 0x00]); // 300
        assert!(decode_all(&mut dec, short).is_err());
        let garbage = BytesMut::from(&b"\x04\x00\x00\x00\x64\x00\x00\xde\xad\xbe\xef"[..]);
        assert!(decode_all(&mut FrameDecoder::new(1000), garbage).is_err());
    }

    proptest! {
        #[test]
        fn frames_carry_any_run_of_bytes_back_as_it_was(
            runs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..3000), 1..5),
            repeat in any::<bool>(),
            seq in any::<u8>(),
        ) {
            let mut enc = FrameEncoder::new(6);
            let mut out = BytesMut::new();
            let mut want = Vec::new();
            let mut next = seq;
            for run in &runs {
                let run: Vec<u8> = if repeat { run.iter().flat_map(|b| [*b; 8]).collect() } else { run.clone() };
                next = enc.encode(next, &run, &mut out);
                want.extend_from_slice(&run);
            }
            let mut dec = FrameDecoder::new(MAX_FRAME_PLAIN);
            let (plain, seqs) = decode_all(&mut dec, out).unwrap();
            prop_assert_eq!(plain, want);
            let expected: Vec<u8> = (0..seqs.len()).map(|i| seq.wrapping_add(i as u8)).collect();
            prop_assert_eq!(seqs, expected);
        }
    }
}
