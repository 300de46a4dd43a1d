//! Event tracking on events captured from MariaDB 10.11.19 (verified-mariadb-10.11.md §4) and on
//! events built here with valid checksums.

use bytes::BufMut;

use super::*;
use crate::testing::hex;

/// The fake ROTATE that starts a dump (log_pos 0, ARTIFICIAL), with its CRC32.
const FAKE_ROTATE: &str = "00 00 00 00 04 01 00 00 00 2f 00 00 00 00 00 00 00 20 00 04 00 00 00 00 00 00 00 6d 79 73 71 6c 2d 62 69 6e 2e 30 30 30 30 30 31 1f 0e ac 68";
/// GTID 0-1-1, flags2 0x29 (STANDALONE, ALLOW_PARALLEL, DDL).
const GTID_DDL: &str = "24 cd 0c 6b a2 01 00 00 00 2a 00 00 00 72 01 00 00 08 00 01 00 00 00 00 00 00 00 00 00 00 00 29 00 00 00 00 00 00 4d fb d8 51";
/// An XID event ending at 1935 (the one the primary flagged for ACK).
const XID: &str =
    "51 cd 0c 6b 10 01 00 00 00 1f 00 00 00 8f 07 00 00 00 00 7d 00 00 00 00 00 00 00 87 70 76 52";
/// An idle heartbeat: log_pos 1485 in mysql-bin.000002.
const HEARTBEAT: &str = "00 00 00 00 1b 01 00 00 00 27 00 00 00 cd 05 00 00 00 00 6d 79 73 71 6c 2d 62 69 6e 2e 30 30 30 30 30 32 e6 bd 0f da";

/// An event of `kind` with `body`, ending at `log_pos`, with a valid CRC32.
fn event(kind: u8, server_id: u32, log_pos: u32, body: &[u8]) -> Vec<u8> {
    let size = EVENT_HEADER_LEN + body.len() + CHECKSUM_LEN;
    let mut e = Vec::new();
    e.put_u32_le(1_700_000_000);
    e.put_u8(kind);
    e.put_u32_le(server_id);
    e.put_u32_le(size as u32);
    e.put_u32_le(log_pos);
    e.put_u16_le(0);
    e.put_slice(body);
    let crc = crc32fast::hash(&e);
    e.put_u32_le(crc);
    e
}

fn gtid(seq_no: u64, domain: u32, flags2: u8, log_pos: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.put_u64_le(seq_no);
    body.put_u32_le(domain);
    body.put_u8(flags2);
    body.put_slice(&[0; 6]);
    event(GTID_EVENT, 1, log_pos, &body)
}

fn query(text: &str, log_pos: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.put_u32_le(7); // thread id
    body.put_u32_le(0); // exec time
    body.put_u8(1); // schema length
    body.put_u16_le(0); // error code
    body.put_u16_le(2); // status vars length
    body.put_slice(&[0x00, 0x00]); // status vars
    body.put_slice(b"t\0");
    body.put_slice(text.as_bytes());
    event(QUERY_EVENT, 1, log_pos, &body)
}

/// The same event without its CRC32 (as with `binlog_checksum=NONE`).
fn without_checksum(mut event: Vec<u8>) -> Vec<u8> {
    event.truncate(event.len() - CHECKSUM_LEN);
    let size = (event.len() as u32).to_le_bytes();
    event[9..13].copy_from_slice(&size);
    event
}

fn fde(checksum: bool) -> Vec<u8> {
    let mut body = vec![0x04, 0x00];
    body.extend_from_slice(&[b'1'; 50]);
    body.put_u32_le(0);
    body.put_u8(19);
    body.extend_from_slice(&[0u8; 10]); // post-header lengths
    body.put_u8(u8::from(checksum));
    event(FORMAT_DESCRIPTION_EVENT, 1, 256, &body)
}

