//! OK / EOF / ERR parsing and tracker filtering, on packets captured from MariaDB 10.11.19
//! (shared/research/verified-mariadb-10.11.md §1–§3).

use proptest::prelude::*;

use super::*;
use crate::gtid::{tracked_gtids, TrackedGtid};
use crate::testing::hex;

/// Autocommit INSERT: one `last_gtid` item, "0-1-11".
const INSERT_OK: &str =
    "00 01 01 02 40 00 00 00 13 00 11 09 6c 61 73 74 5f 67 74 69 64 06 30 2d 31 2d 31 31";
/// First OK of `INSERT; INSERT; SELECT 1`: MORE_RESULTS, `last_gtid` 0-1-1006, and a pending
/// SCHEMA item ''.
const MULTI_OK: &str = "00 01 0a 0a 40 00 00 00 18 00 13 09 6c 61 73 74 5f 67 74 69 64 08 30 2d 31 2d 31 30 30 36 01 01 00";
/// `USE t` carrying a late `last_gtid` and the schema change.
const USE_OK: &str = "00 00 00 02 40 00 00 00 19 00 13 09 6c 61 73 74 5f 67 74 69 64 08 30 2d 31 2d 31 30 33 33 01 02 01 74";
/// OK-FE ending `INSERT … RETURNING` under DEPRECATE_EOF.
const OKFE: &str =
    "fe 00 00 02 40 00 00 00 15 00 13 09 6c 61 73 74 5f 67 74 69 64 08 30 2d 31 2d 31 30 31 30";
/// XA PREPARE: IN_TRANS still set.
const XA_PREPARE_OK: &str =
    "00 00 00 03 40 00 00 00 15 00 13 09 6c 61 73 74 5f 67 74 69 64 08 30 2d 31 2d 31 30 31 37";
const PLAIN_OK: &str = "00 00 00 02 00 00 00";

/// Under `session_track_transaction_info = CHARACTERISTICS` (MariaDB 10.11.19): `START
/// TRANSACTION WITH CONSISTENT SNAPSHOT`, an INSERT in it, and its COMMIT (with `last_gtid`).
const SNAPSHOT_OK: &str = "00 00 00 03 40 00 00 00 39 05 09 08 54 5f 52 5f 5f 5f 5f 5f 04 2c 2b \
     53 54 41 52 54 20 54 52 41 4e 53 41 43 54 49 4f 4e 20 57 49 54 48 20 43 4f 4e 53 49 53 54 \
     45 4e 54 20 53 4e 41 50 53 48 4f 54 3b";
const WRITE_IN_TRANSACTION_OK: &str = "00 01 00 03 40 00 00 00 0b 05 09 08 54 5f 52 5f 57 5f 5f 5f";
const COMMIT_TRACKED_OK: &str = "00 00 00 02 40 00 00 00 21 00 11 09 6c 61 73 74 5f 67 74 69 64 \
     06 30 2d 31 2d 32 38 05 09 08 5f 5f 5f 5f 5f 5f 5f 5f 04 01 00";

const NOT_WANTED: TrackingFilter = TrackingFilter {
    client_tracks: true,
    keep_last_gtid: false,
    keep_gtids: false,
    keep_state_change: false,
    keep_state_change_var: false,
    keep_transaction_info_var: false,
    keep_gtids_var: false,
    keep_list_var: false,
    keep_transaction_state: false,
    keep_transaction_characteristics: false,
};
const WANTED: TrackingFilter = TrackingFilter {
    client_tracks: true,
    keep_last_gtid: true,
    keep_gtids: true,
    keep_state_change: true,
    keep_state_change_var: true,
    keep_transaction_info_var: true,
    keep_gtids_var: true,
    keep_list_var: true,
    keep_transaction_state: true,
    keep_transaction_characteristics: true,
};
const UNTRACKED: TrackingFilter = TrackingFilter {
    client_tracks: false,
    keep_last_gtid: false,
    keep_gtids: false,
    keep_state_change: false,
    keep_state_change_var: false,
    keep_transaction_info_var: false,
    keep_gtids_var: false,
    keep_list_var: false,
    keep_transaction_state: false,
    keep_transaction_characteristics: false,
};

