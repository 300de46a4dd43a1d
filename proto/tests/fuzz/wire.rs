//! Fuzzing the protocol's basic encodings as `wire::Reader` decodes them: fixed-width
//! integers, length-encoded integers and strings (with inflated and impossible lengths),
//! NUL-terminated strings, and raw takes of any size.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use strongsync_proto::wire::{put_lenenc_int, put_lenenc_str, Reader};
use strongsync_proto::ProtoError;

use crate::alloc::{bounded, measure};
use crate::config;
use crate::mutate::input;

/// One field read by [`Reader`].
#[derive(Debug, Clone, Copy)]
enum Field {
    U8,
    U16,
    U24,
    U32,
    U64,
    LenencInt,
    LenencStr,
    NullStr,
    Take(usize),
    Rest,
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        7 => select(vec![
            Field::U8,
            Field::U16,
            Field::U24,
            Field::U32,
            Field::U64,
            Field::NullStr,
            Field::Rest,
        ]),
        3 => Just(Field::LenencInt),
        3 => Just(Field::LenencStr),
        1 => prop_oneof![0usize..32, Just(usize::MAX), Just(usize::MAX - 1), any::<usize>()]
            .prop_map(Field::Take),
    ]
}

/// A little-endian integer.
pub fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |n, &b| n << 8 | u64::from(b))
}

/// The length-encoded integer at the start of `buf` as (bytes, value), computed here
/// independently of the crate; `None` if it is cut short or starts with `FB`/`FF`.
fn lenenc(buf: &[u8]) -> Option<(usize, u64)> {
    let width = match *buf.first()? {
        b @ 0..=0xFA => return Some((1, u64::from(b))),
        0xFC => 3,
        0xFD => 4,
        0xFE => 9,
        _ => return None,
    };
    buf.get(1..width).map(|v| (width, le(v)))
}

/// Reads `fields` from `buf`: every read returns exactly what an independent decoding of the
/// same bytes says (or fails where that one does), consumes exactly its field, and a
/// fixed-width read that fails consumes nothing.
fn check_reader(buf: &[u8], fields: &[Field]) -> Result<(), TestCaseError> {
    let mut r = Reader::new(buf);
    let n = buf.len();
    for &f in fields {
        let at = r.position();
        let left = &buf[at..];
        let fixed = |w: usize| left.get(..w).map(|v| (w, le(v)));
        // (bytes consumed and value) from the reader, and what they should be.
        let (got, want) = match f {
            Field::U8 => (bounded(n, || r.u8("f")).map(u64::from), fixed(1)),
            Field::U16 => (bounded(n, || r.u16("f")).map(u64::from), fixed(2)),
            Field::U24 => (bounded(n, || r.u24("f")).map(u64::from), fixed(3)),
            Field::U32 => (bounded(n, || r.u32("f")).map(u64::from), fixed(4)),
            Field::U64 => (bounded(n, || r.u64("f")), fixed(8)),
            Field::LenencInt => (bounded(n, || r.lenenc_int("f")), lenenc(left)),
            Field::LenencStr => {
                let got = bounded(n, || r.lenenc_str("f"));
                let want = lenenc(left)
                    .filter(|&(w, len)| len <= (left.len() - w) as u64)
                    .map(|(w, len)| (w, &left[w..w + len as usize]));
                prop_assert_eq!(got.as_ref().ok().copied(), want.map(|(_, s)| s));
                let want = want.map(|(w, s)| (w + s.len(), s.len() as u64));
                (got.map(|s| s.len() as u64), want)
            }
            Field::NullStr => {
                let got = bounded(n, || r.null_str("f"));
                let want = left.iter().position(|&b| b == 0).map(|end| &left[..end]);
                prop_assert_eq!(got.as_ref().ok().copied(), want);
                (
                    got.map(|s| s.len() as u64),
                    want.map(|s| (s.len() + 1, s.len() as u64)),
                )
            }
            Field::Take(len) => {
                let got = bounded(n, || r.take(len, "f"));
                let want = left.get(..len);
                prop_assert_eq!(got.as_ref().ok().copied(), want);
                (
                    got.map(|s| s.len() as u64),
                    want.map(|s| (len, s.len() as u64)),
                )
            }
            Field::Rest => {
                prop_assert_eq!(r.rest(), left);
                (Ok(left.len() as u64), Some((left.len(), left.len() as u64)))
            }
        };
        match (got, want) {
            (Ok(v), Some((used, w))) => {
                prop_assert_eq!(v, w, "{:?}", f);
                prop_assert_eq!(r.position(), at + used, "{:?}", f);
            }
            (Err(ProtoError::Truncated { .. } | ProtoError::Malformed { .. }), None) => {
                if !matches!(f, Field::LenencInt | Field::LenencStr) {
                    prop_assert_eq!(r.position(), at, "a failed {:?} consumed bytes", f);
                }
            }
            (got, want) => prop_assert!(false, "{:?}: got {:?}, want {:?}", f, got, want),
        }
        prop_assert!(r.position() <= n);
        prop_assert_eq!(r.remaining(), n - r.position());
        prop_assert_eq!(r.is_empty(), r.remaining() == 0);
    }
    Ok(())
}

/// Length-encoded integers and strings in every form, back to back.
fn lenenc_seeds() -> Vec<Vec<u8>> {
    [
        0u64,
        0xFA,
        0xFB,
        0xFFFF,
        0x1_0000,
        0xFF_FFFF,
        0x100_0000,
        u64::MAX,
    ]
    .iter()
    .map(|&v| {
        let mut out = Vec::new();
        put_lenenc_int(&mut out, v);
        put_lenenc_str(&mut out, &vec![b's'; (v % 300) as usize]);
        out.extend_from_slice(b"name\0");
        put_lenenc_str(&mut out, b"");
        out
    })
    .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reader_fields_consume_exactly_what_they_return(
        buf in input(lenenc_seeds()),
        fields in proptest::collection::vec(field(), 1..12),
    ) {
        check_reader(&buf, &fields)?;
    }
}

#[test]
fn a_string_claiming_2_pow_60_bytes_reserves_nothing() {
    let mut claim = vec![0xFE];
    claim.extend_from_slice(&(1u64 << 60).to_le_bytes());
    claim.extend_from_slice(b"short");
    let (got, bytes) = measure(|| Reader::new(&claim).lenenc_str("s"));
    assert_eq!(got, Err(ProtoError::Truncated { what: "s" }));
    assert_eq!(bytes, 0);
    let (got, bytes) = measure(|| Reader::new(&claim).take(usize::MAX, "t"));
    assert_eq!((got, bytes), (Err(ProtoError::Truncated { what: "t" }), 0));
}
