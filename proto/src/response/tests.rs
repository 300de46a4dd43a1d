//! Table tests: a command, then each response packet with the kind and completion the reader
//! must report. The byte sequences follow captures from MariaDB 10.11.19
//! (shared/research/verified-mariadb-10.11.md §2); `proto/tests/fixtures.rs` replays whole
//! captured sessions.

use super::PacketKind::*;
use super::*;
use crate::testing::hex;

const COLDEF: &str = "03 64 65 66 00 00 00 02 69 64 00 0c 3f 00 0b 00 00 00 03 03 42 00 00 00";

/// Feeds `packets` (hex payload, expected kind) and checks that the response ends exactly at
/// the last one.
fn run(command: &str, deprecate_eof: bool, packets: &[(&str, PacketKind)]) {
    let mut reader =
        ResponseReader::for_command(&hex(command), deprecate_eof).expect("has a response");
    for (i, (payload, kind)) in packets.iter().enumerate() {
        let step = reader
            .on_packet(&Packet::new(i as u8 + 1, &hex(payload)))
            .unwrap();
        assert_eq!(step.kind, *kind, "packet {i} of {command}");
        assert_eq!(
            step.done,
            i + 1 == packets.len(),
            "packet {i} of {command}: done"
        );
    }
    assert!(reader.is_done());
}

#[test]
fn ok_err_and_single_packet_commands() {
    run("03 44 4f 20 31", false, &[("00 00 00 02 00 00 00", Ok)]);
    run("03 78", false, &[("ff 28 04 23 34 32 30 30 30 78", Err)]);
    // Code 0xFFFF (MySQL's `SIGNAL ... SET MYSQL_ERRNO = 65535`) is an error like any other:
    // MariaDB's progress reports share it only on a connection that asked for them, and no
    // leg of the proxy's does.
    run("03 78", false, &[("ff ff ff 23 48 59 30 30 30 78", Err)]);
    run("0e", true, &[("00 00 00 02 00 00 00", Ok)]);
    run("09", false, &[("55 70 74 69 6d 65 3a 20 31", Other)]);
    run("1b 00 00", false, &[("fe 00 00 02 00", Eof)]);
    run(
        "15 02 00 00 00 00 00 00 db 62 00 00 00 00 00 00 00 00",
        false,
        &[("00 00 00 02 00 00 00", Ok)],
    );
    for silent in ["01", "19 01 00 00 00", "18 01 00 00 00 00 00 61"] {
        assert!(ResponseReader::for_command(&hex(silent), false).is_none());
    }
}

#[test]
fn result_set_with_legacy_eof_and_returning_commit() {
    // INSERT … RETURNING id: the terminator carries SESSION_STATE_CHANGED, no GTID.
    run(
        "03 49",
        false,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", MetadataEof),
            ("01 37", Row),
            ("fe 00 00 02 40", Eof),
        ],
    );
}

#[test]
fn result_set_with_ok_terminator() {
    run(
        "03 49",
        true,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("02 31 33", Row),
            (
                "fe 00 00 02 40 00 00 00 15 00 13 09 6c 61 73 74 5f 67 74 69 64 08 30 2d 31 2d 31 30 31 30",
                OkTerminator,
            ),
        ],
    );
}

#[test]
fn multi_results_continue_while_more_results_exists() {
    // INSERT; INSERT; SELECT 1 (two OKs with MORE_RESULTS, then a result set)
    run(
        "03 49",
        false,
        &[
            ("00 01 0a 0a 40 00 00 00 03 01 01 00", Ok),
            ("00 01 0b 0a 00 00 00", Ok),
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 0a 00", MetadataEof),
            ("01 31", Row),
            ("fe 00 00 02 00", Eof),
        ],
    );
    // CALL p(): a result set whose EOF has MORE_RESULTS, then the procedure's final OK.
    run(
        "03 43",
        false,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 0a 00", MetadataEof),
            ("01 31", Row),
            ("fe 00 00 0a 40", Eof),
            ("00 01 00 02 40 00 00 00 03 01 01 00", Ok),
        ],
    );
    // An error ends the whole batch even if earlier results announced more.
    run(
        "03 49",
        true,
        &[
            ("00 01 0a 0a 00 00 00", Ok),
            ("ff 28 04 23 34 32 30 30 30 78", Err),
        ],
    );
}

