//! Fuzzing the framing layer: `PacketDecoder` (whole and split feeds, inflated headers,
//! multi-packet payloads, `missing`) and `Sequence`.

use bytes::BytesMut;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;
use strongsync_proto::packet::{
    put_payload, Packet, PacketDecoder, Sequence, HEADER_LEN, MAX_PACKET_PAYLOAD,
};
use strongsync_proto::ProtoError;

use crate::alloc::{bounded, measure};
use crate::mutate::{apply, big_u64, input, mutations, neighbours, Mutation};
use crate::wire::le;
use crate::{config, seeds, slow_config};

/// How a feed of bytes ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// The decoder refused the stream.
    Failed(ProtoError),
    /// The decoder wants more; these bytes are buffered.
    Waiting(Vec<u8>),
}

/// Feeds `stream` to a fresh decoder in pieces cut at `cuts`, taking every packet it yields,
/// and checks on the way that `missing` agrees with `decode` and that decoding allocates no
/// more than the bound.
fn feed(
    max_payload: usize,
    stream: &[u8],
    cuts: &[usize],
) -> Result<(Vec<Packet>, End), TestCaseError> {
    let mut d = PacketDecoder::new(max_payload);
    let mut buf = BytesMut::new();
    let mut packets = Vec::new();
    let mut from = 0;
    for to in cuts.iter().copied().chain([stream.len()]) {
        buf.extend_from_slice(&stream[from..to.max(from)]);
        from = to.max(from);
        loop {
            let missing = d.missing(&buf);
            let n = buf.len();
            let got = bounded(n, || d.decode(&mut buf));
            match (missing, got) {
                (Ok(0), Ok(Some(p))) => packets.push(p),
                (Ok(m), Ok(None)) if m > 0 => break,
                (Err(a), Err(b)) if a == b => return Ok((packets, End::Failed(b))),
                (m, got) => {
                    return Err(TestCaseError::fail(format!(
                        "missing() said {m:?} but decode() gave {got:?}"
                    )))
                }
            }
        }
    }
    Ok((packets, End::Waiting(buf.to_vec())))
}

/// The decoder on `stream`: what it yields must not depend on how the stream is cut, every
/// packet must be exactly the bytes it came from, the limit must hold for whole payloads, and
/// `missing` must say exactly how many bytes complete a waiting packet.
fn check_stream(max_payload: usize, stream: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let (packets, end) = feed(max_payload, stream, &[])?;
    let split = feed(max_payload, stream, cuts)?;
    prop_assert_eq!(&split.0, &packets, "cuts {:?}", cuts);
    prop_assert_eq!(&split.1, &end);

    let mut at = 0;
    let mut payload_len = 0;
    for (i, p) in packets.iter().enumerate() {
        let len = p.payload().len();
        prop_assert_eq!(p.wire(), &stream[at..at + HEADER_LEN + len]);
        prop_assert_eq!(p.is_continuation(), i > 0 && packets[i - 1].continues());
        prop_assert_eq!(p.continues(), len == MAX_PACKET_PAYLOAD);
        payload_len = if p.is_continuation() {
            payload_len + len
        } else {
            len
        };
        prop_assert!(payload_len <= max_payload);
        at += HEADER_LEN + len;
    }
    match end {
        End::Waiting(rest) => {
            prop_assert_eq!(&rest[..], &stream[at..]);
            let mut d = PacketDecoder::new(max_payload);
            let mut replay = BytesMut::from(&stream[..at]);
            while d.decode(&mut replay)?.is_some() {}
            let missing = d.missing(&rest)?;
            if rest.len() >= HEADER_LEN && missing <= 1 << 16 {
                // One byte short still waits; the bytes `missing` asks for complete the packet.
                let mut short = BytesMut::from(&rest[..]);
                short.extend_from_slice(&vec![0; missing - 1]);
                prop_assert_eq!(d.clone().decode(&mut short)?, None);
                short.extend_from_slice(&[0]);
                let p = d.decode(&mut short)?.expect("completed packet");
                prop_assert_eq!(p.wire().len(), rest.len() + missing);
            }
        }
        End::Failed(ProtoError::TooLarge { len, max }) => {
            prop_assert_eq!(max, max_payload);
            prop_assert!(len > max);
        }
        End::Failed(e) => prop_assert!(false, "unexpected error {e}"),
    }
    Ok(())
}

