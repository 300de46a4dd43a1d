//! Fuzzing response framing: `ResponseReader` over captured exchanges with packets mutated,
//! dropped, repeated or made up, over byte streams cut anywhere, and over the result sets the
//! proxy builds itself. Command parsing (`for_command`, `command::name`) comes with it.

use bytes::BytesMut;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;
use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::command::{self, *};
use strongsync_proto::packet::{put_payload, Packet, PacketDecoder};
use strongsync_proto::response::{PacketKind, ResponseReader, Step};
use strongsync_proto::resultset::{self, Layout};
use strongsync_proto::ProtoError;

use crate::alloc::bounded;
use crate::mutate::{apply, mutations, neighbours, Mutation};
use crate::seeds::{self, Exchange, Line};
use crate::{config, slow_config};

/// Runs `reader` over `lines`, answering LOCAL INFILE requests as the session does. Once the
/// reader fails or completes, the next server packet must be refused as unexpected.
fn check_exchange(e: &Exchange) -> Result<Vec<Result<Step, ProtoError>>, TestCaseError> {
    let reader = bounded(e.command.len(), || {
        ResponseReader::for_command(&e.command, e.deprecate_eof)
    });
    let silent = matches!(
        e.command.first(),
        None | Some(&(COM_QUIT | COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA))
    );
    prop_assert_eq!(reader.is_none(), silent);
    let Some(mut reader) = reader else {
        return Ok(Vec::new());
    };
    let mut steps = Vec::new();
    for line in &e.lines {
        if line.from_client {
            if reader.awaits_client() && line.payload.is_empty() {
                reader.infile_sent();
                prop_assert!(!reader.awaits_client());
            }
            continue;
        }
        let waiting = reader.awaits_client() || reader.is_done();
        let packet = Packet::new(line.seq, &line.payload);
        let step = bounded(line.payload.len(), || reader.on_packet(&packet));
        if waiting {
            prop_assert!(
                matches!(step, Err(ProtoError::Unexpected { .. })),
                "a packet after the end or during LOCAL INFILE gave {:?}",
                step
            );
        }
        if let Ok(s) = step {
            prop_assert_eq!(s.done, reader.is_done());
            if s.kind == PacketKind::LocalInfileRequest {
                prop_assert!(reader.awaits_client());
            }
        }
        let failed = step.is_err();
        steps.push(step);
        if failed {
            break;
        }
    }
    Ok(steps)
}

/// The same exchange's server packets as one byte stream, cut at `cuts`: the decoder and the
/// reader together must give the packets and steps of the packet-by-packet run.
fn check_split(e: &Exchange, cuts: &[Index]) -> Result<(), TestCaseError> {
    let server: Vec<&Line> = e.lines.iter().filter(|l| !l.from_client).collect();
    let direct = {
        let mut e = e.clone();
        e.lines.retain(|l| !l.from_client);
        infile_answered(&mut e);
        check_exchange(&e)?
    };
    let Some(mut reader) = ResponseReader::for_command(&e.command, e.deprecate_eof) else {
        return Ok(());
    };
    let mut wire = BytesMut::new();
    for l in &server {
        put_payload(&mut wire, l.seq, &l.payload);
    }
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
    at.sort_unstable();
    let mut decoder = PacketDecoder::new(64 << 20);
    let mut buf = BytesMut::new();
    let mut steps = Vec::new();
    let mut from = 0;
    'feed: for to in at.into_iter().chain([wire.len()]) {
        buf.extend_from_slice(&wire[from..to]);
        from = to;
        while let Some(p) = bounded(buf.len(), || decoder.decode(&mut buf))? {
            if reader.awaits_client() {
                reader.infile_sent();
            }
            let step = bounded(p.payload().len(), || reader.on_packet(&p));
            let failed = step.is_err();
            steps.push(step);
            if failed {
                break 'feed;
            }
        }
    }
    prop_assert_eq!(steps, direct);
    Ok(())
}

