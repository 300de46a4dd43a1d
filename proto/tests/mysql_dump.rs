//! Replays binlog dumps a real MySQL 9.7.4 primary with semisync sent to a real 9.7 replica
//! (`fixtures/mysql97_dump_semisync.txt`, written by `fixtures/capture_mysql.py`): the
//! primary asked for an ACK (semisync flag 1) on exactly the last event of each transaction,
//! so the stream tracker must end a transaction at exactly those events — DDL, autocommit and
//! multi-statement DML, XA PREPARE and XA COMMIT, tagged GTIDs, compressed transactions,
//! MyISAM — each with its GTID. Each dump request's GTID set reads as the replica had it.

mod capture;

use std::fs;

use strongsync_proto::binlog::StreamTracker;
use strongsync_proto::command::COM_BINLOG_DUMP_GTID;
use strongsync_proto::dump_gtid::DumpGtid;
use strongsync_proto::semisync;

/// One connection of the capture: the dump request and the stream packets after it.
struct Dump {
    request: Vec<u8>,
    stream: Vec<Vec<u8>>,
}

fn dumps(name: &str) -> Vec<Dump> {
    let text = fs::read_to_string(capture::dir().join(name)).unwrap();
    let mut dumps: Vec<Dump> = Vec::new();
    let mut dumping = false;
    for line in text.lines() {
        if line.starts_with("# connection") && line.ends_with("packets") {
            dumping = false;
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let from_replica = parts.next() == Some(">");
        let _seq = parts.next();
        let payload = capture::unhex(parts.next().unwrap());
        if from_replica {
            if payload.first() == Some(&COM_BINLOG_DUMP_GTID) {
                dumping = true;
                dumps.push(Dump {
                    request: payload,
                    stream: Vec::new(),
                });
            }
        } else if dumping {
            dumps.last_mut().unwrap().stream.push(payload);
        }
    }
    dumps
}

#[test]
fn transactions_end_where_the_primary_asked_for_an_ack() {
    let dumps = dumps("mysql97_dump_semisync.txt");
    assert_eq!(dumps.len(), 3);
    let mut gtids = Vec::new();
    for (i, dump) in dumps.iter().enumerate() {
        let mut tracker = StreamTracker::new();
        let mut acks_asked = 0;
        for payload in &dump.stream {
            if payload.first() != Some(&0x00) {
                continue; // the ERR or EOF that ends a dump
            }
            assert_eq!(
                payload[1],
                semisync::MAGIC,
                "connection {i}: semisync header"
            );
            let asked = payload[2] == semisync::ACK_REQUESTED;
            let seen = tracker
                .on_event(&payload[3..])
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            assert_eq!(
                seen.ends_transaction, asked,
                "connection {i}: event type {} at {:?}",
                seen.header.kind, seen.end
            );
            if asked {
                acks_asked += 1;
                let gtid = seen
                    .gtid
                    .unwrap_or_else(|| panic!("connection {i}: no GTID"));
                gtids.push(gtid.to_string());
            }
        }
        assert!(acks_asked > 0, "connection {i}");
    }
    // Every transaction of the three dumps.
    assert_eq!(gtids.len(), 16, "{gtids:#?}");
    assert!(gtids.iter().any(|g| g.contains(":mytag:")), "{gtids:#?}");
}

#[test]
fn dump_requests_read_as_the_replica_had_it() {
    let dumps = dumps("mysql97_dump_semisync.txt");
    let sets: Vec<String> = dumps
        .iter()
        .map(|d| DumpGtid::parse(&d.request).unwrap().has.to_string())
        .collect();
    assert_eq!(sets[0], "");
    let primary = "effd2511-ede8-11f1-a39d-02fc00000001";
    assert_eq!(sets[1], format!("{primary}:1-12,{primary}:mytag:1-2"));
    // Two server UUIDs (the replica committed locally), each also with a tag.
    let replica = "effcab61-ede8-11f1-9dec-02fc00000001";
    assert!(sets[2].contains(&format!("{replica}:1")), "{}", sets[2]);
    assert!(
        sets[2].contains(&format!("{replica}:rtag:1")),
        "{}",
        sets[2]
    );
    assert!(sets[2].contains(&format!("{primary}:1-13")), "{}", sets[2]);
    assert!(
        sets[2].contains(&format!("{primary}:mytag:1-2")),
        "{}",
        sets[2]
    );
}
