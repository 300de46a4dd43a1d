//! Fuzz suite for every decoder in `strongsync-proto`: hostile bytes must give `Ok(Some)`,
//! `Ok(None)` ("need more") or an `Err`, never a panic, and never an allocation sized by what
//! the input claims rather than by what it holds.
//!
//! Each property feeds a decoder (a) arbitrary bytes and (b) mutated valid inputs: packets
//! captured from MariaDB 10.11.19 (`tests/fixtures`) or built with the crate's own encoders,
//! truncated, bit-flipped, with bytes replaced, inserted, removed or repeated, with length
//! fields inflated to the `FC`/`FD`/`FE` forms with huge values (and `FB`), and with 3-byte
//! packet lengths and 4-byte event sizes pushed to their maximum. Streaming decoders also get
//! the same input cut into pieces, and must answer as they do for one piece. Beyond "no
//! panic", each property checks what the decoder promises (a field is exactly the bytes it
//! came from, a rewrite parses back, a response ends once). Deterministic passes add every
//! truncation and every single-bit flip of every seed.
//!
//! A counting global allocator ([`alloc`]) checks that decoding `n` bytes allocates at most
//! `4 n + 64 KiB` ([`alloc::limit`]), counted per thread, inside each decoder call only.
//!
//! Decoders covered (every public entry point that reads bytes a peer sent), and the module
//! here that fuzzes them:
//!
//! - `packet` ([`framing`]): `PacketDecoder::decode` and `missing` (split feeds, payloads of
//!   16 MiB and more, the size limit, inflated 3-byte lengths), the `Packet` accessors,
//!   `Sequence::check`.
//! - `wire` ([`wire`]): `Reader::{u8, u16, u24, u32, u64, lenenc_int, lenenc_str, null_str,
//!   take, rest}`.
//! - `handshake` ([`handshake`]): `ServerGreeting::parse`, `is_mariadb`, `set_capabilities`;
//!   `ClientResponse::parse` (HandshakeResponse41 and SSLRequest), `is_ssl_request`,
//!   `set_capabilities`.
//! - `ok` ([`ok`]): `OkPacket::parse` with and without `CLIENT_SESSION_TRACK`, `state_items`,
//!   `StateItem::variables`, `needs_filtering`, `write_filtered`; `EofPacket::parse`,
//!   `is_eof`; `ErrPacket::parse`.
//! - `gtid` ([`ok`], [`binlog`]): `tracked_gtids` (MariaDB `last_gtid`, MySQL
//!   `SESSION_TRACK_GTIDS`), `Gtid::parse` and `FromStr`.
//! - `response` and `command` ([`response`]): `ResponseReader::for_command` (command parsing),
//!   `on_packet`, `infile_sent`, over whole exchanges and over byte streams cut anywhere;
//!   `command::name`.
//! - `binlog` ([`binlog`]): `EventHeader::parse`; `StreamTracker::on_event` for ROTATE,
//!   FORMAT_DESCRIPTION, GTID, XID, XA_PREPARE, INCIDENT, QUERY, QUERY_COMPRESSED, HEARTBEAT
//!   and any other type, with and without CRC32, and for the first packet of a large event.
//! - `position` ([`binlog`]): `file_seq`, `Position::in_file`.
//! - `semisync` ([`semisync`]): `Ack::parse`, `Negotiation::recognise`, and the `00 EF flag`
//!   event header as a replica reads what `put_event` wrote.
//! - `compress` ([`compress`]): `FrameDecoder::decode` and `missing` (frames cut anywhere,
//!   claims past the limit, bodies that inflate past their claims), with `FrameEncoder` as
//!   the seed source.
//!
//! Not decoders, so not here: `capabilities` (flag arithmetic), `resultset` and the `put_*`
//! encoders (used as seed sources and checked against the decoders). An auth switch request is
//! relayed opaquely by the proxy; its captured bytes are seeds of the OK/ERR/EOF properties.
//!
//! # Running it
//!
//! `cargo test -p strongsync-proto --test fuzz` runs [`DEFAULT_CASES`] cases per property
//! (well under a minute in a debug build on two cores; CI runs it through `tests/run`). For a
//! longer run:
//!
//! ```text
//! STRONGSYNC_FUZZ_CASES=1000000 cargo test -p strongsync-proto --release --test fuzz
//! ```
//!
//! For scale: 250 000 cases per property took 458 s in a release build on two shared cores,
//! most of it in the two properties that carry 16 MiB payloads (they run a sixteenth of the
//! cases).
//!
//! `PROPTEST_CASES` works too when `STRONGSYNC_FUZZ_CASES` is unset. A failure prints the
//! shrunk input, and proptest saves its seed in `proto/tests/proptest-regressions/` so that
//! the next run tries it first. A crash found here gets a plain regression test with the exact
//! input next to the decoder's unit tests.

use proptest::test_runner::Config as ProptestConfig;

mod alloc;
mod binlog;
mod built;
#[path = "../capture/mod.rs"]
mod capture;
mod compress;
mod framing;
mod handshake;
mod mutate;
mod ok;
mod response;
mod seeds;
mod semisync;
mod wire;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// Cases per property when neither `STRONGSYNC_FUZZ_CASES` nor `PROPTEST_CASES` is set.
pub const DEFAULT_CASES: u32 = 2048;

/// Cases per property: `STRONGSYNC_FUZZ_CASES`, else `PROPTEST_CASES`, else
/// [`DEFAULT_CASES`].
fn cases() -> u32 {
    ["STRONGSYNC_FUZZ_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|var| std::env::var(var).ok())
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("fuzz case count {v:?} is not a number"))
        })
        .unwrap_or(DEFAULT_CASES)
}

/// The configuration of every property.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        ..ProptestConfig::default()
    }
}

/// For properties whose cases carry 16 MiB payloads: a sixteenth of the cases, at least 4.
fn slow_config() -> ProptestConfig {
    ProptestConfig {
        cases: (cases() / 16).max(4),
        ..ProptestConfig::default()
    }
}
