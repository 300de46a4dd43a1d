//! Replays sessions captured from MariaDB 10.11.19 (`fixtures/*.txt`, written by
//! `fixtures/capture.py`) through the codec: every response must end exactly where the server
//! ended it, and the GTIDs must be found exactly where the server reported them.

mod capture;

use std::collections::BTreeMap;
use std::fs;

use bytes::BytesMut;
use strongsync_proto::capabilities::{CapabilityFlags, StatusFlags};
use strongsync_proto::command::COM_CHANGE_USER;
use strongsync_proto::gtid::{tracked_gtids, Gtid, TrackedGtid};
use strongsync_proto::handshake::{ClientResponse, ServerGreeting};
use strongsync_proto::ok::{EofPacket, OkPacket};
use strongsync_proto::packet::{put_header, Packet, PacketDecoder};
use strongsync_proto::response::{PacketKind, ResponseReader};

use capture::Line;

/// A fixture file: negotiated capabilities and the packets, grouped by command.
struct Capture {
    caps: CapabilityFlags,
    exchanges: Vec<Vec<Line>>,
}

/// What one replayed exchange reported.
#[derive(Debug, Default, PartialEq, Eq)]
struct Findings {
    gtids: Vec<String>,
    flagged_eofs: usize,
}

fn load(name: &str) -> Capture {
    let capture = capture::load(name);
    let mut exchanges: Vec<Vec<Line>> = Vec::new();
    for line in capture.lines {
        if line.from_client && line.seq == 0 || exchanges.is_empty() {
            exchanges.push(Vec::new());
        }
        exchanges.last_mut().unwrap().push(line);
    }
    Capture {
        caps: capture.caps,
        exchanges,
    }
}

/// Replays one command's exchange; panics if the reader disagrees with the capture.
fn replay(name: &str, index: usize, exchange: &[Line], caps: CapabilityFlags) -> Findings {
    let deprecate_eof = caps.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF);
    let command = &exchange[0];
    let at = format!("{name} command {}", index + 1);
    let mut findings = Findings::default();
    if command.payload.first() == Some(&COM_CHANGE_USER) {
        // An authentication exchange, relayed by the session: it ends at OK or ERR.
        let last = exchange.last().unwrap();
        assert!(
            !last.from_client && matches!(last.payload[0], 0x00 | 0xFF),
            "{at}"
        );
        return findings;
    }
    let Some(mut reader) = ResponseReader::for_command(&command.payload, deprecate_eof) else {
        assert_eq!(
            exchange.len(),
            1,
            "{at}: a command without response got one"
        );
        return findings;
    };
    let rest = &exchange[1..];
    for (i, line) in rest.iter().enumerate() {
        if line.from_client {
            assert!(
                reader.awaits_client(),
                "{at}: client spoke while the server should have"
            );
            if line.payload.is_empty() {
                reader.infile_sent();
            }
            continue;
        }
        let packet = Packet::new(line.seq, &line.payload);
        let step = reader
            .on_packet(&packet)
            .unwrap_or_else(|e| panic!("{at}, packet {}: {e}", i + 1));
        match step.kind {
            PacketKind::Ok | PacketKind::OkTerminator => {
                let ok =
                    OkPacket::parse(&line.payload, true).unwrap_or_else(|e| panic!("{at}: {e}"));
                findings.gtids.extend(tracked_gtids(&ok).map(|g| match g {
                    TrackedGtid::LastGtid(v) | TrackedGtid::OwnGtids(v) => {
                        String::from_utf8_lossy(v).into_owned()
                    }
                }));
            }
            PacketKind::Eof => {
                let eof = EofPacket::parse(&line.payload).unwrap();
                if eof
                    .status
                    .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED)
                {
                    findings.flagged_eofs += 1;
                }
            }
            _ => {}
        }
        assert_eq!(
            step.done,
            i + 1 == rest.len(),
            "{at}: response ends at packet {}",
            i + 1
        );
    }
    assert!(
        reader.is_done() || rest.is_empty(),
        "{at}: response incomplete"
    );
    findings
}

/// Commands (1-based) whose response reports a GTID, and commands with a flagged legacy EOF.
fn summary(name: &str) -> (Vec<usize>, Vec<usize>) {
    let capture = load(name);
    let mut reporting = Vec::new();
    let mut flagged = Vec::new();
    for (i, exchange) in capture.exchanges.iter().enumerate() {
        let findings = replay(name, i, exchange, capture.caps);
        if !findings.gtids.is_empty() {
            reporting.push(i + 1);
        }
        if findings.flagged_eofs > 0 {
            flagged.push(i + 1);
        }
    }
    (reporting, flagged)
}

