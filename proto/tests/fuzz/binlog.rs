//! Fuzzing the dump stream: event headers, the `StreamTracker` over whole captured and built
//! histories with events mutated, dropped, repeated or cut to their first packet, and the text
//! the tracker and the session read positions and GTIDs from (file names, `domain-server-seq`).

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;
use strongsync_proto::binlog::{self, EventHeader, StreamTracker, EVENT_HEADER_LEN};
use strongsync_proto::gtid::{Domain, Gtid};
use strongsync_proto::position::{file_seq, Position};

use crate::alloc::bounded;
use crate::mutate::{apply, input, mutated, mutations, neighbours, Mutation};
use crate::{built, config, seeds};

/// The header's fields, read here independently of the crate.
fn header_fields(event: &[u8]) -> Option<EventHeader> {
    let u32_at =
        |at: usize| u32::from_le_bytes([event[at], event[at + 1], event[at + 2], event[at + 3]]);
    (event.len() >= EVENT_HEADER_LEN && u32_at(9) as usize >= EVENT_HEADER_LEN).then(|| {
        EventHeader {
            timestamp: u32_at(0),
            kind: event[4],
            server_id: u32_at(5),
            event_size: u32_at(9),
            log_pos: u32_at(13),
            flags: u16::from_le_bytes([event[17], event[18]]),
        }
    })
}

/// Feeds `events` to one tracker. Each event's result must agree with its header; a failed
/// event must leave the tracker usable; and the first `prefix` bytes of an event (what the
/// tracker gets for an event spread over several packets) must not say anything the whole
/// event contradicts.
fn check_history(events: &[Vec<u8>], prefixes: &[Index]) -> Result<(), TestCaseError> {
    let mut tracker = StreamTracker::new();
    for (i, event) in events.iter().enumerate() {
        let before = tracker.clone();
        let seen = bounded(event.len(), || tracker.on_event(event));
        let header = header_fields(event);
        let Ok(seen) = seen else {
            continue;
        };
        prop_assert_eq!(Some(seen.header), header);
        prop_assert!(seen.gtid.is_none() || seen.ends_transaction);
        prop_assert_eq!(tracker.position().is_some(), tracker.file().is_some());
        if let Some(end) = seen.end {
            prop_assert_eq!(end.offset, u64::from(seen.header.log_pos));
            prop_assert_eq!(Some(end.file_seq), before.position().map(|p| p.file_seq));
            prop_assert!(seen.header.kind != binlog::HEARTBEAT_EVENT);
        }
        if let Some(file) = tracker.file() {
            prop_assert_eq!(file_seq(file).ok(), tracker.position().map(|p| p.file_seq));
        }
        if seen.header.kind == binlog::HEARTBEAT_EVENT {
            prop_assert_eq!(tracker.position(), before.position());
        }
        if let Some(cut) = prefixes.get(i) {
            let k = EVENT_HEADER_LEN + cut.index(event.len() - EVENT_HEADER_LEN + 1);
            let mut first = before.clone();
            if let Ok(part) = bounded(k, || first.on_event(&event[..k])) {
                prop_assert_eq!(part.header, seen.header);
                prop_assert_eq!(part.end, seen.end);
                if part.ends_transaction {
                    prop_assert!(seen.ends_transaction);
                    prop_assert_eq!(part.gtid, seen.gtid);
                }
            }
        }
    }
    Ok(())
}

/// Edits of a history.
#[derive(Debug, Clone)]
enum Edit {
    Mutate(Index, Vec<Mutation>),
    Drop(Index),
    Repeat(Index),
    /// Keep only the first bytes of an event, as for the first packet of a large one.
    Cut(Index, Index),
}

fn history() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let histories = seeds::histories();
    let edit = prop_oneof![
        6 => (any::<Index>(), mutations()).prop_map(|(i, m)| Edit::Mutate(i, m)),
        1 => any::<Index>().prop_map(Edit::Drop),
        1 => any::<Index>().prop_map(Edit::Repeat),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(i, k)| Edit::Cut(i, k)),
    ];
    (select(histories), proptest::collection::vec(edit, 0..6)).prop_map(|(mut h, edits)| {
        for edit in edits {
            let n = h.len();
            match edit {
                Edit::Mutate(i, m) => h[i.index(n)] = apply(&h[i.index(n)], &m),
                Edit::Drop(i) => {
                    h.remove(i.index(n));
                }
                Edit::Repeat(i) => h.insert(i.index(n), h[i.index(n)].clone()),
                Edit::Cut(i, k) => {
                    let e = &mut h[i.index(n)];
                    let keep = k.index(e.len() + 1);
                    e.truncate(keep);
                }
            }
            if h.is_empty() {
                h.push(Vec::new());
            }
        }
        h
    })
}