fn rotate_to(name: &str, log_pos: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.put_u64_le(4);
    body.put_slice(name.as_bytes());
    event(ROTATE_EVENT, 1, log_pos, &body)
}

#[test]
fn captured_events_parse() {
    let mut t = StreamTracker::new();
    let seen = t.on_event(&hex(FAKE_ROTATE)).unwrap();
    assert_eq!(seen.header.flags, LOG_EVENT_ARTIFICIAL_F);
    assert_eq!(seen.end, None, "a fake ROTATE does not move the position");
    assert_eq!(
        t.file(),
        Some(&b"mysql-bin.000001"[..]),
        "CRC32 recognised before the FDE"
    );
    assert_eq!(
        t.position(),
        Some(Position {
            file_seq: 1,
            offset: 4
        })
    );

    let seen = t.on_event(&hex(GTID_DDL)).unwrap();
    assert_eq!(seen.header.kind, GTID_EVENT);
    assert_eq!(
        seen.end,
        Some(Position {
            file_seq: 1,
            offset: 0x172
        })
    );
    assert!(!seen.ends_transaction);

    let seen = t.on_event(&hex(XID)).unwrap();
    assert!(seen.ends_transaction);
    assert_eq!(
        seen.end,
        Some(Position {
            file_seq: 1,
            offset: 1935
        })
    );
    assert_eq!(seen.gtid, Some(Gtid::maria(0, 1, 1)));

    let seen = t.on_event(&hex(HEARTBEAT)).unwrap();
    assert_eq!((seen.end, seen.ends_transaction), (None, false));
    assert_eq!(
        t.position(),
        Some(Position {
            file_seq: 1,
            offset: 1935
        }),
        "heartbeats do not move it"
    );
}

#[test]
fn the_captured_heartbeat_is_rebuilt_byte_for_byte() {
    let mut built = Vec::new();
    put_heartbeat(&mut built, 1, b"mysql-bin.000002", 1485, true);
    assert_eq!(built, hex(HEARTBEAT));
}

#[test]
fn transactions_end_where_mariadbs_io_thread_says() {
    // (events, which of them end a transaction, and with which GTID seq_no)
    let mut t = StreamTracker::new();
    t.on_event(&rotate_to("mysql-bin.000007", 0)).unwrap();
    t.on_event(&fde(true)).unwrap();
    assert_eq!((t.checksum(), t.server_id()), (Some(true), Some(1)));
    let stream: Vec<(Vec<u8>, Option<u64>)> = vec![
        (gtid(10, 0, 0x0c, 300), None), // transactional DML
        (query("BEGIN", 350), None),
        (event(XID_EVENT, 1, 400, &7u64.to_le_bytes()), Some(10)),
        (gtid(11, 0, 0x29, 450), None), // DDL: standalone
        (query("CREATE TABLE x (id INT)", 500), Some(11)),
        (gtid(12, 0, 0x08, 550), None), // MyISAM: ends at QUERY COMMIT
        (query("INSERT INTO m VALUES (1)", 600), None), // statement format, not the end
        (query("COMMIT", 650), Some(12)),
        (gtid(13, 0, 0x4c, 700), None), // XA PREPARE group
        (query("XA END X'78',X'',1", 750), None),
        (event(XA_PREPARE_EVENT, 1, 800, &[0; 13]), Some(13)),
        (gtid(14, 0, 0x8d, 850), None), // XA COMMIT: standalone
        (query("XA COMMIT X'78',X'',1", 900), Some(14)),
    ];
    for (i, (e, ends)) in stream.iter().enumerate() {
        let seen = t.on_event(e).unwrap();
        assert_eq!(seen.ends_transaction, ends.is_some(), "event {i}");
        assert_eq!(seen.gtid.map(|g| g.seq_no), *ends, "event {i}");
        assert_eq!(
            seen.end.map(|p| (p.file_seq, p.offset)),
            Some((7, u64::from(seen.header.log_pos)))
        );
    }
}

