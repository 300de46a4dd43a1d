//! Small text result sets and OK packets for the few statements the proxy answers itself
//! (a replica's semisync negotiation), laid out for the capabilities the client negotiated;
//! and the rows of the result sets of the queries it asks itself.

use bytes::{BufMut, BytesMut};

use crate::capabilities::StatusFlags;
use crate::ok::{EOF_HEADER, OK_HEADER};
use crate::packet::put_payload;
use crate::wire::{put_lenenc_int, put_lenenc_str, Reader};

/// `utf8mb4_general_ci`.
const COLLATION_UTF8MB4: u16 = 45;
/// MYSQL_TYPE_VAR_STRING.
const TYPE_VAR_STRING: u8 = 0xFD;
/// `MYSQL_TYPE_LONGLONG`.
const TYPE_LONGLONG: u8 = 0x08;
/// The `binary` collation, which numbers come in.
const COLLATION_BINARY: u16 = 63;
/// `NOT_NULL_FLAG | UNSIGNED_FLAG | BINARY_FLAG | NUM_FLAG`.
const FLAGS_UNSIGNED_NOT_NULL: u16 = 0x0001 | 0x0020 | 0x0080 | 0x8000;
/// Length of the fixed fields of a column definition.
const FIXED_FIELDS_LEN: u64 = 0x0C;

/// How the client reads result sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `CLIENT_DEPRECATE_EOF`: no EOF after the columns, an OK-FE at the end.
    pub deprecate_eof: bool,
    /// MariaDB `MARIADB_CLIENT_EXTENDED_METADATA`: column definitions carry an extra field.
    pub extended_metadata: bool,
}

/// Appends a text result set of string columns starting at sequence id `seq`; returns the next
/// sequence id. `status` goes into the terminator.
pub fn put_text_result(
    dst: &mut BytesMut,
    seq: u8,
    layout: Layout,
    columns: &[&str],
    rows: &[&[Option<&str>]],
    status: StatusFlags,
) -> u8 {
    put_result(dst, seq, layout, columns, false, rows, status)
}

/// Appends a result set of one `BIGINT UNSIGNED NOT NULL` column named `column` and one row
/// holding `value` (what `SELECT LAST_INSERT_ID()` returns); returns the next sequence id.
pub fn put_unsigned_result(
    dst: &mut BytesMut,
    seq: u8,
    layout: Layout,
    column: &str,
    value: u64,
    status: StatusFlags,
) -> u8 {
    let value = value.to_string();
    put_result(
        dst,
        seq,
        layout,
        &[column],
        true,
        &[&[Some(&value)]],
        status,
    )
}

fn put_result(
    dst: &mut BytesMut,
    mut seq: u8,
    layout: Layout,
    columns: &[&str],
    unsigned: bool,
    rows: &[&[Option<&str>]],
    status: StatusFlags,
) -> u8 {
    let mut payload = Vec::new();
    put_lenenc_int(&mut payload, columns.len() as u64);
    seq = put_payload(dst, seq, &payload);
    for name in columns {
        payload.clear();
        put_column_definition(&mut payload, name, unsigned, layout.extended_metadata);
        seq = put_payload(dst, seq, &payload);
    }
    if !layout.deprecate_eof {
        seq = put_payload(dst, seq, &eof(status));
    }
    for row in rows {
        payload.clear();
        for value in *row {
            match value {
                Some(v) => put_lenenc_str(&mut payload, v.as_bytes()),
                None => payload.put_u8(0xFB),
            }
        }
        seq = put_payload(dst, seq, &payload);
    }
    if layout.deprecate_eof {
        payload.clear();
        put_ok_body(&mut payload, EOF_HEADER, status);
        put_payload(dst, seq, &payload)
    } else {
        put_payload(dst, seq, &eof(status))
    }
}

/// Appends an OK packet (no rows affected, no info, no session state: the same bytes with or
/// without `CLIENT_SESSION_TRACK`) at sequence id `seq`; returns the next one.
pub fn put_ok(dst: &mut BytesMut, seq: u8, status: StatusFlags) -> u8 {
    let mut payload = Vec::with_capacity(8);
    put_ok_body(&mut payload, OK_HEADER, status);
    put_payload(dst, seq, &payload)
}

fn put_ok_body(dst: &mut Vec<u8>, header: u8, status: StatusFlags) {
    dst.put_u8(header);
    put_lenenc_int(dst, 0); // affected rows
    put_lenenc_int(dst, 0); // last insert id
    dst.put_u16_le(
        status
            .difference(StatusFlags::SERVER_SESSION_STATE_CHANGED)
            .bits(),
    );
    dst.put_u16_le(0); // warnings
}

fn eof(status: StatusFlags) -> [u8; 5] {
    let s = status
        .difference(StatusFlags::SERVER_SESSION_STATE_CHANGED)
        .bits()
        .to_le_bytes();
    [EOF_HEADER, 0, 0, s[0], s[1]]
}

