//! Valid inputs the mutations start from: packets captured from MariaDB 10.11.19
//! (`tests/fixtures/*.txt`), completed by the ones [`built`] makes for the layouts the
//! captures do not show.

use bytes::BytesMut;
use strongsync_proto::capabilities::{CapabilityFlags as Caps, StatusFlags};
use strongsync_proto::command::COM_BINLOG_DUMP;
use strongsync_proto::ok;
use strongsync_proto::packet::put_header;
use strongsync_proto::resultset::{self, Layout};
use strongsync_proto::semisync;

use crate::{built, capture};

pub use crate::capture::Line;

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

/// The command-phase exchanges of the session captures, plus result sets built by
/// [`resultset`] (what the proxy itself answers).
pub fn exchanges() -> Vec<Exchange> {
    let mut out = Vec::new();
    for c in capture::all() {
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
    let mut out: Vec<Vec<u8>> = capture::all()
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
    let mut out: Vec<Vec<u8>> = capture::all()
        .into_iter()
        .filter(|c| c.name.starts_with("login_"))
        .filter_map(|c| c.lines.into_iter().next().map(|l| l.payload))
        .collect();
    out.extend(built::greetings());
    out
}

/// Handshake responses: the captured ones, an SSLRequest, and the other auth-data encodings.
pub fn client_responses() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = capture::all()
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
    capture::all()
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
    let mut out = vec![capture::unhex(
        "ef8f070000000000006d7973716c2d62696e2e303030303032",
    )];
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