#[test]
fn rotates_move_to_the_next_file_and_checksums_can_be_off() {
    let mut t = StreamTracker::new();
    t.on_event(&rotate_to("mysql-bin.000001", 0)).unwrap();
    let seen = t.on_event(&rotate_to("mysql-bin.000002", 1200)).unwrap();
    assert_eq!(
        seen.end,
        Some(Position {
            file_seq: 1,
            offset: 1200
        }),
        "the old file ends there"
    );
    assert_eq!(t.file(), Some(&b"mysql-bin.000002"[..]));
    assert_eq!(
        t.position(),
        Some(Position {
            file_seq: 2,
            offset: 4
        })
    );
    let seen = t.on_event(&gtid(1, 0, 0x0c, 300)).unwrap();
    assert_eq!(
        seen.end,
        Some(Position {
            file_seq: 2,
            offset: 300
        })
    );

    // Without checksums (no valid CRC32 on the FDE) names are read to the end of the event.
    let mut plain = StreamTracker::new();
    plain.on_event(&without_checksum(fde(false))).unwrap();
    assert_eq!(plain.checksum(), Some(false));
    plain
        .on_event(&without_checksum(rotate_to("mysql-bin.000003", 0)))
        .unwrap();
    assert_eq!(plain.file(), Some(&b"mysql-bin.000003"[..]));
}

#[test]
fn the_first_packet_of_a_large_event_is_enough() {
    let mut t = StreamTracker::new();
    t.on_event(&rotate_to("mysql-bin.000001", 0)).unwrap();
    t.on_event(&gtid(5, 0, 0x0c, 300)).unwrap();
    let mut rows = event(23, 1, 20_000_300, &[0u8; 64]);
    rows[9..13].copy_from_slice(&20_000_000u32.to_le_bytes()); // claims 20 MB, we have 64 bytes
    let seen = t.on_event(&rows).unwrap();
    assert!(!seen.ends_transaction);
    assert_eq!(
        seen.end,
        Some(Position {
            file_seq: 1,
            offset: 20_000_300
        })
    );
}

#[test]
fn broken_events_are_errors() {
    let mut t = StreamTracker::new();
    assert!(t.on_event(&[0u8; 10]).is_err());
    let mut small = hex(XID);
    small[9..13].copy_from_slice(&3u32.to_le_bytes());
    assert!(t.on_event(&small).is_err());
    let mut bad_name = rotate_to("mysql-bin", 0);
    assert!(t.on_event(&bad_name).is_err());
    bad_name.truncate(25);
    assert!(t.on_event(&bad_name).is_err());
}

proptest::proptest! {
    #[test]
    fn random_events_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), kind in proptest::sample::select(vec![2u8, 4, 15, 16, 27, 38, 162, 165])) {
        let mut e = bytes;
        if e.len() > 4 {
            e[4] = kind;
        }
        let mut t = StreamTracker::new();
        let _ = t.on_event(&e);
        let _ = t.on_event(&e);
    }
}

/// A MySQL GTID event as mysql_common writes one (plain, or tagged from 8.4), of
/// `transaction_length` (0: a server before 8.0.2, which wrote none), ending at `log_pos`.
fn mysql_gtid(gno: u64, tag: Option<&str>, transaction_length: u64, log_pos: u32) -> Vec<u8> {
    use mysql_common::binlog::events::GtidEvent;
    use mysql_common::packets::Tag;
    use mysql_common::proto::MySerialize;
    let sid = [7u8; 16];
    let event_gtid = match tag {
        Some(tag) => GtidEvent::new_tagged(sid, Tag::new(tag.to_string()).unwrap(), gno),
        None => GtidEvent::new(sid, gno),
    }
    .with_lc_typecode()
    .with_tx_length(transaction_length);
    let mut body = Vec::new();
    event_gtid.serialize(&mut body);
    let kind = if tag.is_some() {
        MYSQL_TAGGED_GTID_EVENT
    } else {
        MYSQL_GTID_EVENT
    };
    event(kind, 1, log_pos, &body)
}