/// Puts the client's empty packet after every LOCAL INFILE request of `e`, so that a run
/// without client packets still lets the reader go on.
fn infile_answered(e: &mut Exchange) {
    let Some(mut reader) = ResponseReader::for_command(&e.command, e.deprecate_eof) else {
        return;
    };
    let mut lines = Vec::new();
    for l in std::mem::take(&mut e.lines) {
        if reader.awaits_client() {
            reader.infile_sent();
            lines.push(Line {
                from_client: true,
                seq: 0,
                payload: Vec::new(),
            });
        }
        let failed = reader.on_packet(&Packet::new(l.seq, &l.payload)).is_err();
        lines.push(l);
        if failed {
            break;
        }
    }
    e.lines = lines;
}

/// Edits of a whole exchange.
#[derive(Debug, Clone)]
enum Edit {
    /// Mutate one packet's payload.
    Mutate(Index, Vec<Mutation>),
    /// Drop one packet.
    Drop(Index),
    /// Send one packet twice.
    Repeat(Index),
    /// Insert a made-up server packet.
    Insert(Index, Vec<u8>),
    /// Mutate the command.
    Command(Vec<Mutation>),
    /// Read the response with the other `CLIENT_DEPRECATE_EOF` setting.
    ToggleDeprecateEof,
}

fn edit() -> impl Strategy<Value = Edit> {
    let made_up = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..24),
        select(vec![
            vec![0xFE, 0, 0, 0x02, 0],
            vec![0xFE, 0, 0, 0x0A, 0, 0, 0],
            vec![0x00, 0, 0, 0x08, 0, 0, 0],
            vec![0xFF, 0xFF, 0xFF, 1, 0, 2, 0, 50, 0, 0, 0, 0],
            vec![0xFB, b'f'],
            vec![0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
        ]),
    ];
    prop_oneof![
        5 => (any::<Index>(), mutations()).prop_map(|(i, m)| Edit::Mutate(i, m)),
        1 => any::<Index>().prop_map(Edit::Drop),
        1 => any::<Index>().prop_map(Edit::Repeat),
        1 => (any::<Index>(), made_up).prop_map(|(i, p)| Edit::Insert(i, p)),
        1 => mutations().prop_map(Edit::Command),
        1 => Just(Edit::ToggleDeprecateEof),
    ]
}

fn edited(mut e: Exchange, edits: Vec<Edit>) -> Exchange {
    for edit in edits {
        let n = e.lines.len();
        match edit {
            Edit::Mutate(i, m) if n > 0 => {
                let line = &mut e.lines[i.index(n)];
                line.payload = apply(&line.payload, &m);
            }
            Edit::Drop(i) if n > 0 => {
                e.lines.remove(i.index(n));
            }
            Edit::Repeat(i) if n > 0 => {
                let line = e.lines[i.index(n)].clone();
                e.lines.insert(i.index(n), line);
            }
            Edit::Insert(i, payload) => e.lines.insert(
                i.index(n + 1),
                Line {
                    from_client: false,
                    seq: 1,
                    payload,
                },
            ),
            Edit::Command(m) => e.command = apply(&e.command, &m),
            Edit::ToggleDeprecateEof => e.deprecate_eof = !e.deprecate_eof,
            _ => {}
        }
    }
    e
}

fn exchange() -> impl Strategy<Value = Exchange> {
    let edits = proptest::collection::vec(edit(), 0..4);
    (select(seeds::exchanges()), edits).prop_map(|(e, edits)| edited(e, edits))
}

/// A column name or value: short, or long enough to need a wider length prefix.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z_]{0,12}",
        1 => (250usize..70_000).prop_map(|n| "v".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn response_reader_survives_edited_exchanges(e in exchange()) {
        check_exchange(&e)?;
    }

    #[test]
    fn response_reader_steps_do_not_depend_on_where_the_stream_is_cut(
        e in exchange(),
        cuts in proptest::collection::vec(any::<Index>(), 0..6),
    ) {
        check_split(&e, &cuts)?;
    }

    #[test]
    fn any_command_gets_a_reader_unless_it_has_no_response(
        command in proptest::collection::vec(any::<u8>(), 0..16),
        deprecate_eof: bool,
    ) {
        check_exchange(&Exchange { deprecate_eof, command, lines: Vec::new() })?;
    }
}

