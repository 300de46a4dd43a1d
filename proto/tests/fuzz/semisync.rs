//! Fuzzing what a semisync replica sends the proxy: ACKs and the negotiation statements, and
//! the `00 EF flag` header the proxy puts in front of every event it sends one.

use bytes::BytesMut;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;
use strongsync_proto::packet::PacketDecoder;
use strongsync_proto::semisync::{self, Ack, Negotiation, MAX_ACK_FILE_NAME};

use crate::alloc::bounded;
use crate::mutate::{input, mutated, neighbours};
use crate::{built, config, seeds};

/// An ACK is accepted exactly when it has the documented shape, and then is its own encoding.
fn check_ack(payload: &[u8]) -> Result<(), TestCaseError> {
    let got = bounded(payload.len(), || Ack::parse(payload));
    let file = payload.get(9..).unwrap_or_default();
    let shaped = payload.first() == Some(&semisync::MAGIC)
        && (1..=MAX_ACK_FILE_NAME).contains(&file.len())
        && file.iter().all(u8::is_ascii_graphic);
    prop_assert_eq!(got.is_ok(), shaped, "{:02x?}", payload);
    if let Ok(ack) = got {
        let mut rebuilt = Vec::new();
        semisync::put_ack(&mut rebuilt, ack.position, ack.file);
        prop_assert_eq!(&rebuilt[..], payload);
    }
    Ok(())
}

const STATEMENTS: [&str; 6] = [
    "SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'",
    "SELECT @@global.rpl_semi_sync_master_enabled",
    "SELECT @@global.rpl_semi_sync_source_enabled",
    "SET @rpl_semi_sync_slave= 1",
    "SET @rpl_semi_sync_replica = 1;",
    "SET @rpl_semi_sync_slave= 0",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn acks_are_accepted_exactly_by_shape(payload in input(seeds::acks())) {
        check_ack(&payload)?;
    }

    /// Recognition ignores ASCII case and whitespace (within the length it looks at), and
    /// never panics on longer or odd text.
    #[test]
    fn negotiation_ignores_case_and_spacing(
        sql in input(STATEMENTS.iter().map(|s| s.as_bytes().to_vec()).collect()),
        spaces in proptest::collection::vec((any::<Index>(), select(b" \t\n\r".to_vec())), 0..6),
    ) {
        let got = bounded(sql.len(), || Negotiation::recognise(&sql));
        let mut spaced = sql.to_ascii_uppercase();
        for (at, ws) in spaces {
            spaced.insert(at.index(spaced.len() + 1), ws);
        }
        if spaced.len() <= 128 {
            prop_assert_eq!(Negotiation::recognise(&spaced), got);
        }
        if got.is_some() {
            prop_assert!(sql.len() <= 128);
        }
    }

    /// A replica reading what `put_event` wrote, however its reads are cut, sees
    /// `00 EF flag` and then the event.
    #[test]
    fn event_headers_frame_back(
        event in mutated(built::dump(true)),
        seq: u8,
        flag in select(vec![semisync::ACK_REQUESTED, semisync::NO_ACK]),
        cut in any::<Index>(),
    ) {
        let mut wire = BytesMut::new();
        let next = semisync::put_event(&mut wire, seq, flag, &event);
        prop_assert_eq!(next, seq.wrapping_add(1));
        let at = cut.index(wire.len() + 1);
        let mut d = PacketDecoder::new(1 << 20);
        let mut buf = BytesMut::from(&wire[..at]);
        let mut got = bounded(buf.len(), || d.decode(&mut buf))?;
        if got.is_none() {
            buf.extend_from_slice(&wire[at..]);
            got = bounded(buf.len(), || d.decode(&mut buf))?;
        }
        let p = got.expect("the whole packet is in");
        prop_assert_eq!(p.seq(), seq);
        prop_assert_eq!(&p.payload()[..3], &[0x00, semisync::MAGIC, flag]);
        prop_assert_eq!(&p.payload()[3..], &event[..]);
    }
}

#[test]
fn every_truncation_and_bit_flip_of_the_acks() {
    for seed in seeds::acks() {
        assert!(Ack::parse(&seed).is_ok(), "seed {seed:02x?}");
        for payload in neighbours(&seed) {
            if let Err(e) = check_ack(&payload) {
                panic!("{e}\nACK {payload:02x?}");
            }
        }
    }
    let captured = &seeds::acks()[0];
    let ack = Ack::parse(captured).expect("captured ACK");
    assert_eq!((ack.position, ack.file), (1935, &b"mysql-bin.000002"[..]));
}