/// Binlog file names: what the servers write, and the edge of what `file_seq` accepts.
fn file_names() -> Vec<Vec<u8>> {
    [
        &b"mysql-bin.000001"[..],
        b"/var/lib/mysql/binlog.123456",
        b"a.b.7",
        b"x.9999999999999999999",
        b"x.18446744073709551615",
        b"no-suffix",
    ]
    .iter()
    .map(|n| n.to_vec())
    .collect()
}

fn gtid_texts() -> Vec<Vec<u8>> {
    [
        "0-1-11",
        "4294967295-4294967295-18446744073709551615",
        "1-2-3",
        "00-01-002",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn event_headers_are_their_bytes(event in input(seeds::dumps().concat())) {
        let got = bounded(event.len(), || EventHeader::parse(&event));
        prop_assert_eq!(got.ok(), header_fields(&event));
    }

    #[test]
    fn stream_tracker_survives_edited_histories(
        events in history(),
        prefixes in proptest::collection::vec(any::<Index>(), 0..64),
    ) {
        check_history(&events, &prefixes)?;
    }

    #[test]
    fn any_event_type_with_any_body_is_handled(
        kind in prop_oneof![any::<u8>(), select(vec![2u8, 4, 15, 16, 26, 27, 38, 162, 165])],
        log_pos: u32,
        body in proptest::collection::vec(any::<u8>(), 0..64),
        checksum: bool,
        lead in 0usize..3,
        prefixes in proptest::collection::vec(any::<Index>(), 3),
    ) {
        // After `lead` events of a built history (none, the ROTATE, ROTATE + FDE).
        let mut events: Vec<Vec<u8>> = built::dump(checksum).into_iter().take(lead).collect();
        events.push(built::event(kind, log_pos, &body, checksum));
        check_history(&events, &prefixes)?;
    }

    #[test]
    fn file_names_give_their_numeric_suffix(name in input(file_names()), offset: u64) {
        let got = bounded(name.len(), || file_seq(&name));
        let digits = name.rsplit(|&b| b == b'.').next().filter(|_| name.contains(&b'.'));
        let want = digits
            .filter(|d| (1..=19).contains(&d.len()) && d.iter().all(u8::is_ascii_digit))
            .map(|d| d.iter().fold(0u64, |n, c| n * 10 + u64::from(c - b'0')));
        prop_assert_eq!(got.clone().ok(), want);
        prop_assert_eq!(
            Position::in_file(&name, offset).ok(),
            want.map(|file_seq| Position { file_seq, offset })
        );
    }

    #[test]
    fn mariadb_gtids_parse_only_from_three_numbers(text in mutated(gtid_texts())) {
        let got = bounded(text.len(), || Gtid::parse(&text));
        let fields: Vec<&[u8]> = text.split(|&b| b == b'-').collect();
        let shaped = fields.len() == 3
            && fields.iter().all(|f| !f.is_empty() && f.iter().all(u8::is_ascii_digit));
        let number = |f: &[u8]| std::str::from_utf8(f).ok().and_then(|s| s.parse::<u64>().ok());
        match got {
            Ok(g) => {
                prop_assert!(shaped);
                prop_assert_eq!(Gtid::parse(g.to_string().as_bytes()), Ok(g));
                let Domain::Maria(domain) = g.domain else {
                    return Err(TestCaseError::fail("a MariaDB GTID in a MySQL domain"));
                };
                prop_assert_eq!(number(fields[0]), Some(u64::from(domain)));
                prop_assert_eq!(number(fields[1]), Some(u64::from(g.server_id)));
                prop_assert_eq!(number(fields[2]), Some(g.seq_no));
            }
            // Of the well-shaped texts, only one with a number too big for its field fails.
            Err(_) if shaped => {
                let max = [u64::from(u32::MAX), u64::from(u32::MAX), u64::MAX];
                let fit = fields
                    .iter()
                    .zip(max)
                    .all(|(f, max)| number(f).is_some_and(|v| v <= max));
                prop_assert!(!fit, "{:?} refused", String::from_utf8_lossy(&text));
            }
            Err(_) => {}
        }
    }
}

#[test]
fn every_truncation_and_bit_flip_of_every_event_in_context() {
    let histories = seeds::histories();
    for history in histories {
        assert!(history.len() > 10);
        // The tracker as it stands before each event of the unedited history.
        let mut tracker = StreamTracker::new();
        let mut before = Vec::new();
        for event in &history {
            before.push(tracker.clone());
            tracker.on_event(event).expect("seed event");
        }
        for (i, event) in history.iter().enumerate() {
            for edited in neighbours(event) {
                let mut t = before[i].clone();
                let got = bounded(edited.len(), || t.on_event(&edited));
                if let Ok(seen) = got {
                    assert_eq!(Some(seen.header), header_fields(&edited), "{edited:02x?}");
                }
                // The stream goes on after a damaged event.
                for next in history.iter().skip(i + 1).take(2) {
                    let _ = bounded(next.len(), || t.on_event(next));
                }
            }
        }
    }
}