fn filtered(payload: &[u8], filter: TrackingFilter) -> Vec<u8> {
    let ok = OkPacket::parse(payload, true).unwrap();
    if !ok.needs_filtering(filter) {
        return payload.to_vec();
    }
    let mut out = Vec::new();
    ok.write_filtered(filter, &mut out);
    out
}

fn gtids(payload: &[u8]) -> Vec<String> {
    let ok = OkPacket::parse(payload, true).unwrap();
    tracked_gtids(&ok)
        .map(|t| match t {
            TrackedGtid::LastGtid(v) | TrackedGtid::OwnGtids(v) => {
                String::from_utf8_lossy(v).into_owned()
            }
        })
        .collect()
}

/// MariaDB 10.11.19, session tracking `last_gtid,session_track_state_change` with
/// `session_track_state_change=ON`: a `SET`, a procedure that turned both trackers off then
/// committed (the block comes out empty), and one that left `autocommit` as the only tracked
/// variable before committing.
const STATE_CHANGE_OK: &str = "00 00 00 02 40 00 00 00 03 02 01 31";
const EMPTY_BLOCK_OK: &str = "00 01 00 02 40 00 00 00 00";
const AUTOCOMMIT_OK: &str =
    "00 01 00 02 40 00 00 00 10 00 0e 0a 61 75 74 6f 63 6f 6d 6d 69 74 02 4f 4e";

#[test]
fn only_a_pure_last_gtid_report_says_nothing_else_changed() {
    let table = [
        (INSERT_OK, true),
        (OKFE, true),
        (XA_PREPARE_OK, true),
        (SNAPSHOT_OK, true),
        (WRITE_IN_TRANSACTION_OK, true),
        (COMMIT_TRACKED_OK, true),
        (MULTI_OK, false),
        (USE_OK, false),
        (STATE_CHANGE_OK, false),
        (EMPTY_BLOCK_OK, false),
        (AUTOCOMMIT_OK, false),
        (PLAIN_OK, false),
    ];
    for (packet, pure) in table {
        let payload = hex(packet);
        let ok = OkPacket::parse(&payload, true).unwrap();
        assert_eq!(ok.reports_only_routine_state(), pure, "{packet}");
    }
}

#[test]
fn transaction_info_is_read_and_dropped_unless_the_client_tracks_it() {
    let snapshot = hex(SNAPSHOT_OK);
    let ok = OkPacket::parse(&snapshot, true).unwrap();
    assert_eq!(ok.transaction_state(), Some(&b"T_R_____"[..]));
    assert_eq!(
        ok.transaction_characteristics(),
        Some(&b"START TRANSACTION WITH CONSISTENT SNAPSHOT;"[..])
    );
    let commit = hex(COMMIT_TRACKED_OK);
    let ok = OkPacket::parse(&commit, true).unwrap();
    assert_eq!(ok.transaction_state(), Some(&b"________"[..]));
    assert_eq!(ok.transaction_characteristics(), Some(&b""[..]));
    assert_eq!(gtids(&commit), ["0-1-28"]);
    assert_eq!(
        OkPacket::parse(&hex(INSERT_OK), true)
            .unwrap()
            .transaction_state(),
        None
    );

    // Status IN_TRANS | AUTOCOMMIT, without SESSION_STATE_CHANGED.
    assert_eq!(filtered(&snapshot, NOT_WANTED), hex("00 00 00 03 00 00 00"));
    assert_eq!(filtered(&snapshot, WANTED), snapshot);
    let state_only = TrackingFilter {
        keep_transaction_characteristics: false,
        ..WANTED
    };
    assert_eq!(
        filtered(&snapshot, state_only),
        hex("00 00 00 03 40 00 00 00 0b 05 09 08 54 5f 52 5f 5f 5f 5f 5f")
    );
}