#[test]
fn rows_that_start_like_terminators_are_rows() {
    // A text row whose first value is NULL (0xFB) or empty (0x00), and a row starting with
    // 0xFE that is too long to be an EOF.
    let long_fe = format!("fe {}", "00 ".repeat(9));
    run(
        "03 53",
        false,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", MetadataEof),
            ("fb", Row),
            ("00", Row),
            (&long_fe, Row),
            ("fe 00 00 02 00", Eof),
        ],
    );
}

#[test]
fn local_infile_waits_for_the_client_then_reads_the_ok() {
    let mut reader = ResponseReader::for_command(&hex("03 4c"), false).unwrap();
    let step = reader
        .on_packet(&Packet::new(1, &hex("fb 78 2e 63 73 76")))
        .unwrap();
    assert_eq!((step.kind, step.done), (LocalInfileRequest, false));
    assert!(reader.awaits_client());
    assert!(
        reader
            .on_packet(&Packet::new(2, &hex("00 00 00 02 00 00 00")))
            .is_err(),
        "server may not speak yet"
    );
    reader.infile_sent();
    assert!(!reader.awaits_client());
    let step = reader
        .on_packet(&Packet::new(4, &hex("00 03 00 02 40 00 00 00")))
        .unwrap();
    assert_eq!((step.kind, step.done), (Ok, true));
}

#[test]
fn prepare_counts_parameter_and_column_definitions() {
    // stmt 1, 2 columns, 1 parameter
    let prepare_ok = "00 01 00 00 00 02 00 01 00 00 00 00";
    run(
        "16 53",
        false,
        &[
            (prepare_ok, PrepareOk),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", MetadataEof),
            (COLDEF, ColumnDefinition),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", MetadataEof),
        ],
    );
    run(
        "16 53",
        true,
        &[
            (prepare_ok, PrepareOk),
            (COLDEF, ColumnDefinition),
            (COLDEF, ColumnDefinition),
            (COLDEF, ColumnDefinition),
        ],
    );
    run(
        "16 49",
        false,
        &[("00 01 00 00 00 00 00 00 00 00 00 00", PrepareOk)],
    );
    run("16 49", false, &[("ff 28 04 23 34 32 30 30 30 78", Err)]);
}

#[test]
fn execute_binary_rows_and_cursor() {
    run(
        "17 01 00 00 00 00 01 00 00 00",
        false,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", MetadataEof),
            ("00 00 07 00 00 00", Row),
            ("fe 00 00 02 00", Eof),
        ],
    );
    // CURSOR_TYPE_READ_ONLY: the EOF says CURSOR_EXISTS and the rows wait for COM_STMT_FETCH.
    run(
        "17 01 00 00 00 01 01 00 00 00",
        false,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 42 00", MetadataEof),
        ],
    );
    // A cursor was asked for but not opened (no CURSOR_EXISTS): the rows follow.
    run(
        "17 01 00 00 00 01 01 00 00 00",
        false,
        &[
            ("01", ColumnCount),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", MetadataEof),
            ("00 00 07 00 00 00", Row),
            ("fe 00 00 02 00", Eof),
        ],
    );
    run(
        "1c 01 00 00 00 02 00 00 00",
        false,
        &[
            ("00 00 07 00 00 00", Row),
            ("00 00 08 00 00 00", Row),
            ("fe 00 00 82 00", Eof),
        ],
    );
}

