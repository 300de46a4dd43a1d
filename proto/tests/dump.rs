//! Replays binlog dumps captured from MariaDB 10.11.19 (`fixtures/dump_*.txt`, written by
//! `fixtures/capture_dump.py`) through the stream tracker: every transaction must end exactly at
//! the event and position `SHOW BINLOG EVENTS` listed, with its GTID, in both the plain stream
//! and the one the primary prefixed with the semisync header.

mod capture;

use std::fs;

use bytes::BytesMut;
use strongsync_proto::binlog::StreamTracker;
use strongsync_proto::command::COM_BINLOG_DUMP;
use strongsync_proto::packet::{put_header, PacketDecoder};
use strongsync_proto::position::Position;
use strongsync_proto::semisync;

/// The dump stream's packets as the proxy would receive them (large ones rebuilt from their
/// recorded length and first bytes).
fn dump_stream(name: &str) -> BytesMut {
    let text = fs::read_to_string(capture::dir().join(name)).unwrap();
    let mut wire = BytesMut::new();
    let mut dumping = false;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut parts = line.split_whitespace();
        let from_client = parts.next() == Some(">");
        let seq: u8 = parts.next().unwrap().parse().unwrap();
        let data = parts.next().unwrap();
        if from_client {
            dumping = capture::unhex(data).first() == Some(&COM_BINLOG_DUMP);
            continue;
        }
        if !dumping {
            continue;
        }
        let payload = match data.strip_prefix("len=") {
            Some(len) => {
                let first = capture::unhex(parts.next().unwrap().trim_start_matches("first="));
                let mut payload = first;
                payload.resize(len.parse().unwrap(), b'x');
                payload
            }
            None if data == "-" => Vec::new(),
            None => capture::unhex(data),
        };
        put_header(&mut wire, payload.len(), seq);
        wire.extend_from_slice(&payload);
    }
    wire
}

/// Transactions ending in the capture: (GTID, end file, end offset), from its `# event:` lines.
const ENDS: [(&str, u64, u64); 9] = [
    ("0-1-1", 1, 505),      // CREATE TABLE: standalone, QUERY
    ("0-1-2", 1, 717),      // XID
    ("0-1-3", 1, 1068),     // BEGIN … COMMIT: XID
    ("0-1-4", 1, 1233),     // CREATE TABLE (MyISAM)
    ("0-1-5", 1, 1473),     // MyISAM insert: QUERY "COMMIT"
    ("0-1-6", 1, 1779),     // XA PREPARE: XA_PREPARE event
    ("0-1-7", 1, 1908),     // XA COMMIT: standalone, QUERY
    ("0-1-8", 1, 17827933), // after a 17 MiB rows event spread over two packets
    ("0-1-9", 2, 618),      // after FLUSH BINARY LOGS
];

#[test]
fn transactions_end_where_the_binlog_says_in_both_streams() {
    for (name, semisync) in [("dump_async.txt", false), ("dump_semisync.txt", true)] {
        let mut wire = dump_stream(name);
        let mut decoder = PacketDecoder::new(64 << 20);
        let mut tracker = StreamTracker::new();
        let mut ends = Vec::new();
        let mut events = 0;
        while let Some(packet) = decoder.decode(&mut wire).unwrap() {
            if packet.is_continuation() {
                continue;
            }
            let payload = packet.payload();
            assert_eq!(payload[0], 0x00, "{name}: stream packet");
            let event = if semisync {
                assert_eq!(
                    &payload[1..3],
                    &[semisync::MAGIC, semisync::NO_ACK],
                    "{name}: header"
                );
                &payload[3..]
            } else {
                &payload[1..]
            };
            let seen = tracker
                .on_event(event)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            events += 1;
            if seen.ends_transaction {
                let end = seen.end.unwrap();
                ends.push((
                    seen.gtid.map(|g| g.to_string()).unwrap_or_default(),
                    end.file_seq,
                    end.offset,
                ));
            }
        }
        assert!(wire.is_empty());
        assert!(events > 40, "{name}: {events} events");
        let want: Vec<(String, u64, u64)> = ENDS
            .iter()
            .map(|(g, f, o)| (g.to_string(), *f, *o))
            .collect();
        assert_eq!(ends, want, "{name}");
        assert_eq!(tracker.file(), Some(&b"mysql-bin.000002"[..]));
        assert_eq!(
            tracker.position(),
            Some(Position {
                file_seq: 2,
                offset: 618
            })
        );
        assert_eq!(
            (tracker.checksum(), tracker.server_id()),
            (Some(true), Some(1))
        );
    }
}
