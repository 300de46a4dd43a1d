//! Valid inputs the mutations start from: packets captured from MariaDB 10.11.19
//! (`tests/fixtures/*.txt`), completed by the ones [`built`] makes for the layouts the
//! captures do not show.

use std::fs;
use std::path::Path;

use bytes::BytesMut;
use strongsync_proto::capabilities::{CapabilityFlags as Caps, StatusFlags};
use strongsync_proto::command::COM_BINLOG_DUMP;
use strongsync_proto::ok;
use strongsync_proto::packet::put_header;
use strongsync_proto::resultset::{self, Layout};
use strongsync_proto::semisync;

use crate::built;

/// One captured packet.
#[derive(Debug, Clone)]
pub struct Line {
    /// Sent by the client (else by the server).
    pub from_client: bool,
    /// Sequence id.
    pub seq: u8,
    /// Payload.
    pub payload: Vec<u8>,
}

/// One command and what followed it, up to the next command.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// `CLIENT_DEPRECATE_EOF` was negotiated.
    pub deprecate_eof: bool,
    /// The command packet's payload.
    pub command: Vec<u8>,
    /// The packets after it (from the server, and the client's LOCAL INFILE data).
    pub lines: Vec<Line>,
}

/// A captured session: the client's capabilities and its packets in order.
struct Capture {
    name: String,
    caps: Caps,
    lines: Vec<Line>,
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Every `*.txt` capture. Packets recorded only by length (`len=`) are left out.
fn captures() -> Vec<Capture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| {
            e.expect("fixture")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = fs::read_to_string(dir.join(&name)).expect("fixture text");
            let mut caps = None;
            let mut lines = Vec::new();
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("# client caps: 0x") {
                    let hex = rest.split_whitespace().next().expect("caps");
                    caps = Some(Caps::from_bits_retain(
                        u32::from_str_radix(hex, 16).expect("caps hex"),
                    ));
                }
                let mut parts = line.split_whitespace();
                let (Some(dir @ (">" | "<")), Some(seq), Some(data)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                if data.starts_with("len=") {
                    continue;
                }
                lines.push(Line {
                    from_client: dir == ">",
                    seq: seq.parse().expect("seq"),
                    payload: unhex(data),
                });
            }
            let caps = caps.unwrap_or_else(|| panic!("{name}: no client caps"));
            Capture { name, caps, lines }
        })
        .collect()
}

/// The command-phase exchanges of the session captures, plus result sets built by
/// [`resultset`] (what the proxy itself answers).
pub fn exchanges() -> Vec<Exchange> {
    let mut out = Vec::new();
    for c in captures() {
        if c.name.starts_with("dump_") || c.name.starts_with("login_") {
            continue;
        }
        let deprecate_eof = c.caps.contains(Caps::CLIENT_DEPRECATE_EOF);
        for line in c.lines {
            if line.from_client && line.seq == 0 {
                out.push(Exchange {
                    deprecate_eof,
                    command: line.payload,
                    lines: Vec::new(),
                });
            } else if let Some(e) = out.last_mut() {
                e.lines.push(line);
            }
        }
    }
    for deprecate_eof in [false, true] {
        let layout = Layout {
            deprecate_eof,
            extended_metadata: !deprecate_eof,
        };
        let mut wire = BytesMut::new();
        let rows: [&[Option<&str>]; 2] = [&[Some("ON"), None], &[None, Some("")]];
        resultset::put_text_result(
            &mut wire,
            1,
            layout,
            &["a", "b"],
            &rows,
            StatusFlags::SERVER_STATUS_AUTOCOMMIT,
        );
        out.push(Exchange {
            deprecate_eof,
            command: b"\x03SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'".to_vec(),
            lines: split_wire(&wire),
        });
    }
    out
}

