//! Finds where each command's response ends, one packet at a time, and says what each packet is, so
//! the proxy can forward a response without buffering it and knows which packets may carry a
//! commit's GTID.

use crate::capabilities::StatusFlags;
use crate::command::*;
use crate::ok::{self, EOF_HEADER, ERR_HEADER, LOCAL_INFILE_HEADER, OK_HEADER};
use crate::packet::{Packet, MAX_PACKET_PAYLOAD};
use crate::wire::Reader;
use crate::ProtoError;

/// Tracks one command's response.
///
/// The rules per command (MariaDB protocol docs, checked against captures from MariaDB 10.11):
/// - `COM_QUERY`, `COM_STMT_EXECUTE`, `COM_STMT_BULK_EXECUTE`: OK, ERR, a LOCAL INFILE request
///   (text protocol) or a result set, repeated while the last packet of a result has
///   `SERVER_MORE_RESULTS_EXISTS`. A result set is a column count, that many column
///   definitions, an EOF unless `CLIENT_DEPRECATE_EOF`, rows, and a terminator: EOF, or an OK
///   with header `0xFE` under `CLIENT_DEPRECATE_EOF`, or ERR. An execute that opens a cursor
///   ends after the column definitions (and the EOF, or under `CLIENT_DEPRECATE_EOF` an OK-FE,
///   that says `SERVER_STATUS_CURSOR_EXISTS`); its rows come through `COM_STMT_FETCH`.
/// - `COM_STMT_PREPARE`: PREPARE_OK, parameter definitions (+EOF), column definitions (+EOF).
/// - `COM_STMT_FETCH`: rows then a terminator; `COM_FIELD_LIST`: definitions then a terminator.
/// - `COM_STATISTICS`: one text packet. Most others: one OK, EOF or ERR packet.
/// - `COM_QUIT`, `COM_STMT_CLOSE`, `COM_STMT_SEND_LONG_DATA`: nothing.
/// - `COM_BINLOG_DUMP(_GTID)`: events until the connection closes (or an EOF/ERR).
///
/// A `0xFE` packet is a terminator only if it is shorter than a row starting with `0xFE` can be:
/// under 9 bytes for EOF, under 16 MiB - 1 for an OK (a text row starting with `0xFE` carries a
/// value of 16 MiB or more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseReader {
    deprecate_eof: bool,
    opens_cursor: bool,
    state: State,
}

/// What a response packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// An OK packet (header `0x00`): parse it with [`ok::OkPacket`].
    Ok,
    /// An OK packet with header `0xFE` ending a result set (`CLIENT_DEPRECATE_EOF`).
    OkTerminator,
    /// A legacy EOF packet ending a result set, a fetch or a field list.
    Eof,
    /// The legacy EOF between column definitions and rows (or after prepare definitions).
    MetadataEof,
    /// An ERR packet.
    Err,
    /// The server asks the client for a file (`LOAD DATA LOCAL INFILE`).
    LocalInfileRequest,
    /// The column count that starts a result set.
    ColumnCount,
    /// A column or parameter definition.
    ColumnDefinition,
    /// A result row.
    Row,
    /// PREPARE_OK.
    PrepareOk,
    /// A packet of another kind that completes a single-packet response (e.g. the text of
    /// `COM_STATISTICS`).
    Other,
    /// A binlog event (or other packet) of a dump stream.
    Event,
    /// The rest of a payload begun by the previous packet.
    Continuation,
}

/// The verdict on one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// What the packet is.
    pub kind: PacketKind,
    /// True if the response is complete with this packet.
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The first packet of a result: OK, ERR, LOCAL INFILE request or column count.
    Result,
    /// Column definitions of a result set.
    Columns { left: u64 },
    /// The legacy EOF after the column definitions.
    ColumnsEof,
    /// Rows, then the terminator.
    Rows,
    /// The client is sending the file; the server says nothing until it has.
    LocalInfile,
    /// The server's answer to the file.
    LocalInfileResult,
    /// Parameter definitions of a prepared statement, then its columns.
    PrepareParams { left: u64, columns: u64 },
    /// The legacy EOF after parameter definitions.
    PrepareParamsEof { columns: u64 },
    /// Column definitions of a prepared statement.
    PrepareColumns { left: u64 },
    /// The legacy EOF after a prepared statement's column definitions.
    PrepareColumnsEof,
    /// `COM_STMT_PREPARE`'s first packet.
    Prepare,
    /// `COM_FIELD_LIST`: definitions until a terminator.
    FieldList,
    /// One packet, whatever it is.
    Single,
    /// A binlog dump: events until EOF or ERR.
    Stream,
    /// Complete.
    Done,
}

// === impl ResponseReader ===