fn mysql_source(tag: Option<&str>) -> crate::gtid::SourceId {
    crate::gtid::SourceId::intern([7u8; 16], tag).unwrap()
}

/// A MySQL stream whose GTID events carry no length (before 8.0.2) ends transactions by MySQL's
/// own boundary rule; with lengths, exactly where they say, whatever the last event is.
#[test]
fn mysql_transactions_end_by_their_length_or_else_by_the_boundary_rule() {
    let xid = |log_pos| event(XID_EVENT, 1, log_pos, &[0; 8]);
    let mut t = StreamTracker::new();
    t.on_event(&hex(FAKE_ROTATE)).unwrap();
    // Without lengths: BEGIN … XID; a DDL; XA START … XA_PREPARE, then XA COMMIT on its own.
    let g1 = mysql_gtid(1, None, 0, 1000);
    let steps: Vec<(Vec<u8>, bool)> = vec![
        (g1, false),
        (query("BEGIN", 1100), false),
        (xid(1200), true),
        (mysql_gtid(2, None, 0, 1300), false),
        (query("CREATE TABLE x (id INT)", 1400), true),
        (mysql_gtid(3, Some("batch"), 0, 1500), false),
        (query("XA START X'78',X'',1", 1600), false),
        (query("XA END X'78',X'',1", 1700), false),
        (event(XA_PREPARE_EVENT, 1, 1800, &[0; 20]), true),
        (mysql_gtid(4, None, 0, 1900), false),
        (query("XA COMMIT X'78',X'',1", 2000), true),
        (mysql_gtid(5, None, 0, 2100), false),
        (query("BEGIN", 2200), false),
        (query("COMMIT", 2300), true),
    ];
    let mut ended = Vec::new();
    for (i, (e, ends)) in steps.iter().enumerate() {
        let seen = t.on_event(e).unwrap();
        assert_eq!(seen.ends_transaction, *ends, "step {i}");
        if let Some(gtid) = seen.gtid {
            ended.push((gtid, seen.end.unwrap().offset));
        }
    }
    let plain = |n| Gtid::mysql(mysql_source(None), n);
    assert_eq!(
        ended,
        [
            (plain(1), 1200),
            (plain(2), 1400),
            (Gtid::mysql(mysql_source(Some("batch")), 3), 1800),
            (plain(4), 2000),
            (plain(5), 2300),
        ]
    );

    // With a length, the transaction ends where it says: a compressed one at its payload.
    // Its size with a length of the same encoded size as the one it will carry.
    let gtid_event = mysql_gtid(6, None, 1000, 0);
    let start = 3000u32;
    let gtid_end = start + gtid_event.len() as u32;
    let payload_end = gtid_end + 500;
    let with_length = mysql_gtid(6, None, u64::from(payload_end - start), gtid_end);
    assert_eq!(
        with_length.len(),
        gtid_event.len(),
        "the length fits the same field size"
    );
    let seen = t.on_event(&with_length).unwrap();
    assert!(!seen.ends_transaction);
    let payload = event(TRANSACTION_PAYLOAD_EVENT, 1, payload_end, &[0; 40]);
    let seen = t.on_event(&payload).unwrap();
    assert!(seen.ends_transaction);
    assert_eq!(seen.gtid, Some(plain(6)));
    // And a QUERY COMMIT inside a transaction whose length says it goes on does not end it.
    let long = mysql_gtid(7, None, 1000, 4000 + gtid_event.len() as u32);
    t.on_event(&long).unwrap();
    assert!(!t.on_event(&query("COMMIT", 4200)).unwrap().ends_transaction);
    assert!(t.on_event(&xid(4000 + 1000)).unwrap().ends_transaction);
}
