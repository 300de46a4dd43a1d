use mysql_common::packets::{ComBinlogDumpGtid, GnoInterval, Sid, Tag};
use mysql_common::proto::MySerialize;
use proptest::prelude::*;

use super::*;

const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
const B: &str = "0a8c5e2f-0000-11ef-8000-0242ac120002";

fn uuid(text: &str) -> [u8; 16] {
    crate::gtid::Source::parse_uuid(text).unwrap()
}

/// The request as mysql_common writes it (as a MySQL replica would).
fn request(sids: Vec<Sid<'static>>) -> Vec<u8> {
    let mut payload = Vec::new();
    ComBinlogDumpGtid::new(7)
        .with_filename(&b""[..])
        .with_pos(4)
        .with_sids(sids)
        .serialize(&mut payload);
    payload
}

fn sid(uuid_text: &str, tag: Option<&str>, intervals: &[(u64, u64)]) -> Sid<'static> {
    let mut sid = Sid::new(uuid(uuid_text)).with_intervals(
        intervals
            .iter()
            .map(|&(start, end)| GnoInterval::new(start, end + 1))
            .collect(),
    );
    if let Some(tag) = tag {
        sid = sid.with_tag(Tag::new(tag.to_string()).unwrap());
    }
    sid
}

#[test]
fn reads_what_a_replica_holds_source_by_source() {
    // Known from the primary's own events (another test may have filled a peer's share).
    for (u, tag) in [(A, None), (B, None), (A, Some("batch"))] {
        SourceId::intern(uuid(u), tag).unwrap();
    }
    let cases: Vec<(Vec<Sid<'static>>, String)> = vec![
        (vec![], String::new()),
        (vec![sid(A, None, &[(1, 100)])], format!("{A}:1-100")),
        (
            vec![sid(A, None, &[(1, 5), (7, 9)]), sid(B, None, &[(1, 3)])],
            format!("{B}:1-3,{A}:1-5:7-9"),
        ),
        (
            vec![sid(A, None, &[(1, 5)]), sid(A, Some("batch"), &[(1, 2)])],
            format!("{A}:1-5,{A}:batch:1-2"),
        ),
    ];
    for (sids, want) in cases {
        let dump = DumpGtid::parse(&request(sids)).unwrap();
        assert_eq!(dump.server_id, 7);
        assert_eq!(dump.has.to_string(), want);
    }
}

#[test]
fn counts_the_bytes_cannot_carry_are_refused_before_anything_is_reserved() {
    let mut payload = request(vec![sid(A, None, &[(1, 5)])]);
    let data_at = payload.len() - (8 + 16 + 8 + 16);
    // Sources: 2^40 claimed in 48 bytes.
    let mut many = payload.clone();
    many[data_at..data_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(DumpGtid::parse(&many).is_err());
    // Intervals: 2^40 claimed.
    let intervals_at = data_at + 8 + 16;
    payload[intervals_at..intervals_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(DumpGtid::parse(&payload).is_err());
}

/// A request of more intervals than a peer is credited with: the first ones count, the rest
/// are left out (held less, never more).
#[test]
fn a_peer_is_credited_with_a_bounded_number_of_intervals() {
    SourceId::intern(uuid(A), None).unwrap();
    let many: Vec<(u64, u64)> = (1..=MAX_PEER_INTERVALS as u64 + 10)
        .map(|n| (n * 2, n * 2))
        .collect();
    let dump = DumpGtid::parse(&request(vec![sid(A, None, &many)])).unwrap();
    let credited: Vec<_> = dump.has.intervals().collect();
    assert_eq!(credited.len(), MAX_PEER_INTERVALS);
    let last = 2 * MAX_PEER_INTERVALS as u64;
    assert_eq!(credited.last().map(|&(_, _, end)| end), Some(last));
}

#[test]
fn malformed_requests_are_errors() {
    let good = request(vec![sid(A, None, &[(1, 5)])]);
    for cut in 0..good.len() {
        assert!(DumpGtid::parse(&good[..cut]).is_err(), "cut at {cut}");
    }
    let mut extra = good.clone();
    extra.push(0);
    assert!(
        DumpGtid::parse(&extra).is_ok(),
        "bytes after the set are not the set's"
    );
    let mut empty_interval = good.clone();
    let end_at = good.len() - 8;
    empty_interval[end_at..].copy_from_slice(&1u64.to_le_bytes());
    assert!(
        DumpGtid::parse(&empty_interval).is_err(),
        "start 1, end 1 holds nothing"
    );
    let mut wrong_command = good;
    wrong_command[0] = crate::command::COM_BINLOG_DUMP;
    assert!(DumpGtid::parse(&wrong_command).is_err());
}

fn arb_sid() -> impl Strategy<Value = Sid<'static>> {
    (
        any::<[u8; 16]>(),
        proptest::option::of("[a-z_][a-z0-9_]{0,31}"),
        prop::collection::vec((1u64..1000, 0u64..50), 1..4),
    )
        .prop_map(|(uuid, tag, intervals)| {
            let mut sid = Sid::new(uuid).with_intervals(
                intervals
                    .into_iter()
                    .map(|(start, len)| GnoInterval::new(start, start + len + 1))
                    .collect(),
            );
            if let Some(tag) = tag {
                sid = sid.with_tag(Tag::new(tag).unwrap());
            }
            sid
        })
}

proptest! {
    /// Whatever set a replica sends, plain or tagged, it reads as the set mysql_common wrote.
    #[test]
    fn agrees_with_mysql_common(sids in prop::collection::vec(arb_sid(), 0..4)) {
        let mut want = GtidPosition::default();
        for sid in &sids {
            let source = SourceId::intern(sid.uuid(), sid.tag().map(|t| t.as_str())).unwrap();
            for interval in sid.intervals() {
                want.add_interval(source, interval.start(), interval.end() - 1);
            }
        }
        let dump = DumpGtid::parse(&request(sids)).unwrap();
        prop_assert_eq!(dump.has, want);
    }

    /// Bytes from a hostile peer are an error or a set, never a panic.
    #[test]
    fn garbage_never_panics(tail in prop::collection::vec(any::<u8>(), 0..80)) {
        let mut payload = vec![crate::command::COM_BINLOG_DUMP_GTID, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
        payload.extend_from_slice(&4u64.to_le_bytes());
        payload.extend_from_slice(&(tail.len() as u32).to_le_bytes());
        payload.extend_from_slice(&tail);
        let _ = DumpGtid::parse(&payload);
    }
}
