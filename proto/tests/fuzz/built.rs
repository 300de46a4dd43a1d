//! Valid inputs built here or with the crate's own encoders, for the layouts the captures do
//! not show: MySQL-style greetings, other auth-data encodings, OKs with MySQL GTID items and
//! non-minimal lengths, events without checksums, every event type the tracker reads.

use bytes::BufMut;
use strongsync_proto::binlog::{self, CHECKSUM_LEN, EVENT_HEADER_LEN};
use strongsync_proto::capabilities::{CapabilityFlags as Caps, StatusFlags};
use strongsync_proto::ok::{self, LAST_GTID};
use strongsync_proto::wire::{put_lenenc_int, put_lenenc_str};

/// OK packets with every kind of session-state item, in the forms servers write.
pub fn oks() -> Vec<Vec<u8>> {
    let changed = StatusFlags::SERVER_SESSION_STATE_CHANGED | StatusFlags::SERVER_STATUS_AUTOCOMMIT;
    let var = |name: &[u8], value: &[u8]| {
        let mut v = Vec::new();
        put_lenenc_str(&mut v, name);
        put_lenenc_str(&mut v, value);
        v
    };
    let item = |kind: u8, data: &[u8]| {
        let mut v = vec![kind];
        put_lenenc_str(&mut v, data);
        v
    };
    let mut mysql_gtids = vec![0u8]; // encoding 0: the GTID set as text
    put_lenenc_str(&mut mysql_gtids, b"3e11fa47-71ca-11e1-9e33-c80aa9429562:23");
    let states: Vec<Vec<u8>> = vec![
        item(
            ok::SESSION_TRACK_SYSTEM_VARIABLES,
            &var(LAST_GTID, b"0-1-11"),
        ),
        [
            item(
                ok::SESSION_TRACK_SYSTEM_VARIABLES,
                &var(LAST_GTID, b"0-1-1006"),
            ),
            item(ok::SESSION_TRACK_SCHEMA, b"\x02fx"),
        ]
        .concat(),
        item(
            ok::SESSION_TRACK_SYSTEM_VARIABLES,
            &[var(b"autocommit", b"ON"), var(b"LAST_GTID", b"1-2-3")].concat(),
        ),
        [
            item(ok::SESSION_TRACK_GTIDS, &mysql_gtids),
            item(ok::SESSION_TRACK_STATE_CHANGE, b"\x011"),
        ]
        .concat(),
        Vec::new(),
    ];
    let mut out = Vec::new();
    for (i, state) in states.iter().enumerate() {
        for header in [ok::OK_HEADER, ok::EOF_HEADER] {
            let mut p = vec![header];
            put_lenenc_int(&mut p, [0, 1, 300, 70_000, 1 << 40][i]);
            put_lenenc_int(&mut p, [0, 5, 0xFB, 0, 2][i]);
            let status = if state.is_empty() {
                StatusFlags::SERVER_STATUS_AUTOCOMMIT
            } else {
                changed
            };
            p.put_u16_le(status.bits());
            p.put_u16_le(i as u16);
            put_lenenc_str(
                &mut p,
                if i % 2 == 0 {
                    &b""[..]
                } else {
                    b"Rows matched: 1"
                },
            );
            if !state.is_empty() {
                put_lenenc_str(&mut p, state);
            }
            out.push(p);
        }
    }
    out.push(vec![0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]);
    out.push(b"\x00\x01\x00\x02\x00\x00\x00Records: 1  Duplicates: 0".to_vec()); // info<EOF>
    out
}

/// Greetings as MySQL servers lay them out, with and without the optional parts.
pub fn greetings() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let base = Caps::CLIENT_PROTOCOL_41 | Caps::CLIENT_LONG_PASSWORD;
    for (caps, plugin, nul) in [
        (
            base | Caps::CLIENT_SECURE_CONNECTION | Caps::CLIENT_PLUGIN_AUTH,
            &b"caching_sha2_password"[..],
            true,
        ),
        (
            base | Caps::CLIENT_SECURE_CONNECTION | Caps::CLIENT_PLUGIN_AUTH,
            b"mysql_native_password",
            false,
        ),
        (base | Caps::CLIENT_SECURE_CONNECTION, b"", false),
        (base, b"", false),
    ] {
        let mut p = vec![0x0A];
        p.extend_from_slice(b"8.0.36\0");
        p.put_u32_le(9);
        p.extend_from_slice(b"abcdefgh\0");
        p.put_u16_le(caps.bits() as u16);
        p.put_u8(45);
        p.put_u16_le(StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits());
        p.put_u16_le((caps.bits() >> 16) as u16);
        p.put_u8(21);
        p.extend_from_slice(&[0; 10]);
        if caps.contains(Caps::CLIENT_SECURE_CONNECTION) {
            p.extend_from_slice(b"ijklmnopqrst\0");
        }
        p.extend_from_slice(plugin);
        if nul {
            p.push(0);
        }
        out.push(p);
    }
    out
}

