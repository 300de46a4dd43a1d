//! The sessions captured from MariaDB 10.11.19 in `tests/fixtures` (written by
//! `fixtures/capture.py` and `fixtures/capture_dump.py`), read for the test binaries that replay
//! or mutate them: the client's capabilities and each packet with its direction and sequence id.

// Each test binary uses part of this module.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;

use strongsync_proto::capabilities::CapabilityFlags;

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

/// A capture file: the capabilities the client negotiated and its packets in order.
pub struct Capture {
    pub name: String,
    pub caps: CapabilityFlags,
    pub lines: Vec<Line>,
}

/// The fixtures directory.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Hex text as bytes (`-` is an empty payload).
pub fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The capture `name`. Packets recorded only by their length (`len=`) are left out.
pub fn load(name: &str) -> Capture {
    let text = fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut caps = None;
    let mut lines = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# client caps: 0x") {
            let hex = rest.split_whitespace().next().expect("caps");
            caps = Some(CapabilityFlags::from_bits_retain(
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
            seq: seq
                .parse()
                .unwrap_or_else(|e| panic!("{name}: sequence id {seq}: {e}")),
            payload: unhex(data),
        });
    }
    // A capture of two servers (a real replica's dump) has no caps line: the replica's
    // handshake response says them.
    let caps = caps.or_else(|| {
        lines
            .iter()
            .find(|l| l.from_client && l.seq == 1 && l.payload.len() >= 4)
            .map(|l| {
                let bits = u32::from_le_bytes(l.payload[..4].try_into().expect("four bytes"));
                CapabilityFlags::from_bits_retain(bits)
            })
    });
    Capture {
        name: name.to_owned(),
        caps: caps.unwrap_or_else(|| panic!("{name}: no client caps line")),
        lines,
    }
}

/// Every `*.txt` capture, by name.
pub fn all() -> Vec<Capture> {
    let mut names: Vec<String> = fs::read_dir(dir())
        .expect("fixtures")
        .map(|e| {
            e.expect("fixture")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        // MySQL's captures span several connections each; mysql_dump.rs and mysql_ok.rs
        // replay them.
        .filter(|n| n.ends_with(".txt") && !n.starts_with("mysql97_"))
        .collect();
    names.sort();
    names.iter().map(|name| load(name)).collect()
}
