//! Mutations of valid inputs: truncation, bit flips, byte replacement, insertion, removal,
//! repeated slices, and length fields inflated to the wide length-encoded forms or to the
//! largest values a fixed-width length can hold. Plus the exhaustive neighbours of a seed
//! (every truncation, every single-bit flip) for the deterministic passes.

use proptest::prelude::*;
use proptest::sample::{select, Index};

/// Byte values that mean something somewhere in the protocol: packet and event type bytes,
/// the length-encoding prefixes, separators the text parsers look for.
pub const INTERESTING: [u8; 22] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x0A, 0x0F, 0x10, 0x1B, 0x26, 0x7F, 0x80, 0xA2, 0xA5, 0xEF, 0xFA,
    0xFB, 0xFC, 0xFD, 0xFE, 0xFF, b'#',
];

/// One edit of a byte string.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Keep only the bytes before this point.
    Truncate(Index),
    /// Flip one bit of one byte.
    FlipBit(Index, u8),
    /// Replace one byte.
    Set(Index, u8),
    /// Insert bytes.
    Insert(Index, Vec<u8>),
    /// Remove up to this many bytes.
    Remove(Index, usize),
    /// Repeat a slice of up to `.1` bytes `.2` more times.
    Repeat(Index, usize, usize),
    /// Replace one byte (typically a one-byte length) by a wider length-encoded integer.
    Lenenc(Index, Lenenc),
    /// Overwrite bytes in place (a fixed-width length or id).
    Overwrite(Index, Vec<u8>),
}

/// A length-encoded integer in a chosen form, whatever its value.
#[derive(Debug, Clone, Copy)]
pub enum Lenenc {
    /// `FB` (NULL in a row, invalid as a length).
    Null,
    /// `FC` + u16.
    Two(u16),
    /// `FD` + u24.
    Three(u32),
    /// `FE` + u64.
    Eight(u64),
}

/// Values a length field is most likely to be wrong with.
pub fn big_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        select(vec![
            u64::MAX,
            1 << 63,
            1 << 60,
            u64::from(u32::MAX),
            0x100_0000,
            0xFF_FFFF,
            0xFFFF,
        ]),
        0u64..1024,
        any::<u64>(),
    ]
}

/// Any byte, interesting ones more often than chance.
pub fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![any::<u8>(), select(INTERESTING.to_vec())]
}

/// One mutation.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    let lenenc = prop_oneof![
        Just(Lenenc::Null),
        any::<u16>().prop_map(Lenenc::Two),
        (0u32..=0xFF_FFFF).prop_map(Lenenc::Three),
        big_u64().prop_map(Lenenc::Eight),
    ];
    let fixed = prop_oneof![
        select(vec![
            vec![0xFF; 3],
            vec![0xFF; 4],
            vec![0xFF; 8],
            vec![0xFE, 0xFF, 0xFF],
            vec![0x00, 0x00, 0x00, 0x01],
            vec![0x00; 4],
        ]),
        proptest::collection::vec(byte(), 1..9),
    ];
    prop_oneof![
        2 => any::<Index>().prop_map(Mutation::Truncate),
        4 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        4 => (any::<Index>(), byte()).prop_map(|(i, v)| Mutation::Set(i, v)),
        2 => (any::<Index>(), proptest::collection::vec(byte(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        2 => (any::<Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
        1 => (any::<Index>(), 1usize..32, 1usize..4)
            .prop_map(|(i, n, t)| Mutation::Repeat(i, n, t)),
        3 => (any::<Index>(), lenenc).prop_map(|(i, l)| Mutation::Lenenc(i, l)),
        3 => (any::<Index>(), fixed).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
    ]
}

/// Zero to four mutations (zero keeps a valid input valid, which the properties also want).
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 0..5)
}

/// A seed, mutated.
pub fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (select(seeds), mutations()).prop_map(|(seed, m)| apply(&seed, &m))
}

/// Arbitrary bytes, or more often a mutated seed.
pub fn input(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..256),
        4 => mutated(seeds),
    ]
}

/// `seed` with `mutations` applied in order.
pub fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for m in mutations {
        m.apply(&mut bytes);
    }
    bytes
}

/// Every truncation and every single-bit flip of `seed`.
pub fn neighbours(seed: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let cuts = (0..seed.len()).map(|n| seed[..n].to_vec());
    let flips = (0..seed.len() * 8).map(|bit| {
        let mut b = seed.to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        b
    });
    cuts.chain(flips)
}

// === impl Mutation ===

impl Mutation {
    /// Applies the edit; indices are taken modulo the current length.
    pub fn apply(&self, b: &mut Vec<u8>) {
        let len = b.len();
        match self {
            Mutation::Insert(at, bytes) => {
                let i = at.index(len + 1);
                b.splice(i..i, bytes.iter().copied());
            }
            _ if len == 0 => {}
            Mutation::Truncate(at) => b.truncate(at.index(len)),
            Mutation::FlipBit(at, bit) => b[at.index(len)] ^= 1 << (bit % 8),
            Mutation::Set(at, value) => b[at.index(len)] = *value,
            Mutation::Remove(at, n) => {
                let i = at.index(len);
                b.drain(i..(i + n).min(len));
            }
            Mutation::Repeat(at, n, times) => {
                let i = at.index(len);
                let end = (i + n).min(len);
                let piece = b[i..end].to_vec();
                for _ in 0..*times {
                    b.splice(end..end, piece.iter().copied());
                }
            }
            Mutation::Lenenc(at, form) => {
                let i = at.index(len);
                b.splice(i..=i, form.encode());
            }
            Mutation::Overwrite(at, bytes) => {
                let i = at.index(len);
                for (slot, v) in b[i..].iter_mut().zip(bytes) {
                    *slot = *v;
                }
            }
        }
    }
}

// === impl Lenenc ===

impl Lenenc {
    /// The encoded bytes.
    pub fn encode(self) -> Vec<u8> {
        match self {
            Lenenc::Null => vec![0xFB],
            Lenenc::Two(v) => [&[0xFC][..], &v.to_le_bytes()].concat(),
            Lenenc::Three(v) => [&[0xFD][..], &v.to_le_bytes()[..3]].concat(),
            Lenenc::Eight(v) => [&[0xFE][..], &v.to_le_bytes()].concat(),
        }
    }
}