/// An SSLRequest and handshake responses in each auth-data encoding.
pub fn client_responses() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let base = Caps::CLIENT_PROTOCOL_41 | Caps::CLIENT_LONG_PASSWORD;
    let variants = [
        base | Caps::CLIENT_SSL,
        base | Caps::CLIENT_SECURE_CONNECTION | Caps::CLIENT_CONNECT_WITH_DB,
        base | Caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | Caps::CLIENT_PLUGIN_AUTH
            | Caps::CLIENT_CONNECT_WITH_DB,
        base | Caps::CLIENT_PLUGIN_AUTH | Caps::CLIENT_CONNECT_ATTRS,
        Caps::CLIENT_PROTOCOL_41 | Caps::CLIENT_SECURE_CONNECTION, // MariaDB ext caps
    ];
    for (i, caps) in variants.into_iter().enumerate() {
        let mut p = Vec::new();
        p.put_u32_le(caps.bits());
        p.put_u32_le(1 << 24);
        p.put_u8(45);
        p.extend_from_slice(&[0; 19]);
        p.put_u32_le(if caps.contains(Caps::CLIENT_LONG_PASSWORD) {
            0
        } else {
            0x1d
        });
        if i > 0 {
            p.extend_from_slice(b"app\0");
            let auth = [0x5Au8; 20];
            if caps.contains(Caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA) {
                put_lenenc_str(&mut p, &auth);
            } else if caps.contains(Caps::CLIENT_SECURE_CONNECTION) {
                p.put_u8(auth.len() as u8);
                p.extend_from_slice(&auth);
            } else {
                p.extend_from_slice(b"secret\0");
            }
            if caps.contains(Caps::CLIENT_CONNECT_WITH_DB) {
                p.extend_from_slice(b"fx\0");
            }
            if caps.contains(Caps::CLIENT_PLUGIN_AUTH) {
                p.extend_from_slice(b"mysql_native_password\0");
            }
            if caps.contains(Caps::CLIENT_CONNECT_ATTRS) {
                put_lenenc_int(&mut p, 10);
                put_lenenc_str(&mut p, b"_os");
                put_lenenc_str(&mut p, b"Linux");
            }
        }
        out.push(p);
    }
    out
}

/// An event with a valid header (and CRC32 if `checksum`).
pub fn event(kind: u8, log_pos: u32, body: &[u8], checksum: bool) -> Vec<u8> {
    let size = EVENT_HEADER_LEN + body.len() + if checksum { CHECKSUM_LEN } else { 0 };
    let mut e = Vec::with_capacity(size);
    e.put_u32_le(1_700_000_000);
    e.put_u8(kind);
    e.put_u32_le(1);
    e.put_u32_le(size as u32);
    e.put_u32_le(log_pos);
    e.put_u16_le(0);
    e.extend_from_slice(body);
    if checksum {
        let crc = crc32fast::hash(&e);
        e.put_u32_le(crc);
    }
    e
}

/// A transaction history built here, with or without checksums: ROTATE, FDE, a standalone
/// GTID + QUERY, a GTID + XID, a GTID + QUERY `COMMIT`, an XA PREPARE, a compressed QUERY,
/// an INCIDENT, a heartbeat, and a ROTATE to the next file.
pub fn dump(checksum: bool) -> Vec<Vec<u8>> {
    let rotate = |name: &[u8], log_pos| {
        let mut body = 4u64.to_le_bytes().to_vec();
        body.extend_from_slice(name);
        event(binlog::ROTATE_EVENT, log_pos, &body, checksum)
    };
    let gtid = |seq_no: u64, flags2: u8, log_pos| {
        let mut body = Vec::new();
        body.put_u64_le(seq_no);
        body.put_u32_le(0);
        body.put_u8(flags2);
        body.extend_from_slice(&[0; 6]);
        event(binlog::GTID_EVENT, log_pos, &body, checksum)
    };
    let query = |kind, text: &[u8], log_pos| {
        let mut body = Vec::new();
        body.put_u32_le(7);
        body.put_u32_le(0);
        body.put_u8(2);
        body.put_u16_le(0);
        body.put_u16_le(3);
        body.extend_from_slice(&[0x00, 0x00, 0x00]);
        body.extend_from_slice(b"fx\0");
        body.extend_from_slice(text);
        event(kind, log_pos, &body, checksum)
    };
    let mut fde = vec![0x04, 0x00];
    fde.extend_from_slice(&[b'1'; 50]);
    fde.put_u32_le(0);
    fde.put_u8(19);
    fde.extend_from_slice(&[0u8; 10]);
    fde.put_u8(u8::from(checksum));
    let mut heartbeat = Vec::new();
    binlog::put_heartbeat(&mut heartbeat, 1, b"mysql-bin.000007", 900, checksum);
    vec![
        rotate(b"mysql-bin.000007", 0),
        event(binlog::FORMAT_DESCRIPTION_EVENT, 256, &fde, checksum),
        gtid(1, 0x01, 300),
        query(binlog::QUERY_EVENT, b"CREATE TABLE t (a INT)", 400),
        gtid(2, 0x00, 450),
        query(binlog::QUERY_EVENT, b"BEGIN", 500),
        event(binlog::XID_EVENT, 540, &9u64.to_le_bytes(), checksum),
        gtid(3, 0x00, 600),
        query(binlog::QUERY_EVENT, b"COMMIT", 650),
        gtid(4, 0x00, 700),
        event(binlog::XA_PREPARE_EVENT, 760, &[0; 12], checksum),
        gtid(5, 0x01, 800),
        query(binlog::QUERY_COMPRESSED_EVENT, b"\x80\x00", 850),
        event(binlog::INCIDENT_EVENT, 870, &[1, 0, 0], checksum),
        heartbeat,
        rotate(b"mysql-bin.000008", 950),
    ]
}