#[test]
fn every_captured_response_ends_where_the_server_ended_it_and_gtids_are_found() {
    // scenario → (commands whose response reports a GTID, commands with a legacy EOF that
    // flags a state change), per mode. Command 1 of every file is the tracker SET.
    type PerMode = [(&'static [usize], &'static [usize]); 2];
    let expected: BTreeMap<&str, PerMode> = BTreeMap::from([
        (
            "commits",
            [(&[2, 3, 4, 7, 8][..], &[][..]), (&[2, 3, 4, 7, 8], &[])],
        ),
        ("multi_statement", [(&[2, 4], &[]), (&[2, 4], &[])]),
        ("xa", [(&[5, 6], &[]), (&[5, 6], &[])]),
        ("prepared", [(&[6, 10], &[]), (&[6, 10], &[])]),
        ("local_infile", [(&[2], &[]), (&[2], &[])]),
        ("procedure", [(&[2, 3], &[2]), (&[2, 3], &[])]),
        ("returning", [(&[], &[2]), (&[2], &[])]),
        // After RESET_CONNECTION and CHANGE_USER the server no longer tracks last_gtid until
        // it is set again (commands 11 and 14 commit silently).
        ("misc_commands", [(&[16], &[]), (&[16], &[])]),
        ("cursor", [(&[21], &[]), (&[21], &[])]),
        ("text_query", [(&[], &[]), (&[], &[])]),
        ("field_list", [(&[], &[]), (&[], &[])]),
    ]);
    for (scenario, modes) in expected {
        for ((reporting, flagged), suffix) in modes.into_iter().zip(["eof", "okfe"]) {
            let name = format!("{scenario}_{suffix}.txt");
            let (got_reporting, got_flagged) = summary(&name);
            assert_eq!(
                got_reporting, reporting,
                "{name}: commands reporting a GTID"
            );
            assert_eq!(
                got_flagged, flagged,
                "{name}: commands with a flagged legacy EOF"
            );
        }
    }
}

#[test]
fn xa_prepare_and_commit_report_consecutive_gtids() {
    for name in ["xa_eof.txt", "xa_okfe.txt"] {
        let capture = load(name);
        let gtids: Vec<String> = capture
            .exchanges
            .iter()
            .enumerate()
            .flat_map(|(i, e)| replay(name, i, e, capture.caps).gtids)
            .collect();
        assert_eq!(gtids.len(), 2, "{name}");
        let prepare: Gtid = gtids[0].parse().unwrap();
        let commit: Gtid = gtids[1].parse().unwrap();
        assert_eq!(commit.seq_no, prepare.seq_no + 1, "{name}: {gtids:?}");
        assert_eq!(commit.domain, prepare.domain);
    }
}

#[test]
fn login_packets_parse() {
    for name in [
        "login_native.txt",
        "login_ed25519.txt",
        "login_wrong_password.txt",
    ] {
        let capture = load(name);
        let lines: Vec<&Line> = capture.exchanges.iter().flatten().collect();
        let greeting = ServerGreeting::parse(&lines[0].payload).unwrap();
        assert!(greeting.is_mariadb(), "{name}");
        assert_eq!(greeting.capabilities.bits(), 0x81ff_f7fe, "{name}");
        assert_eq!(
            greeting.mariadb_capabilities.map(|c| c.bits()),
            Some(0x1d),
            "{name}"
        );
        assert_eq!(greeting.auth_plugin, b"mysql_native_password", "{name}");
        let response = ClientResponse::parse(&lines[1].payload).unwrap();
        assert_eq!(response.capabilities, capture.caps, "{name}");
        let last = lines.last().unwrap();
        let want = if name.contains("wrong") { 0xFF } else { 0x00 };
        assert_eq!(last.payload[0], want, "{name}");
        if name.contains("ed25519") {
            let switch = &lines[2].payload;
            assert_eq!(switch[0], 0xFE, "auth switch");
            assert!(switch[1..].starts_with(b"client_ed25519\0"));
            assert_eq!(switch.len(), 1 + 15 + 32, "32-byte nonce");
            assert_eq!(lines[3].payload.len(), 64, "64-byte signature");
        }
    }
}

#[test]
fn a_row_of_16_mib_is_framed_across_two_packets() {
    for name in ["large_row_eof.lens", "large_row_okfe.lens"] {
        let text = fs::read_to_string(capture::dir().join(name)).unwrap();
        let deprecate_eof = name.contains("okfe");
        // (from the client, sequence id, payload length, first payload bytes)
        type Lens = (bool, u8, usize, Vec<u8>);
        let commands: Vec<Vec<Lens>> =
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .fold(Vec::new(), |mut acc, l| {
                    let mut p = l.split_whitespace();
                    let from_client = p.next() == Some(">");
                    let seq: u8 = p.next().unwrap().parse().unwrap();
                    let len: usize = p
                        .next()
                        .unwrap()
                        .trim_start_matches("len=")
                        .parse()
                        .unwrap();
                    let first = capture::unhex(p.next().unwrap().trim_start_matches("first="));
                    if from_client {
                        acc.push(Vec::new());
                    }
                    acc.last_mut().unwrap().push((from_client, seq, len, first));
                    acc
                });
        for command in commands {
            let (_, _, _, first) = &command[0];
            let mut reader = ResponseReader::for_command(first, deprecate_eof).unwrap();
            let mut wire = BytesMut::new();
            for (_, seq, len, first) in &command[1..] {
                put_header(&mut wire, *len, *seq);
                let mut payload = first.clone();
                payload.resize(*len, b'x');
                wire.extend_from_slice(&payload);
            }
            let mut decoder = PacketDecoder::new(64 << 20);
            let mut packets = 0;
            while let Some(packet) = decoder.decode(&mut wire).unwrap() {
                packets += 1;
                let step = reader.on_packet(&packet).unwrap();
                assert_eq!(step.done, packets == command.len() - 1, "{name}");
            }
            assert_eq!(packets, command.len() - 1);
        }
    }
}
