//! Fuzzing the compressed protocol's frames (`CLIENT_COMPRESS`): `FrameDecoder::decode` and
//! `missing` on hostile streams, whole and cut anywhere, with claims past the limit and bodies
//! that inflate past their claims (decompression bombs), and `FrameEncoder` as their source.

use bytes::BytesMut;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use strongsync_proto::compress::{FrameDecoder, FrameEncoder, Step, FRAME_HEADER_LEN};
use strongsync_proto::ProtoError;

use crate::alloc::bounded;
use crate::mutate::{input, neighbours};
use crate::{config, seeds};

/// The limit the properties decode under: small, so that claims past it are common.
const LIMIT: usize = 64 * 1024;

/// What a stream decoded to: the bytes carried, the frames' sequence ids, and how it ended.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    plain: Vec<u8>,
    seqs: Vec<u8>,
    end: Result<usize, ProtoError>,
}

/// Feeds `stream` to a fresh decoder in pieces cut at `cuts`, each call into a fresh output
/// buffer, and checks that each call allocates within the bound, gives at most 64 KiB, and
/// agrees with `missing`. `end` is the count of bytes left waiting, or the error.
fn feed(stream: &[u8], cuts: &[usize]) -> Result<Decoded, TestCaseError> {
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut src = BytesMut::new();
    let mut plain = Vec::new();
    let mut seqs = Vec::new();
    let mut from = 0;
    for to in cuts.iter().copied().chain([stream.len()]) {
        src.extend_from_slice(&stream[from..to.max(from)]);
        from = to.max(from);
        loop {
            let missing = decoder.missing(&src);
            let n = src.len();
            let mut out = BytesMut::new();
            let step = bounded(n, || decoder.decode(&mut src, &mut out));
            prop_assert!(out.len() <= 64 * 1024, "one step gave {} bytes", out.len());
            plain.extend_from_slice(&out);
            match (missing, step) {
                (Ok(0) | Err(_), Err(e)) => {
                    return Ok(Decoded {
                        plain,
                        seqs,
                        end: Err(e),
                    })
                }
                (Ok(_), Ok(None)) => break,
                (Ok(0), Ok(Some(Step::End(seq)))) => seqs.push(seq),
                (Ok(0), Ok(Some(Step::Partial))) => {}
                (m, got) => {
                    return Err(TestCaseError::fail(format!(
                        "missing() said {m:?} but decode() gave {got:?}"
                    )))
                }
            }
        }
    }
    Ok(Decoded {
        plain,
        seqs,
        end: Ok(src.len()),
    })
}

/// Streams of frames built by the encoder: short (stored), compressible, and incompressible
/// runs, one or several frames.
fn frames() -> Vec<Vec<u8>> {
    let mut encoder = FrameEncoder::new(6);
    let runs: Vec<Vec<u8>> = vec![
        b"\x01\x00\x00\x00\x0e".to_vec(),
        seeds::wires().concat(),
        vec![b'x'; 5000],
        (0..3000u32).map(|i| (i * 7919 % 251) as u8).collect(),
    ];
    let mut streams = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let mut out = BytesMut::new();
        encoder.encode(i as u8, run, &mut out);
        streams.push(out.to_vec());
    }
    let mut all = BytesMut::new();
    let mut seq = 0;
    for run in &runs {
        seq = encoder.encode(seq, run, &mut all);
    }
    streams.push(all.to_vec());
    streams
}

/// A frame whose body inflates to `real` bytes while its header claims `claimed`.
fn lying(real: usize, claimed: usize) -> Vec<u8> {
    let mut encoder = FrameEncoder::new(9);
    let mut out = BytesMut::new();
    encoder.encode(0, &vec![0u8; real], &mut out);
    out[4..7].copy_from_slice(&(claimed as u32).to_le_bytes()[..3]);
    out.to_vec()
}

/// The stream decodes the same however it is cut, and within its limits.
fn check(stream: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let whole = feed(stream, &[])?;
    let split = feed(stream, cuts)?;
    prop_assert_eq!(&split, &whole, "cuts {:?}", cuts);
    if let Err(ProtoError::TooLarge { len, max }) = &whole.end {
        prop_assert!(len > max && *max == LIMIT);
    }
    Ok(())
}

fn cuts(len: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(0..=len, 0..6).prop_map(|mut c| {
        c.sort_unstable();
        c
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn frames_decode_alike_however_cut_and_within_bounds(
        (stream, cuts) in input(frames()).prop_flat_map(|s| {
            let len = s.len();
            (Just(s), cuts(len))
        }),
    ) {
        check(&stream, &cuts)?;
    }

    #[test]
    fn frames_carry_back_what_was_encoded(
        runs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2000), 1..4),
        seq in any::<u8>(),
    ) {
        let mut encoder = FrameEncoder::new(6);
        let mut stream = BytesMut::new();
        let mut next = seq;
        for run in &runs {
            next = encoder.encode(next, run, &mut stream);
        }
        let decoded = feed(&stream, &[])?;
        prop_assert_eq!(decoded.plain, runs.concat());
        prop_assert_eq!(decoded.end, Ok(0));
        prop_assert_eq!(decoded.seqs.len(), usize::from(next.wrapping_sub(seq)));
    }

    /// A body that inflates past its claim is refused, having given no more than the claim
    /// (and one byte that shows it).
    #[test]
    fn bombs_are_refused_at_their_claim(real in 2_000usize..200_000, claimed in 1usize..2_000) {
        let stream = lying(real, claimed);
        let decoded = feed(&stream, &[])?;
        prop_assert!(decoded.end.is_err(), "{:?}", decoded.end);
        prop_assert!(decoded.plain.len() <= claimed + 1, "{} of {}", decoded.plain.len(), claimed);
        prop_assert!(decoded.seqs.is_empty());
    }
}

/// Every truncation and every single-bit flip of every seed, and a header at the limit.
#[test]
fn every_truncation_and_bit_flip_of_every_seed() {
    for seed in frames().iter().filter(|s| s.len() < 600) {
        for stream in neighbours(seed) {
            check(&stream, &[stream.len() / 2]).unwrap();
        }
    }
    let mut at_limit = vec![0u8; FRAME_HEADER_LEN];
    at_limit[..3].copy_from_slice(&(LIMIT as u32).to_le_bytes()[..3]);
    let decoded = feed(&at_limit, &[]).unwrap();
    assert_eq!(
        decoded.end,
        Ok(0),
        "a stored frame of the limit waits for its body"
    );
    at_limit[..3].copy_from_slice(&(LIMIT as u32 + 1).to_le_bytes()[..3]);
    assert!(matches!(
        feed(&at_limit, &[]).unwrap().end,
        Err(ProtoError::TooLarge { .. })
    ));
}