#[test]
fn state_change_items_and_the_proxys_variable_are_dropped_unless_the_client_tracks_them() {
    let state_change = hex(STATE_CHANGE_OK);
    assert_eq!(filtered(&state_change, NOT_WANTED), hex(PLAIN_OK));
    assert_eq!(filtered(&state_change, WANTED), state_change);
    // `session_track_state_change=OFF` reported as a system variable.
    let mut item = Vec::new();
    crate::wire::put_lenenc_str(&mut item, b"session_track_state_change");
    crate::wire::put_lenenc_str(&mut item, b"OFF");
    let mut block = vec![SESSION_TRACK_SYSTEM_VARIABLES];
    crate::wire::put_lenenc_str(&mut block, &item);
    // Header, affected rows, insert id, status 0x4002, warnings, empty info, the block.
    let mut ok = vec![0x00, 0x00, 0x00, 0x02, 0x40, 0x00, 0x00, 0x00];
    crate::wire::put_lenenc_str(&mut ok, &block);
    assert_eq!(filtered(&ok, NOT_WANTED), hex(PLAIN_OK));
    assert_eq!(filtered(&ok, WANTED), ok);
}

#[test]
fn captured_oks_report_their_gtid() {
    let table = [
        (INSERT_OK, vec!["0-1-11"]),
        (MULTI_OK, vec!["0-1-1006"]),
        (USE_OK, vec!["0-1-1033"]),
        (OKFE, vec!["0-1-1010"]),
        (XA_PREPARE_OK, vec!["0-1-1017"]),
        (PLAIN_OK, vec![]),
    ];
    for (bytes, want) in table {
        assert_eq!(gtids(&hex(bytes)), want, "{bytes}");
    }
    let multi_bytes = hex(MULTI_OK);
    let multi = OkPacket::parse(&multi_bytes, true).unwrap();
    assert!(multi
        .status
        .contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS));
    assert_eq!((multi.affected_rows, multi.last_insert_id), (1, 10));
    let items: Vec<_> = multi.state_items().map(Result::unwrap).collect();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[1],
        StateItem {
            kind: SESSION_TRACK_SCHEMA,
            data: b"\x00"
        }
    );
}

#[test]
fn tracker_data_the_client_did_not_ask_for_is_removed() {
    // (captured OK, filter, what the client must receive)
    let table = [
        (INSERT_OK, NOT_WANTED, "00 01 01 02 00 00 00"),
        (INSERT_OK, UNTRACKED, "00 01 01 02 00 00 00"),
        (INSERT_OK, WANTED, INSERT_OK),
        (MULTI_OK, NOT_WANTED, "00 01 0a 0a 40 00 00 00 03 01 01 00"),
        (MULTI_OK, UNTRACKED, "00 01 0a 0a 00 00 00"),
        (USE_OK, UNTRACKED, "00 00 00 02 00 00 00"),
        (USE_OK, NOT_WANTED, "00 00 00 02 40 00 00 00 04 01 02 01 74"),
        (OKFE, NOT_WANTED, "fe 00 00 02 00 00 00"),
        (XA_PREPARE_OK, NOT_WANTED, "00 00 00 03 00 00 00"),
        (PLAIN_OK, NOT_WANTED, PLAIN_OK),
        (PLAIN_OK, UNTRACKED, PLAIN_OK),
    ];
    for (bytes, filter, want) in table {
        assert_eq!(
            filtered(&hex(bytes), filter),
            hex(want),
            "{bytes} with {filter:?}"
        );
    }
}

/// UPDATE on MariaDB 10.11.19 for a client WITHOUT CLIENT_SESSION_TRACK: the info is still
/// length-encoded (0x28 bytes), not the string<EOF> the protocol docs describe.
const UNTRACKED_UPDATE_OK: &str = "00 02 00 22 00 00 00 28 52 6f 77 73 20 6d 61 74 63 68 65 64 3a 20 32 20 20 43 68 61 6e 67 65 64 3a 20 32 20 20 57 61 72 6e 69 6e 67 73 3a 20 30";

#[test]
fn info_is_length_encoded_with_and_without_tracking() {
    let payload = hex(UNTRACKED_UPDATE_OK);
    let info = b"Rows matched: 2  Changed: 2  Warnings: 0";
    for track in [false, true] {
        let ok = OkPacket::parse(&payload, track).unwrap();
        assert_eq!(ok.info, info, "session_track={track}");
        assert_eq!((ok.affected_rows, ok.session_state), (2, &[][..]));
    }
    // What a tracking primary sends for the same statement is what a client without tracking
    // must get: nothing to rewrite.
    let ok = OkPacket::parse(&payload, true).unwrap();
    assert!(!ok.needs_filtering(UNTRACKED) && !ok.needs_filtering(NOT_WANTED));
    // The documented string<EOF> form is still read.
    let mut eof_info = hex("00 01 00 02 00 00 00");
    eof_info.extend_from_slice(info);
    assert_eq!(OkPacket::parse(&eof_info, false).unwrap().info, info);
}