proptest! {
    #![proptest_config(slow_config())]

    /// The result sets the proxy builds for itself end exactly at their last packet.
    #[test]
    fn built_result_sets_end_at_their_terminator(
        columns in proptest::collection::vec(text(), 1..4),
        rows in proptest::collection::vec(
            proptest::collection::vec(proptest::option::of(text()), 4),
            0..4,
        ),
        deprecate_eof: bool,
        extended_metadata: bool,
        status: u16,
    ) {
        let status = StatusFlags::from_bits_retain(status)
            .difference(StatusFlags::SERVER_MORE_RESULTS_EXISTS);
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        let values: Vec<Vec<Option<&str>>> = rows
            .iter()
            .map(|r| r[..names.len()].iter().map(|v| v.as_deref()).collect())
            .collect();
        let values: Vec<&[Option<&str>]> = values.iter().map(Vec::as_slice).collect();
        let layout = Layout { deprecate_eof, extended_metadata };
        let mut wire = BytesMut::new();
        resultset::put_text_result(&mut wire, 1, layout, &names, &values, status);
        let mut reader = ResponseReader::for_command(&[COM_QUERY], deprecate_eof).expect("reader");
        let mut decoder = PacketDecoder::new(64 << 20);
        let mut kinds = Vec::new();
        while let Some(p) = decoder.decode(&mut wire)? {
            prop_assert!(!reader.is_done(), "packets after the end");
            kinds.push(reader.on_packet(&p)?.kind);
        }
        prop_assert!(reader.is_done());
        let mut want = vec![PacketKind::ColumnCount];
        want.extend(names.iter().map(|_| PacketKind::ColumnDefinition));
        if !deprecate_eof {
            want.push(PacketKind::MetadataEof);
        }
        want.extend(values.iter().map(|_| PacketKind::Row));
        want.push(if deprecate_eof { PacketKind::OkTerminator } else { PacketKind::Eof });
        prop_assert_eq!(kinds, want);

        let mut ok = BytesMut::new();
        resultset::put_ok(&mut ok, 1, status);
        let p = PacketDecoder::new(1 << 10).decode(&mut ok)?.expect("OK packet");
        let mut reader = ResponseReader::for_command(&[COM_QUERY], deprecate_eof).expect("reader");
        prop_assert_eq!(reader.on_packet(&p)?, Step { kind: PacketKind::Ok, done: true });
    }
}

#[test]
fn every_truncation_and_bit_flip_of_every_captured_packet() {
    for e in seeds::exchanges() {
        let steps = check_exchange(&e).expect("captured exchange");
        // COM_CHANGE_USER starts an authentication exchange, which the session relays itself.
        if e.command.first() != Some(&COM_CHANGE_USER) {
            assert!(steps.iter().all(Result::is_ok), "{e:?}: {steps:?}");
        }
        for i in 0..e.lines.len() {
            for payload in neighbours(&e.lines[i].payload) {
                let mut m = e.clone();
                m.lines[i].payload = payload;
                if let Err(err) = check_exchange(&m) {
                    panic!("{err}\n{m:?}");
                }
            }
        }
        for command in neighbours(&e.command) {
            let m = Exchange {
                command,
                ..e.clone()
            };
            if let Err(err) = check_exchange(&m) {
                panic!("{err}\n{m:?}");
            }
        }
    }
}

#[test]
fn every_command_byte_has_a_name_and_the_known_ones_are_distinct() {
    let known = [
        COM_QUIT,
        COM_INIT_DB,
        COM_QUERY,
        COM_FIELD_LIST,
        COM_STATISTICS,
        COM_PROCESS_KILL,
        COM_DEBUG,
        COM_PING,
        COM_CHANGE_USER,
        COM_BINLOG_DUMP,
        COM_REGISTER_SLAVE,
        COM_STMT_PREPARE,
        COM_STMT_EXECUTE,
        COM_STMT_SEND_LONG_DATA,
        COM_STMT_CLOSE,
        COM_STMT_RESET,
        COM_SET_OPTION,
        COM_STMT_FETCH,
        COM_BINLOG_DUMP_GTID,
        COM_RESET_CONNECTION,
        COM_STMT_BULK_EXECUTE,
    ];
    let mut names: Vec<&str> = known.iter().map(|&c| command::name(c)).collect();
    assert!(names
        .iter()
        .all(|n| n.starts_with("COM_") && *n != "COM_UNKNOWN"));
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), known.len());
    for byte in 0..=u8::MAX {
        assert_eq!(
            command::name(byte) == "COM_UNKNOWN",
            !known.contains(&byte),
            "{byte:#04x}"
        );
    }
}
