//! Packet framing: `u24 payload length | u8 sequence id | payload`. A payload of 16 MiB - 1 bytes
//! or more travels as several full packets followed by a shorter (possibly empty) one.

use bytes::{BufMut, Bytes, BytesMut};

use crate::ProtoError;

/// Largest payload one packet can carry; a packet this full is continued by the next one.
pub const MAX_PACKET_PAYLOAD: usize = 0xFF_FFFF;

/// Bytes of the packet header.
pub const HEADER_LEN: usize = 4;

/// One packet exactly as it travelled: header and payload in one shared buffer, so forwarding
/// it is a copy of [`Packet::wire`] with no re-encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    wire: Bytes,
    continuation: bool,
}

/// Splits a byte stream into [`Packet`]s, enforcing a limit on whole (reassembled) payloads and
/// remembering whether the next packet continues the current payload.
#[derive(Debug, Clone)]
pub struct PacketDecoder {
    max_payload: usize,
    /// Bytes of the current multi-packet payload received so far (0 when not inside one).
    pending: usize,
    continuing: bool,
}

/// Checks the sequence ids of one exchange: each packet must carry the id after the previous
/// one (mod 256), in both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    next: u8,
}

/// Appends a packet header.
pub fn put_header(dst: &mut impl BufMut, payload_len: usize, seq: u8) {
    debug_assert!(payload_len <= MAX_PACKET_PAYLOAD);
    dst.put_uint_le(payload_len as u64, 3);
    dst.put_u8(seq);
}

/// Appends `payload` as one or more packets starting at sequence id `seq`, splitting it at
/// [`MAX_PACKET_PAYLOAD`] and adding the empty packet that ends a payload whose length is a
/// multiple of it. Returns the sequence id that follows the last packet written.
pub fn put_payload(dst: &mut BytesMut, mut seq: u8, payload: &[u8]) -> u8 {
    dst.reserve(payload.len() + HEADER_LEN * (1 + payload.len() / MAX_PACKET_PAYLOAD));
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PACKET_PAYLOAD);
        put_header(dst, n, seq);
        dst.put_slice(&rest[..n]);
        seq = seq.wrapping_add(1);
        rest = &rest[n..];
        if n < MAX_PACKET_PAYLOAD {
            return seq;
        }
    }
}

/// Like [`put_payload`] for a payload given in pieces (e.g. a header the proxy adds in front of
/// bytes it relays), without joining them first. Returns the sequence id after the last packet.
pub fn put_payload_parts(dst: &mut BytesMut, mut seq: u8, parts: &[&[u8]]) -> u8 {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    dst.reserve(total + HEADER_LEN * (1 + total / MAX_PACKET_PAYLOAD));
    let mut parts = parts.iter().copied().filter(|p| !p.is_empty());
    let mut current: &[u8] = parts.next().unwrap_or_default();
    let mut left = total;
    loop {
        let n = left.min(MAX_PACKET_PAYLOAD);
        put_header(dst, n, seq);
        seq = seq.wrapping_add(1);
        let mut need = n;
        while need > 0 {
            if current.is_empty() {
                current = parts.next().unwrap_or_default();
            }
            let take = need.min(current.len());
            dst.put_slice(&current[..take]);
            current = &current[take..];
            need -= take;
        }
        left -= n;
        if n < MAX_PACKET_PAYLOAD {
            return seq;
        }
    }
}

// === impl Packet ===

impl Packet {
    /// Builds a single packet. Payloads of [`MAX_PACKET_PAYLOAD`] bytes or more need
    /// [`put_payload`] instead.
    ///
    /// # Panics
    /// If `payload` does not fit in one packet.
    pub fn new(seq: u8, payload: &[u8]) -> Packet {
        assert!(
            payload.len() < MAX_PACKET_PAYLOAD,
            "payload needs several packets"
        );
        let mut wire = BytesMut::with_capacity(HEADER_LEN + payload.len());
        put_header(&mut wire, payload.len(), seq);
        wire.put_slice(payload);
        Packet {
            wire: wire.freeze(),
            continuation: false,
        }
    }

    /// The sequence id.
    pub fn seq(&self) -> u8 {
        self.wire[3]
    }

    /// The payload (this packet's part of it, for a payload spread over several packets).
    pub fn payload(&self) -> &[u8] {
        &self.wire[HEADER_LEN..]
    }

    /// The payload as a shared buffer (no copy).
    pub fn payload_bytes(&self) -> Bytes {
        self.wire.slice(HEADER_LEN..)
    }

    /// Header and payload, as received.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// First payload byte, which tells most packet kinds apart.
    pub fn first_byte(&self) -> Option<u8> {
        self.payload().first().copied()
    }