#[test]
fn several_variables_in_one_item_keep_the_others() {
    // One item holding autocommit=ON and last_gtid (the format allows it; servers send one each).
    let mut data = Vec::new();
    crate::wire::put_lenenc_str(&mut data, b"autocommit");
    crate::wire::put_lenenc_str(&mut data, b"ON");
    crate::wire::put_lenenc_str(&mut data, b"last_gtid");
    crate::wire::put_lenenc_str(&mut data, b"0-1-5");
    let mut state = vec![SESSION_TRACK_SYSTEM_VARIABLES];
    crate::wire::put_lenenc_str(&mut state, &data);
    let mut payload = hex("00 00 00 02 40 00 00 00");
    crate::wire::put_lenenc_str(&mut payload, &state);
    assert_eq!(gtids(&payload), ["0-1-5"]);
    let out = filtered(&payload, NOT_WANTED);
    assert_eq!(
        out,
        hex("00 00 00 02 40 00 00 00 10 00 0e 0a 61 75 74 6f 63 6f 6d 6d 69 74 02 4f 4e")
    );
}

#[test]
fn mysql_own_gtid_items_are_reported_and_stripped() {
    let text = b"3e11fa47-71ca-11e1-9e33-c80aa9429562:23";
    let mut item = vec![SESSION_TRACK_GTIDS];
    let mut data = vec![0u8];
    crate::wire::put_lenenc_str(&mut data, text);
    crate::wire::put_lenenc_str(&mut item, &data);
    // type, entity length = encoding byte + lenenc length + 39 characters, encoding, length
    assert_eq!(
        &item[..4],
        &[0x03, 0x29, 0x00, 0x27],
        "layout of protocol.md §2.1"
    );
    let mut payload = hex("00 01 00 02 40 00 00 00");
    crate::wire::put_lenenc_str(&mut payload, &item);
    assert_eq!(gtids(&payload), [String::from_utf8_lossy(text)]);
    assert_eq!(filtered(&payload, NOT_WANTED), hex("00 01 00 02 00 00 00"));
    assert_eq!(filtered(&payload, WANTED), payload);
}

#[test]
fn eof_and_err_packets() {
    let eof = EofPacket::parse(&hex("fe 00 00 02 40")).unwrap();
    assert_eq!(eof.status.bits(), 0x4002);
    assert!(is_eof(&hex("fe 00 00 02 40")));
    assert!(!is_eof(&hex(OKFE)));
    let err = hex("ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 74 2e 6e 27 20 64 6f 65 73 6e 27 74 20 65 78 69 73 74");
    let parsed = ErrPacket::parse(&err).unwrap();
    assert_eq!(parsed.code, 1146);
    assert_eq!(parsed.sql_state, Some(&b"42S02"[..]));
    assert_eq!(parsed.message, b"Table 't.n' doesn't exist");
    let mut built = Vec::new();
    put_err(
        &mut built,
        1146,
        Some(b"42S02"),
        "Table 't.n' doesn't exist",
    );
    assert_eq!(built, err);
}

/// A generated state item: type, variables (for type 0), raw data (for the others).
type Item = (u8, Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>);

fn arb_item() -> impl Strategy<Value = Item> {
    let name = prop_oneof![
        Just(b"last_gtid".to_vec()),
        Just(b"autocommit".to_vec()),
        Just(b"session_track_state_change".to_vec()),
        Just(b"session_track_transaction_info".to_vec()),
        Just(b"session_track_gtids".to_vec()),
        Just(b"SESSION_TRACK_SYSTEM_VARIABLES".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12)
    ];
    (
        0u8..7,
        proptest::collection::vec((name, proptest::collection::vec(any::<u8>(), 0..12)), 1..3),
        proptest::collection::vec(any::<u8>(), 0..20),
    )
}