impl ResponseReader {
    /// A reader for the response to `command` (the first packet of the command, as the
    /// client sent it), or `None` if the command gets no response. `deprecate_eof` is whether
    /// `CLIENT_DEPRECATE_EOF` was negotiated.
    pub fn for_command(command: &[u8], deprecate_eof: bool) -> Option<Self> {
        let cmd = *command.first()?;
        let state = match cmd {
            COM_QUIT | COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA => return None,
            COM_QUERY | COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => State::Result,
            COM_STMT_FETCH => State::Rows,
            COM_STMT_PREPARE => State::Prepare,
            COM_FIELD_LIST => State::FieldList,
            COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID => State::Stream,
            _ => State::Single,
        };
        // COM_STMT_EXECUTE: u8 cmd | u32 stmt_id | u8 flags | ...
        let opens_cursor = cmd == COM_STMT_EXECUTE
            && command
                .get(5)
                .is_some_and(|f| f & CURSOR_TYPE_READ_ONLY != 0);
        Some(ResponseReader {
            deprecate_eof,
            opens_cursor,
            state,
        })
    }

    /// True once the response is complete.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// True while the client, not the server, must speak: after a LOCAL INFILE request and
    /// until the client's empty packet has been passed on (see [`infile_sent`](Self::infile_sent)).
    pub fn awaits_client(&self) -> bool {
        self.state == State::LocalInfile
    }

    /// Records that the client finished sending its file (its empty packet went to the
    /// server); the server's OK or ERR comes next.
    pub fn infile_sent(&mut self) {
        if self.state == State::LocalInfile {
            self.state = State::LocalInfileResult;
        }
    }

    /// Classifies the next packet of the response and advances.
    ///
    /// # Errors
    /// [`ProtoError::Unexpected`] for a packet that cannot appear here (the stream can no
    /// longer be framed and the connection must be dropped), or a parse error in a packet
    /// whose fields decide the framing.
    pub fn on_packet(&mut self, packet: &Packet) -> Result<Step, ProtoError> {
        if packet.is_continuation() {
            return Ok(self.step(PacketKind::Continuation, self.state));
        }
        let payload = packet.payload();
        let first = payload.first().copied();
        match self.state {
            State::Result | State::LocalInfileResult => self.on_result_start(payload),
            State::Columns { left } => self.on_column(left, State::Rows),
            State::ColumnsEof => {
                let status = self.expect_eof(payload, "EOF after column definitions")?;
                let next = if self.opens_cursor
                    && status.contains(StatusFlags::SERVER_STATUS_CURSOR_EXISTS)
                {
                    State::Done
                } else {
                    State::Rows
                };
                Ok(self.step(PacketKind::MetadataEof, next))
            }
            State::Rows => self.on_row(payload),
            State::Prepare => self.on_prepare_ok(payload),
            State::PrepareParams { left, columns } => {
                let next = if left > 1 {
                    State::PrepareParams {
                        left: left - 1,
                        columns,
                    }
                } else if self.deprecate_eof {
                    Self::prepare_columns(columns)
                } else {
                    State::PrepareParamsEof { columns }
                };
                Ok(self.step(PacketKind::ColumnDefinition, next))
            }
            State::PrepareParamsEof { columns } => {
                self.expect_eof(payload, "EOF after parameter definitions")?;
                Ok(self.step(PacketKind::MetadataEof, Self::prepare_columns(columns)))
            }
            State::PrepareColumns { left } => {
                let next = if left > 1 {
                    State::PrepareColumns { left: left - 1 }
                } else if self.deprecate_eof {
                    State::Done
                } else {
                    State::PrepareColumnsEof
                };
                Ok(self.step(PacketKind::ColumnDefinition, next))
            }
            State::PrepareColumnsEof => {
                self.expect_eof(payload, "EOF after column definitions")?;
                Ok(self.step(PacketKind::MetadataEof, State::Done))
            }
            State::FieldList => match first {
                Some(ERR_HEADER) => Ok(self.step(PacketKind::Err, State::Done)),
                Some(EOF_HEADER) if self.is_terminator(payload) => {
                    Ok(self.step(self.terminator_kind(payload), State::Done))
                }
                _ => Ok(self.step(PacketKind::ColumnDefinition, State::FieldList)),
            },
            State::Single => {
                let kind = match first {
                    Some(OK_HEADER) => PacketKind::Ok,
                    Some(ERR_HEADER) => PacketKind::Err,
                    // COM_SET_OPTION / COM_DEBUG: EOF, or an OK-FE under DEPRECATE_EOF.
                    Some(EOF_HEADER) if self.is_terminator(payload) => {
                        self.terminator_kind(payload)
                    }
                    _ => PacketKind::Other,
                };
                Ok(self.step(kind, State::Done))
            }
            State::Stream => match first {
                Some(ERR_HEADER) => Ok(self.step(PacketKind::Err, State::Done)),
                Some(EOF_HEADER) if ok::is_eof(payload) => {
                    Ok(self.step(PacketKind::Eof, State::Done))
                }
                _ => Ok(self.step(PacketKind::Event, State::Stream)),
            },
            State::LocalInfile | State::Done => Err(ProtoError::Unexpected {
                first: first.unwrap_or(0),
                expecting: if self.state == State::Done {
                    "nothing (the response was complete)"
                } else {
                    "the client's LOCAL INFILE data"
                },
            }),
        }
    }