/// A column definition: a string column, or (`unsigned`) a `BIGINT UNSIGNED NOT NULL` one.
fn put_column_definition(dst: &mut Vec<u8>, name: &str, unsigned: bool, extended_metadata: bool) {
    put_lenenc_str(dst, b"def");
    put_lenenc_str(dst, b""); // schema
    put_lenenc_str(dst, b""); // table alias
    put_lenenc_str(dst, b""); // table
    put_lenenc_str(dst, name.as_bytes());
    put_lenenc_str(dst, name.as_bytes());
    if extended_metadata {
        put_lenenc_int(dst, 0); // no extended type information
    }
    put_lenenc_int(dst, FIXED_FIELDS_LEN);
    if unsigned {
        dst.put_u16_le(COLLATION_BINARY);
        dst.put_u32_le(20); // column length
        dst.put_u8(TYPE_LONGLONG);
        dst.put_u16_le(FLAGS_UNSIGNED_NOT_NULL);
    } else {
        dst.put_u16_le(COLLATION_UTF8MB4);
        dst.put_u32_le(256); // column length
        dst.put_u8(TYPE_VAR_STRING);
        dst.put_u16_le(0); // flags
    }
    dst.put_u8(0); // decimals
    dst.put_u16_le(0); // filler
}

/// The values of a text-protocol row: length-encoded strings, `0xFB` for NULL. A value that
/// does not parse ends the row there.
pub fn text_row(payload: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut r = Reader::new(payload);
    let mut values = Vec::new();
    while !r.is_empty() {
        if payload.get(r.position()) == Some(&0xFB) {
            let _ = r.take(1, "NULL");
            values.push(None);
        } else if let Ok(value) = r.lenenc_str("row value") {
            values.push(Some(value.to_vec()));
        } else {
            break;
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Packet, PacketDecoder};
    use crate::response::{PacketKind, ResponseReader};

    fn frame(mut bytes: BytesMut) -> Vec<Packet> {
        let mut d = PacketDecoder::new(1 << 20);
        let mut out = Vec::new();
        while let Some(p) = d.decode(&mut bytes).unwrap() {
            out.push(p);
        }
        out
    }

    #[test]
    fn result_sets_frame_as_the_response_reader_expects() {
        for deprecate_eof in [false, true] {
            let layout = Layout {
                deprecate_eof,
                extended_metadata: false,
            };
            let mut out = BytesMut::new();
            let next = put_text_result(
                &mut out,
                1,
                layout,
                &["Variable_name", "Value"],
                &[&[Some("rpl_semi_sync_master_enabled"), Some("ON")]],
                StatusFlags::SERVER_STATUS_AUTOCOMMIT,
            );
            let packets = frame(out);
            assert_eq!(next as usize, 1 + packets.len());
            let mut reader = ResponseReader::for_command(b"\x03SHOW", deprecate_eof).unwrap();
            let kinds: Vec<PacketKind> = packets
                .iter()
                .map(|p| reader.on_packet(p).unwrap().kind)
                .collect();
            assert!(reader.is_done(), "deprecate_eof={deprecate_eof}: {kinds:?}");
            assert_eq!(kinds.iter().filter(|k| **k == PacketKind::Row).count(), 1);
            let row = packets.iter().rev().nth(1).unwrap().payload();
            assert_eq!(row, b"\x1crpl_semi_sync_master_enabled\x02ON");
        }
    }

    #[test]
    fn column_definitions_match_what_mysql_common_reads() {
        use mysql_common::constants::{ColumnFlags, ColumnType};
        for (unsigned, kind) in [
            (false, ColumnType::MYSQL_TYPE_VAR_STRING),
            (true, ColumnType::MYSQL_TYPE_LONGLONG),
        ] {
            for extended in [false, true] {
                let mut def = Vec::new();
                put_column_definition(&mut def, "Value", unsigned, extended);
                if !extended {
                    let column: mysql_common::packets::Column =
                        mysql_common::io::ParseBuf(&def).parse(()).unwrap();
                    assert_eq!(column.name_str(), "Value");
                    assert_eq!(column.column_type(), kind);
                    assert_eq!(
                        column.flags().contains(ColumnFlags::UNSIGNED_FLAG),
                        unsigned
                    );
                } else {
                    // One extra length-encoded field (empty) before the fixed fields.
                    let mut plain = Vec::new();
                    put_column_definition(&mut plain, "Value", unsigned, false);
                    assert_eq!(def.len(), plain.len() + 1);
                }
            }
        }
    }

    #[test]
    fn an_unsigned_result_holds_its_value_in_one_row() {
        for deprecate_eof in [false, true] {
            let layout = Layout {
                deprecate_eof,
                extended_metadata: false,
            };
            let mut out = BytesMut::new();
            let status = StatusFlags::SERVER_STATUS_AUTOCOMMIT;
            put_unsigned_result(&mut out, 1, layout, "LAST_INSERT_ID()", 42, status);
            let packets = frame(out);
            let mut reader = ResponseReader::for_command(b"\x03SELECT", deprecate_eof).unwrap();
            for p in &packets {
                reader.on_packet(p).unwrap();
            }
            assert!(reader.is_done(), "deprecate_eof={deprecate_eof}");
            let row = packets.iter().rev().nth(1).unwrap().payload();
            assert_eq!(row, b"\x0242");
        }
    }

    #[test]
    fn ok_packets() {
        let mut out = BytesMut::new();
        assert_eq!(
            put_ok(&mut out, 1, StatusFlags::SERVER_STATUS_AUTOCOMMIT),
            2
        );
        assert_eq!(&out[..], &[7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn text_rows_read_values_and_nulls() {
        let payload = [0x05, b'0', b'-', b'1', b'-', b'9', 0xFB, 0x01, b'1'];
        assert_eq!(
            text_row(&payload),
            vec![Some(b"0-1-9".to_vec()), None, Some(b"1".to_vec())]
        );
        assert_eq!(text_row(&[0x05, b'a']), vec![], "a cut value ends the row");
    }
}