    /// True if the next packet carries more of this payload.
    pub fn continues(&self) -> bool {
        self.payload().len() == MAX_PACKET_PAYLOAD
    }

    /// True if this packet carries the rest of a payload begun by an earlier packet; such a
    /// packet has no header byte of its own and must not be classified.
    pub fn is_continuation(&self) -> bool {
        self.continuation
    }
}

// === impl PacketDecoder ===

impl PacketDecoder {
    /// A decoder that rejects payloads larger than `max_payload` bytes.
    pub fn new(max_payload: usize) -> Self {
        PacketDecoder {
            max_payload,
            pending: 0,
            continuing: false,
        }
    }

    /// Changes the payload limit (e.g. from the handshake limit to the session limit).
    pub fn set_max_payload(&mut self, max_payload: usize) {
        self.max_payload = max_payload;
    }

    /// True while the packets of a multi-packet payload are arriving.
    pub fn in_payload(&self) -> bool {
        self.continuing
    }

    /// Takes the next whole packet off the front of `src`, or answers `Ok(None)` if `src` does
    /// not hold one yet. The size limit is checked as soon as the header is in, before any of
    /// the payload has to be buffered.
    ///
    /// # Errors
    /// [`ProtoError::TooLarge`] if the packet would take its payload past the limit.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Packet>, ProtoError> {
        let Some(len) = self.announced_len(src)? else {
            return Ok(None);
        };
        if src.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let wire = src.split_to(HEADER_LEN + len).freeze();
        let continuation = self.continuing;
        self.continuing = len == MAX_PACKET_PAYLOAD;
        self.pending = if self.continuing {
            self.pending + len
        } else {
            0
        };
        Ok(Some(Packet { wire, continuation }))
    }

    /// How many more bytes `src` needs before [`decode`](Self::decode) can return a packet
    /// (0 if it already can). Lets the reader size its buffer without trusting the peer's
    /// length any further than the limit allows.
    ///
    /// # Errors
    /// [`ProtoError::TooLarge`], as for `decode`.
    pub fn missing(&self, src: &[u8]) -> Result<usize, ProtoError> {
        match self.announced_len(src)? {
            None => Ok(HEADER_LEN - src.len()),
            Some(len) => Ok((HEADER_LEN + len).saturating_sub(src.len())),
        }
    }

    fn announced_len(&self, src: &[u8]) -> Result<Option<usize>, ProtoError> {
        if src.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = usize::from(src[0]) | usize::from(src[1]) << 8 | usize::from(src[2]) << 16;
        let total = if self.continuing {
            self.pending + len
        } else {
            len
        };
        if total > self.max_payload {
            return Err(ProtoError::TooLarge {
                len: total,
                max: self.max_payload,
            });
        }
        Ok(Some(len))
    }
}

// === impl Sequence ===

impl Sequence {
    /// An exchange whose next packet must carry `seq`.
    pub fn expecting(seq: u8) -> Self {
        Sequence { next: seq }
    }

    /// The id the next packet must carry.
    pub fn next(&self) -> u8 {
        self.next
    }

    /// Accepts a received packet's id and moves on.
    ///
    /// # Errors
    /// [`ProtoError::OutOfSequence`] if `got` is not the expected id.
    pub fn check(&mut self, got: u8) -> Result<(), ProtoError> {
        if got != self.next {
            return Err(ProtoError::OutOfSequence {
                expected: self.next,
                got,
            });
        }
        self.next = got.wrapping_add(1);
        Ok(())
    }