fn encode(status: u16, info: &[u8], items: &[Item]) -> Vec<u8> {
    let mut state = Vec::new();
    for (kind, vars, raw) in items {
        state.push(*kind);
        let mut data = Vec::new();
        if *kind == SESSION_TRACK_SYSTEM_VARIABLES {
            for (n, v) in vars {
                crate::wire::put_lenenc_str(&mut data, n);
                crate::wire::put_lenenc_str(&mut data, v);
            }
        } else {
            data.extend_from_slice(raw);
        }
        crate::wire::put_lenenc_str(&mut state, &data);
    }
    let mut out = vec![0x00, 0x01, 0x00];
    let status = if state.is_empty() {
        status & !0x4000
    } else {
        status | 0x4000
    };
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    if !state.is_empty() || !info.is_empty() {
        crate::wire::put_lenenc_str(&mut out, info);
    }
    if !state.is_empty() {
        crate::wire::put_lenenc_str(&mut out, &state);
    }
    out
}

proptest! {
    #[test]
    fn filtering_equals_encoding_only_the_kept_items(
        status in any::<u16>(),
        info in proptest::collection::vec(any::<u8>(), 0..10),
        items in proptest::collection::vec(arb_item(), 0..4),
        keep_last_gtid: bool,
        keep_gtids: bool,
        keep_state_change: bool,
        keep_state_change_var: bool,
        keep_transaction_info_var: bool,
        keep_gtids_var: bool,
        keep_list_var: bool,
        keep_transaction_state: bool,
        keep_transaction_characteristics: bool,
    ) {
        let filter = TrackingFilter {
            client_tracks: true,
            keep_last_gtid,
            keep_gtids,
            keep_state_change,
            keep_state_change_var,
            keep_transaction_info_var,
            keep_gtids_var,
            keep_list_var,
            keep_transaction_state,
            keep_transaction_characteristics,
        };
        let payload = encode(status, &info, &items);
        let kept: Vec<_> = items
            .iter()
            .filter_map(|(kind, vars, raw)| {
                if *kind == SESSION_TRACK_GTIDS && !keep_gtids {
                    return None;
                }
                if *kind == SESSION_TRACK_STATE_CHANGE && !keep_state_change {
                    return None;
                }
                if *kind == SESSION_TRACK_TRANSACTION_STATE && !keep_transaction_state {
                    return None;
                }
                if *kind == SESSION_TRACK_TRANSACTION_CHARACTERISTICS && !keep_transaction_characteristics {
                    return None;
                }
                let dropped = |n: &[u8]| {
                    (!keep_last_gtid && n.eq_ignore_ascii_case(b"last_gtid"))
                        || (!keep_state_change_var && n.eq_ignore_ascii_case(b"session_track_state_change"))
                        || (!keep_transaction_info_var && n.eq_ignore_ascii_case(b"session_track_transaction_info"))
                        || (!keep_gtids_var && n.eq_ignore_ascii_case(b"session_track_gtids"))
                        || (!keep_list_var && n.eq_ignore_ascii_case(b"session_track_system_variables"))
                };
                let vars: Vec<_> = vars
                    .iter()
                    .filter(|(n, _)| *kind != SESSION_TRACK_SYSTEM_VARIABLES || !dropped(n))
                    .cloned()
                    .collect();
                (*kind != SESSION_TRACK_SYSTEM_VARIABLES || !vars.is_empty()).then(|| (*kind, vars, raw.clone()))
            })
            .collect();
        prop_assert_eq!(filtered(&payload, filter), encode(status, &info, &kept));
        // A client without tracking gets the same packet with no state at all.
        prop_assert_eq!(filtered(&payload, UNTRACKED), encode(status, &info, &[]));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80), track: bool) {
        if let Ok(ok) = OkPacket::parse(&bytes, track) {
            let _ = tracked_gtids(&ok).count();
            for filter in [NOT_WANTED, WANTED, UNTRACKED] {
                if ok.needs_filtering(filter) {
                    ok.write_filtered(filter, &mut Vec::new());
                }
            }
        }
        let _ = EofPacket::parse(&bytes);
        let _ = ErrPacket::parse(&bytes);
    }
}