    fn step(&mut self, kind: PacketKind, next: State) -> Step {
        self.state = next;
        Step {
            kind,
            done: next == State::Done,
        }
    }

    fn on_result_start(&mut self, payload: &[u8]) -> Result<Step, ProtoError> {
        match payload.first().copied() {
            Some(OK_HEADER) => {
                let status = ok_status(payload)?;
                Ok(self.step(PacketKind::Ok, after_result(status)))
            }
            Some(ERR_HEADER) => Ok(self.step(PacketKind::Err, State::Done)),
            Some(LOCAL_INFILE_HEADER) if self.state == State::Result => {
                Ok(self.step(PacketKind::LocalInfileRequest, State::LocalInfile))
            }
            Some(_) if self.state == State::Result => {
                let columns = Reader::new(payload).lenenc_int("column count")?;
                if columns == 0 {
                    return Err(ProtoError::Malformed {
                        what: "column count",
                    });
                }
                Ok(self.step(PacketKind::ColumnCount, State::Columns { left: columns }))
            }
            first => Err(ProtoError::Unexpected {
                first: first.unwrap_or(0),
                expecting: "OK or ERR after LOCAL INFILE data",
            }),
        }
    }

    fn on_column(&mut self, left: u64, after: State) -> Result<Step, ProtoError> {
        let next = if left > 1 {
            State::Columns { left: left - 1 }
        } else if self.deprecate_eof {
            after
        } else {
            State::ColumnsEof
        };
        Ok(self.step(PacketKind::ColumnDefinition, next))
    }

    fn on_row(&mut self, payload: &[u8]) -> Result<Step, ProtoError> {
        match payload.first().copied() {
            Some(ERR_HEADER) => Ok(self.step(PacketKind::Err, State::Done)),
            Some(EOF_HEADER) if self.is_terminator(payload) => {
                let kind = self.terminator_kind(payload);
                let status = if kind == PacketKind::Eof {
                    ok::EofPacket::parse(payload)?.status
                } else {
                    ok_status(payload)?
                };
                Ok(self.step(kind, after_result(status)))
            }
            _ => Ok(self.step(PacketKind::Row, State::Rows)),
        }
    }

    fn on_prepare_ok(&mut self, payload: &[u8]) -> Result<Step, ProtoError> {
        match payload.first().copied() {
            Some(ERR_HEADER) => Ok(self.step(PacketKind::Err, State::Done)),
            Some(OK_HEADER) => {
                // u8 0 | u32 stmt_id | u16 columns | u16 params | u8 0 | u16 warnings
                let mut r = Reader::new(&payload[1..]);
                r.u32("PREPARE_OK statement id")?;
                let columns = u64::from(r.u16("PREPARE_OK column count")?);
                let params = u64::from(r.u16("PREPARE_OK parameter count")?);
                let next = if params > 0 {
                    State::PrepareParams {
                        left: params,
                        columns,
                    }
                } else {
                    Self::prepare_columns(columns)
                };
                Ok(self.step(PacketKind::PrepareOk, next))
            }
            first => Err(ProtoError::Unexpected {
                first: first.unwrap_or(0),
                expecting: "PREPARE_OK or ERR",
            }),
        }
    }

    fn prepare_columns(columns: u64) -> State {
        if columns > 0 {
            State::PrepareColumns { left: columns }
        } else {
            State::Done
        }
    }

    /// True if a `0xFE` packet ends the rows (rather than being a row).
    fn is_terminator(&self, payload: &[u8]) -> bool {
        if self.deprecate_eof {
            payload.len() < MAX_PACKET_PAYLOAD
        } else {
            ok::is_eof(payload)
        }
    }

    fn terminator_kind(&self, payload: &[u8]) -> PacketKind {
        // Servers still send a real (5-byte) EOF in places under DEPRECATE_EOF; an OK is at
        // least 7 bytes.
        if self.deprecate_eof && payload.len() > 5 {
            PacketKind::OkTerminator
        } else {
            PacketKind::Eof
        }
    }

    fn expect_eof(&self, payload: &[u8], what: &'static str) -> Result<StatusFlags, ProtoError> {
        if !ok::is_eof(payload) {
            return Err(ProtoError::Unexpected {
                first: payload.first().copied().unwrap_or(0),
                expecting: what,
            });
        }
        Ok(ok::EofPacket::parse(payload)?.status)
    }
}

/// The status flags of an OK packet, without parsing the rest.
fn ok_status(payload: &[u8]) -> Result<StatusFlags, ProtoError> {
    let mut r = Reader::new(payload);
    r.u8("OK header")?;
    r.lenenc_int("OK affected rows")?;
    r.lenenc_int("OK last insert id")?;
    Ok(StatusFlags::from_bits_retain(r.u16("OK status")?))
}

fn after_result(status: StatusFlags) -> State {
    if status.contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS) {
        State::Result
    } else {
        State::Done
    }
}

#[cfg(test)]
mod tests;