/// A stream of packets with headers overwritten: the 3-byte length (often to its maximum) and
/// the sequence id, at packet boundaries of the valid stream.
fn with_headers(
    seed: Vec<u8>,
    edits: Vec<(Index, u32, Option<u8>)>,
    mutations: Vec<Mutation>,
) -> Vec<u8> {
    let mut starts = Vec::new();
    let mut at = 0;
    while at + HEADER_LEN <= seed.len() {
        starts.push(at);
        at += HEADER_LEN + le(&seed[at..at + 3]) as usize;
    }
    let mut wire = seed;
    for (which, len, seq) in edits {
        if starts.is_empty() {
            break;
        }
        let at = starts[which.index(starts.len())];
        wire[at..at + 3].copy_from_slice(&len.to_le_bytes()[..3]);
        if let Some(seq) = seq {
            wire[at + 3] = seq;
        }
    }
    apply(&wire, &mutations)
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    let built = proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..6)
        .prop_map(|payloads| {
            let mut wire = BytesMut::new();
            for (i, p) in payloads.iter().enumerate() {
                put_payload(&mut wire, i as u8, p);
            }
            wire.to_vec()
        });
    let seed = prop_oneof![built, select(seeds::wires())];
    let len = prop_oneof![
        select(vec![0xFF_FFFF, 0xFF_FFFE, 0]),
        0u32..0x100,
        0u32..0x100_0000
    ];
    let edits = proptest::collection::vec((any::<Index>(), len, any::<Option<u8>>()), 0..3);
    prop_oneof![
        1 => input(seeds::wires()),
        3 => (seed, edits, mutations()).prop_map(|(s, e, m)| with_headers(s, e, m)),
    ]
}

fn max_payload() -> impl Strategy<Value = usize> {
    select(vec![
        0,
        1,
        16,
        1000,
        MAX_PACKET_PAYLOAD - 1,
        MAX_PACKET_PAYLOAD,
        64 << 20,
        usize::MAX,
    ])
}

fn cut_points(len: usize, cuts: &[Index]) -> Vec<usize> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(len + 1)).collect();
    at.sort_unstable();
    at
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn packet_decoder_handles_any_stream_cut_anywhere(
        stream in stream(),
        max in max_payload(),
        cuts in proptest::collection::vec(any::<Index>(), 0..8),
    ) {
        let cuts = cut_points(stream.len(), &cuts);
        check_stream(max, &stream, &cuts)?;
    }

    #[test]
    fn sequence_accepts_exactly_the_next_id(
        start: u8,
        ids in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut s = Sequence::expecting(start);
        for got in ids {
            let next = s.next();
            match s.check(got) {
                Ok(()) => prop_assert_eq!((got, s.next()), (next, next.wrapping_add(1))),
                Err(e) => {
                    prop_assert_eq!(e, ProtoError::OutOfSequence { expected: next, got });
                    prop_assert_eq!(s.next(), next);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(slow_config())]

    /// Payloads of 16 MiB and more: headers inflated or shrunk around the first full packet,
    /// limits around the total, cut anywhere.
    #[test]
    fn multi_packet_payloads_split_and_limit_like_one_feed(
        tail in 0usize..40,
        edits in proptest::collection::vec((0usize..3, big_u64(), any::<Option<u8>>()), 0..2),
        max in select(vec![MAX_PACKET_PAYLOAD - 1, MAX_PACKET_PAYLOAD + 20, 64 << 20]),
        cuts in proptest::collection::vec(any::<Index>(), 0..4),
    ) {
        let mut wire = BytesMut::new();
        let next = put_payload(&mut wire, 0, &vec![0x5A; MAX_PACKET_PAYLOAD + tail]);
        put_payload(&mut wire, next, b"\x01after");
        let second = HEADER_LEN + MAX_PACKET_PAYLOAD;
        let starts = [0, second, second + HEADER_LEN + tail];
        for (which, len, seq) in edits {
            let at = starts[which];
            wire[at..at + 3].copy_from_slice(&len.to_le_bytes()[..3]);
            if let Some(seq) = seq {
                wire[at + 3] = seq;
            }
        }
        let cuts = cut_points(wire.len(), &cuts);
        check_stream(max, &wire, &cuts)?;
    }
}

#[test]
fn every_truncation_and_bit_flip_of_the_captured_streams() {
    for seed in seeds::wires().iter().filter(|w| w.len() <= 2048) {
        for stream in neighbours(seed) {
            let half = stream.len() / 2;
            for max in [16, 64 << 20] {
                if let Err(e) = check_stream(max, &stream, &[half]) {
                    panic!("{e}\nmax {max}, stream {stream:02x?}");
                }
            }
        }
    }
}

#[test]
fn a_header_claiming_16_mib_reserves_nothing() {
    let mut d = PacketDecoder::new(64 << 20);
    let mut buf = BytesMut::from(&[0xFF, 0xFF, 0xFF, 0x00, 0x01][..]);
    let (got, bytes) = measure(|| d.decode(&mut buf));
    assert_eq!((got, bytes), (Ok(None), 0));
    assert_eq!(d.missing(&buf), Ok(MAX_PACKET_PAYLOAD - 1));
    let mut small = PacketDecoder::new(1 << 20);
    assert_eq!(
        small.decode(&mut buf),
        Err(ProtoError::TooLarge {
            len: MAX_PACKET_PAYLOAD,
            max: 1 << 20
        })
    );
}