    /// Returns the id for a packet about to be sent and moves on.
    pub fn advance(&mut self) -> u8 {
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        seq
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn decode_all(decoder: &mut PacketDecoder, stream: &[u8]) -> Vec<Packet> {
        let mut buf = BytesMut::from(stream);
        let mut out = Vec::new();
        while let Some(p) = decoder.decode(&mut buf).expect("decodes") {
            out.push(p);
        }
        assert!(buf.is_empty(), "leftover bytes");
        out
    }

    #[test]
    fn header_needs_four_bytes_and_payload_needs_all_of_it() {
        let mut d = PacketDecoder::new(1 << 20);
        let mut buf = BytesMut::from(&[0x03, 0x00, 0x00][..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert_eq!(d.missing(&buf), Ok(1));
        buf.extend_from_slice(&[0x07, b'a', b'b']);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert_eq!(d.missing(&buf), Ok(1));
        buf.extend_from_slice(b"c");
        let p = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!((p.seq(), p.payload()), (7, &b"abc"[..]));
        assert_eq!(p.wire(), &[3, 0, 0, 7, b'a', b'b', b'c']);
        assert!(!p.continues() && !p.is_continuation());
    }

    #[test]
    fn oversized_header_is_rejected_before_the_payload_arrives() {
        let mut d = PacketDecoder::new(100);
        let mut buf = BytesMut::from(&[0xFF, 0xFF, 0xFF, 0x01][..]);
        assert_eq!(
            d.decode(&mut buf),
            Err(ProtoError::TooLarge {
                len: 0xFF_FFFF,
                max: 100
            })
        );
    }

    #[test]
    fn payloads_of_16_mib_and_more_are_split_and_reassembled() {
        // (payload length, packets on the wire)
        let table = [
            (0, 1),
            (MAX_PACKET_PAYLOAD - 1, 1),
            (MAX_PACKET_PAYLOAD, 2), // full packet + empty terminator
            (MAX_PACKET_PAYLOAD + 1, 2),
            (2 * MAX_PACKET_PAYLOAD, 3),
        ];
        for (len, packets) in table {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut wire = BytesMut::new();
            let next = put_payload(&mut wire, 5, &payload);
            assert_eq!(next, 5u8.wrapping_add(packets as u8), "len {len}");
            let mut d = PacketDecoder::new(64 << 20);
            let got = decode_all(&mut d, &wire);
            assert_eq!(got.len(), packets, "len {len}");
            let mut joined = Vec::new();
            for (i, p) in got.iter().enumerate() {
                assert_eq!(p.seq(), 5 + i as u8);
                assert_eq!(p.is_continuation(), i > 0);
                assert_eq!(p.continues(), i + 1 < packets);
                joined.extend_from_slice(p.payload());
            }
            assert_eq!(joined, payload, "len {len}");
            assert!(!d.in_payload());
        }
    }

    #[test]
    fn limit_applies_to_the_reassembled_payload() {
        let mut wire = BytesMut::new();
        put_payload(&mut wire, 0, &vec![0u8; MAX_PACKET_PAYLOAD + 10]);
        let mut d = PacketDecoder::new(MAX_PACKET_PAYLOAD + 5);
        let first = d.decode(&mut wire).unwrap().unwrap();
        assert!(first.continues());
        assert_eq!(
            d.decode(&mut wire),
            Err(ProtoError::TooLarge {
                len: MAX_PACKET_PAYLOAD + 10,
                max: MAX_PACKET_PAYLOAD + 5
            })
        );
    }

    #[test]
    fn sequence_wraps_and_reports_the_expected_id() {
        let mut s = Sequence::expecting(255);
        assert_eq!(s.check(255), Ok(()));
        assert_eq!(s.next(), 0);
        assert_eq!(
            s.check(2),
            Err(ProtoError::OutOfSequence {
                expected: 0,
                got: 2
            })
        );
        assert_eq!(s.advance(), 0);
        assert_eq!(s.next(), 1);
    }

    #[test]
    fn payloads_in_parts_frame_like_whole_ones() {
        for len in [
            0,
            5,
            MAX_PACKET_PAYLOAD - 3,
            MAX_PACKET_PAYLOAD - 2,
            MAX_PACKET_PAYLOAD,
            2 * MAX_PACKET_PAYLOAD + 7,
        ] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let split = len.min(3);
            let mut whole = BytesMut::new();
            let mut parts = BytesMut::new();
            let a = put_payload(&mut whole, 9, &payload);
            let b = put_payload_parts(&mut parts, 9, &[&payload[..split], &[], &payload[split..]]);
            assert_eq!((a, &whole[..]), (b, &parts[..]), "len {len}");
        }
    }

    proptest! {
        #[test]
        fn any_split_of_the_stream_decodes_to_the_same_packets(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..8),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut wire = BytesMut::new();
            for (i, p) in payloads.iter().enumerate() {
                put_payload(&mut wire, i as u8, p);
            }
            let mut positions: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
            positions.sort_unstable();
            let mut d = PacketDecoder::new(1 << 20);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut from = 0;
            for to in positions.into_iter().chain([wire.len()]) {
                buf.extend_from_slice(&wire[from..to]);
                from = to;
                while let Some(p) = d.decode(&mut buf)? {
                    got.push(p);
                }
            }
            prop_assert_eq!(got.len(), payloads.len());
            for (i, (p, want)) in got.iter().zip(&payloads).enumerate() {
                prop_assert_eq!(p.seq(), i as u8);
                prop_assert_eq!(p.payload(), &want[..]);
                let rebuilt = Packet::new(i as u8, want);
                prop_assert_eq!(p.wire(), rebuilt.wire());
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in 0usize..1000) {
            let mut d = PacketDecoder::new(max);
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = d.decode(&mut buf) {}
        }
    }
}
