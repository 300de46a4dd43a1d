//! Fuzzing the packets that end an exchange: OK with its session-state block (and the GTIDs
//! found in it, and the filtered rewrite the proxy sends clients), EOF, ERR.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::gtid::{tracked_gtids, TrackedGtid};
use strongsync_proto::ok::{self, EofPacket, ErrPacket, OkPacket, TrackingFilter};

use crate::alloc::bounded;
use crate::mutate::{input, neighbours};
use crate::{built, config, seeds};

/// True if `part` lies inside `whole` (a parser handed back a view of its input).
fn within(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    part.is_empty() || (p >= w && p + part.len() <= w + whole.len())
}

/// Every filter the proxy can apply (the variable names MySQL adds go with the MariaDB ones
/// they sit beside, which keeps the count at 256).
fn filters() -> impl Iterator<Item = TrackingFilter> {
    (0..256).map(|bits| TrackingFilter {
        client_tracks: bits & 1 != 0,
        keep_last_gtid: bits & 2 != 0,
        keep_gtids: bits & 4 != 0,
        keep_state_change: bits & 8 != 0,
        keep_state_change_var: bits & 16 != 0,
        keep_transaction_info_var: bits & 32 != 0,
        keep_transaction_state: bits & 64 != 0,
        keep_transaction_characteristics: bits & 128 != 0,
        keep_gtids_var: bits & 2 != 0,
        keep_list_var: bits & 16 == 0,
    })
}

/// An OK parses into views of itself; its items and variables end; and for every filter,
/// the rewrite is bounded, parses back with the same counters and info, needs no further
/// filtering, and is a fixed point.
fn check_ok(payload: &[u8], session_track: bool) -> Result<(), TestCaseError> {
    let n = payload.len();
    let Ok(ok) = bounded(n, || OkPacket::parse(payload, session_track)) else {
        return Ok(());
    };
    prop_assert!(matches!(ok.header, ok::OK_HEADER | ok::EOF_HEADER));
    prop_assert_eq!(payload[0], ok.header);
    prop_assert!(within(ok.info, payload) && within(ok.session_state, payload));
    if !session_track {
        prop_assert!(ok.session_state.is_empty());
    }
    let (items, gtids) = bounded(n, || {
        let mut items = 0;
        for item in ok.state_items() {
            items += 1;
            if let Ok(item) = item {
                for var in item.variables().flatten() {
                    assert!(within(var.0, payload) && within(var.1, payload));
                }
            }
        }
        (items, tracked_gtids(&ok).count())
    });
    prop_assert!(items <= ok.session_state.len());
    prop_assert!(gtids <= ok.session_state.len());
    for g in tracked_gtids(&ok) {
        let (TrackedGtid::LastGtid(v) | TrackedGtid::OwnGtids(v)) = g;
        prop_assert!(within(v, payload));
    }
    for info in [ok.transaction_state(), ok.transaction_characteristics()]
        .into_iter()
        .flatten()
    {
        prop_assert!(within(info, payload));
    }
    for filter in filters() {
        let needs = ok.needs_filtering(filter);
        let out = bounded(n, || {
            let mut out = Vec::new();
            ok.write_filtered(filter, &mut out);
            out
        });
        prop_assert!(
            out.len() <= n + 9,
            "rewrite grew from {} to {}",
            n,
            out.len()
        );
        let again = OkPacket::parse(&out, filter.client_tracks)?;
        prop_assert_eq!(
            (
                again.header,
                again.affected_rows,
                again.last_insert_id,
                again.warnings,
                again.info
            ),
            (
                ok.header,
                ok.affected_rows,
                ok.last_insert_id,
                ok.warnings,
                ok.info
            )
        );
        prop_assert_eq!(
            again
                .status
                .difference(StatusFlags::SERVER_SESSION_STATE_CHANGED),
            ok.status
                .difference(StatusFlags::SERVER_SESSION_STATE_CHANGED)
        );
        prop_assert!(
            !again.needs_filtering(filter),
            "filtered OK still needs filtering"
        );
        prop_assert_eq!(
            again
                .status
                .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED),
            !again.session_state.is_empty(),
            "the state-changed flag must announce exactly a non-empty state block"
        );
        let mut twice = Vec::new();
        again.write_filtered(filter, &mut twice);
        prop_assert_eq!(&twice, &out, "filtering is not idempotent");
        if !filter.client_tracks {
            prop_assert!(again.session_state.is_empty());
        }
        if !needs {
            // The proxy forwards such an OK untouched: it must already be what the rewrite
            // would have made of it.
            let kept: Vec<_> = ok.state_items().map_while(Result::ok).collect();
            let rewritten: Vec<_> = again.state_items().map_while(Result::ok).collect();
            prop_assert_eq!(rewritten, kept);
        }
    }
    Ok(())
}

/// EOF and ERR packets: accepted exactly when they have their shape, fields are their bytes.
fn check_eof_err(payload: &[u8]) -> Result<(), TestCaseError> {
    let n = payload.len();
    let eof = bounded(n, || EofPacket::parse(payload));
    prop_assert_eq!(eof.is_ok(), ok::is_eof(payload) && n >= 5);
    if let Ok(eof) = eof {
        prop_assert_eq!(eof.warnings.to_le_bytes(), [payload[1], payload[2]]);
        prop_assert_eq!(eof.status.bits().to_le_bytes(), [payload[3], payload[4]]);
    }
    let err = bounded(n, || ErrPacket::parse(payload));
    prop_assert_eq!(
        err.is_ok(),
        payload.first() == Some(&ok::ERR_HEADER) && n >= 3
    );
    if let Ok(err) = &err {
        prop_assert_eq!(err.code.to_le_bytes(), [payload[1], payload[2]]);
        prop_assert!(payload.ends_with(err.message));
        match err.sql_state {
            Some(state) => {
                prop_assert_eq!(payload[3], b'#');
                prop_assert_eq!(state, &payload[4..9]);
                prop_assert_eq!(err.message, &payload[9..]);
            }
            None => prop_assert_eq!(err.message, &payload[3..]),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ok_packets_parse_filter_and_parse_back(
        payload in input(seeds::server_payloads()),
        session_track: bool,
    ) {
        check_ok(&payload, session_track)?;
    }

    #[test]
    fn eof_and_err_packets_are_recognised_by_shape(payload in input(seeds::server_payloads())) {
        check_eof_err(&payload)?;
    }

    #[test]
    fn err_packets_round_trip(code: u16, state: Option<[u8; 5]>, message in ".{0,40}") {
        let mut payload = Vec::new();
        ok::put_err(&mut payload, code, state.as_ref(), &message);
        let err = ErrPacket::parse(&payload)?;
        prop_assert_eq!(err.code, code);
        if state.is_some() || !message.starts_with('#') {
            prop_assert_eq!(err.sql_state, state.as_ref().map(|s| &s[..]));
            prop_assert_eq!(err.message, message.as_bytes());
        }
    }
}

#[test]
fn every_truncation_and_bit_flip_of_the_ok_seeds() {
    for seed in built::oks() {
        let valid = OkPacket::parse(&seed, true).or_else(|_| OkPacket::parse(&seed, false));
        assert!(valid.is_ok(), "seed {seed:02x?}");
    }
    for seed in seeds::server_payloads() {
        for payload in neighbours(&seed) {
            for track in [false, true] {
                if let Err(e) = check_ok(&payload, track) {
                    panic!("{e}\nOK (tracking {track}) {payload:02x?}");
                }
            }
            if let Err(e) = check_eof_err(&payload) {
                panic!("{e}\nEOF/ERR {payload:02x?}");
            }
        }
    }
}
