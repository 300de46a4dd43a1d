//! OK packets a real MySQL 9.7.4 sent with `session_track_gtids` on
//! (`fixtures/mysql97_commits_okfe.txt`, written by `fixtures/capture_mysql.py`): every GTID
//! report reads as a GTID set whose GTIDs are the ones the capture's notes list for that
//! statement — plain, several in one statement, tagged, and `ALL_GTIDS`' whole set.

mod capture;

use std::fs;

use strongsync_proto::gtid::{tracked_gtids, GtidPosition, TrackedGtid};
use strongsync_proto::ok::OkPacket;

#[test]
fn every_gtid_report_reads_as_the_server_wrote_it() {
    let text = fs::read_to_string(capture::dir().join("mysql97_commits_okfe.txt")).unwrap();
    // What the capture's notes say each report was: `GTIDS(enc=0,'<text>')`.
    let noted: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .flat_map(|l| {
            l.split("GTIDS(enc=0,'")
                .skip(1)
                .map(|r| r.split('\'').next().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let capture = capture::load("mysql97_commits_okfe.txt");
    let mut reported = Vec::new();
    for line in capture.lines.iter().filter(|l| !l.from_client) {
        // An OK, or the OK that ends a result set (`FE`, with CLIENT_DEPRECATE_EOF).
        let Some(&(0x00 | 0xFE)) = line.payload.first() else {
            continue;
        };
        let Ok(ok) = OkPacket::parse(&line.payload, true) else {
            continue;
        };
        for tracked in tracked_gtids(&ok) {
            let TrackedGtid::OwnGtids(text) = tracked else {
                continue;
            };
            let text = std::str::from_utf8(text).unwrap();
            let set = GtidPosition::parse_mysql(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(!set.is_empty(), "{text:?}");
            reported.push(text.to_string());
        }
    }
    assert!(reported.len() >= 10, "{reported:#?}");
    assert!(
        reported.iter().any(|r| r.contains(":mytag:")),
        "{reported:#?}"
    );
    assert!(
        reported.iter().any(|r| r.contains('-')),
        "a report of several: {reported:#?}"
    );
    // The notes write a newline in a set as `\n`.
    let reported: Vec<String> = reported.iter().map(|r| r.replace('\n', "\\n")).collect();
    for text in &noted {
        assert!(
            reported.contains(text),
            "{text:?} noted but not found in the packets"
        );
    }
}