/// The packets of a well-formed stream of single packets.
fn split_wire(mut wire: &[u8]) -> Vec<Line> {
    let mut lines = Vec::new();
    while wire.len() >= 4 {
        let len = usize::from(wire[0]) | usize::from(wire[1]) << 8 | usize::from(wire[2]) << 16;
        lines.push(Line {
            from_client: false,
            seq: wire[3],
            payload: wire[4..4 + len].to_vec(),
        });
        wire = &wire[4 + len..];
    }
    lines
}

/// Each exchange's server packets framed as they came over the wire.
pub fn wires() -> Vec<Vec<u8>> {
    exchanges()
        .into_iter()
        .map(|e| {
            let mut wire = Vec::new();
            for line in e.lines.iter().filter(|l| !l.from_client) {
                put_header(&mut wire, line.payload.len(), line.seq);
                wire.extend_from_slice(&line.payload);
            }
            wire
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every packet the servers sent in the captures (greetings, auth switches, OK, ERR, EOF,
/// column definitions, rows), plus OK, EOF and ERR packets built here.
pub fn server_payloads() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = captures()
        .into_iter()
        .filter(|c| !c.name.starts_with("dump_"))
        .flat_map(|c| c.lines)
        .filter(|l| !l.from_client)
        .map(|l| l.payload)
        .collect();
    out.extend(built::oks());
    out.push(vec![0xFE, 0x00, 0x00, 0x02, 0x00]);
    for state in [Some(b"42S02"), None] {
        let mut err = Vec::new();
        ok::put_err(
            &mut err,
            1146,
            state,
            "Table 'fx.no_such_table' doesn't exist",
        );
        out.push(err);
    }
    out.push(b"\xff\xff\xff\x01\x00\x02\x00\x32\x00\x00\x00\x00\x05stage".to_vec()); // progress
    out
}

/// Greetings: the captured MariaDB ones and hand-built MySQL-style variants.
pub fn greetings() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = captures()
        .into_iter()
        .filter(|c| c.name.starts_with("login_"))
        .filter_map(|c| c.lines.into_iter().next().map(|l| l.payload))
        .collect();
    out.extend(built::greetings());
    out
}

/// Handshake responses: the captured ones, an SSLRequest, and the other auth-data encodings.
pub fn client_responses() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = captures()
        .into_iter()
        .filter(|c| c.name.starts_with("login_"))
        .filter_map(|c| c.lines.into_iter().nth(1).map(|l| l.payload))
        .collect();
    out.extend(built::client_responses());
    out
}

/// The events of both captured dumps, in order, without the stream's `00` (and semisync)
/// prefix: one sequence per dump.
pub fn dumps() -> Vec<Vec<Vec<u8>>> {
    captures()
        .into_iter()
        .filter(|c| c.name.starts_with("dump_"))
        .map(|c| {
            let semisync = c.name.contains("semisync");
            let mut dumping = false;
            let mut events = Vec::new();
            for line in c.lines {
                if line.from_client {
                    dumping = line.payload.first() == Some(&COM_BINLOG_DUMP);
                } else if dumping && line.payload.first() == Some(&0) {
                    events.push(line.payload[if semisync { 3 } else { 1 }..].to_vec());
                }
            }
            events
        })
        .collect()
}

/// Event histories: the captured dumps, and the built one with and without checksums.
pub fn histories() -> Vec<Vec<Vec<u8>>> {
    let mut out = dumps();
    out.push(built::dump(true));
    out.push(built::dump(false));
    out
}

/// ACKs: the one captured from MariaDB 10.11.19 and a few built ones.
pub fn acks() -> Vec<Vec<u8>> {
    let mut out = vec![unhex("ef8f070000000000006d7973716c2d62696e2e303030303032")];
    for (pos, file) in [
        (4u64, &b"mysql-bin.000001"[..]),
        (u64::MAX, b"a.1"),
        (1 << 40, &[b'x'; semisync::MAX_ACK_FILE_NAME][..]),
    ] {
        let mut ack = Vec::new();
        semisync::put_ack(&mut ack, pos, file);
        out.push(ack);
    }
    out
}