#[test]
fn field_list_ends_at_its_terminator() {
    run(
        "04 74 00",
        false,
        &[
            (COLDEF, ColumnDefinition),
            (COLDEF, ColumnDefinition),
            ("fe 00 00 02 00", Eof),
        ],
    );
    run("04 78 00", false, &[("ff 7a 04 23 34 32 53 30 32 78", Err)]);
}

#[test]
fn binlog_dump_is_a_stream_until_eof_or_err() {
    let mut reader =
        ResponseReader::for_command(&hex("12 04 00 00 00 02 00 02 00 00 00"), false).unwrap();
    for seq in 1..100 {
        let step = reader
            .on_packet(&Packet::new(seq, &hex("00 ef 00 00 00 00 00 04")))
            .unwrap();
        assert_eq!((step.kind, step.done), (Event, false));
    }
    assert!(
        reader
            .on_packet(&Packet::new(100, &hex("fe 00 00 02 00")))
            .unwrap()
            .done
    );
}

#[test]
fn rows_of_16_mib_and_more_continue_without_being_classified() {
    let mut reader = ResponseReader::for_command(&hex("03 53"), true).unwrap();
    for (payload, kind) in [("01", ColumnCount), (COLDEF, ColumnDefinition)] {
        assert_eq!(
            reader
                .on_packet(&Packet::new(1, &hex(payload)))
                .unwrap()
                .kind,
            kind
        );
    }
    let mut wire = bytes::BytesMut::new();
    let mut row = vec![0xFE];
    row.extend_from_slice(&(MAX_PACKET_PAYLOAD as u64 + 100).to_le_bytes());
    row.resize(9 + MAX_PACKET_PAYLOAD + 100, b'x');
    crate::packet::put_payload(&mut wire, 3, &row);
    let mut decoder = crate::PacketDecoder::new(64 << 20);
    let first = decoder.decode(&mut wire).unwrap().unwrap();
    assert_eq!(
        reader.on_packet(&first).unwrap().kind,
        Row,
        "0xFE with 16 MiB is a row"
    );
    let rest = decoder.decode(&mut wire).unwrap().unwrap();
    assert_eq!(reader.on_packet(&rest).unwrap().kind, Continuation);
    let step = reader
        .on_packet(&Packet::new(5, &hex("fe 00 00 02 00 00 00")))
        .unwrap();
    assert_eq!((step.kind, step.done), (OkTerminator, true));
}

#[test]
fn impossible_packets_are_errors() {
    let mut reader = ResponseReader::for_command(&hex("03 53"), false).unwrap();
    reader.on_packet(&Packet::new(1, &hex("01"))).unwrap();
    reader.on_packet(&Packet::new(2, &hex(COLDEF))).unwrap();
    assert!(
        reader.on_packet(&Packet::new(3, &hex("01 31"))).is_err(),
        "EOF expected"
    );
    let mut done = ResponseReader::for_command(&hex("0e"), false).unwrap();
    done.on_packet(&Packet::new(1, &hex("00 00 00 02 00 00 00")))
        .unwrap();
    assert!(done
        .on_packet(&Packet::new(2, &hex("00 00 00 02 00 00 00")))
        .is_err());
    let mut zero = ResponseReader::for_command(&hex("03 53"), false).unwrap();
    assert!(
        zero.on_packet(&Packet::new(1, &hex("fc"))).is_err(),
        "truncated column count"
    );
}

proptest::proptest! {
    #[test]
    fn random_packets_never_panic(
        command in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..12),
        packets in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24), 0..12),
        deprecate_eof: bool,
    ) {
        if let Some(mut reader) = ResponseReader::for_command(&command, deprecate_eof) {
            for (i, p) in packets.iter().enumerate() {
                if reader.awaits_client() {
                    reader.infile_sent();
                }
                if reader.on_packet(&Packet::new(i as u8, p)).is_err() || reader.is_done() {
                    break;
                }
            }
        }
    }
}
