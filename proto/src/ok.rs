//! The packets that end an exchange: OK (with its session-state block), EOF and ERR.

use bytes::BufMut;

use crate::capabilities::StatusFlags;
use crate::wire::{lenenc_int_len, put_lenenc_int, put_lenenc_str, Reader};
use crate::ProtoError;

/// First byte of an OK packet.
pub const OK_HEADER: u8 = 0x00;
/// First byte of an EOF packet, and of an OK packet that ends a result set under
/// `CLIENT_DEPRECATE_EOF`.
pub const EOF_HEADER: u8 = 0xFE;
/// First byte of an ERR packet.
pub const ERR_HEADER: u8 = 0xFF;
/// First byte of a LOCAL INFILE request.
pub const LOCAL_INFILE_HEADER: u8 = 0xFB;

/// Session-state item type: a system variable changed.
pub const SESSION_TRACK_SYSTEM_VARIABLES: u8 = 0x00;
/// Session-state item type: the default schema changed.
pub const SESSION_TRACK_SCHEMA: u8 = 0x01;
/// Session-state item type: some session state changed.
pub const SESSION_TRACK_STATE_CHANGE: u8 = 0x02;
/// Session-state item type: GTIDs (MySQL `session_track_gtids`).
pub const SESSION_TRACK_GTIDS: u8 = 0x03;
/// Session-state item type: the statements that would start a transaction like the current
/// one (`session_track_transaction_info = CHARACTERISTICS`).
pub const SESSION_TRACK_TRANSACTION_CHARACTERISTICS: u8 = 0x04;
/// Session-state item type: what the current transaction has done, eight flag characters
/// (`session_track_transaction_info = STATE` or `CHARACTERISTICS`).
pub const SESSION_TRACK_TRANSACTION_STATE: u8 = 0x05;

/// Name of the MariaDB session variable holding the session's last committed GTID.
pub const LAST_GTID: &[u8] = b"last_gtid";
/// Name of the session variable that switches `SESSION_TRACK_STATE_CHANGE` items on.
pub const SESSION_TRACK_STATE_CHANGE_VAR: &[u8] = b"session_track_state_change";
/// MySQL's variable that switches its GTID reports (`OFF`, `OWN_GTID`, `ALL_GTIDS`).
pub const SESSION_TRACK_GTIDS_VAR: &[u8] = b"session_track_gtids";
/// The variable that lists the tracked variables.
pub const SESSION_TRACK_SYSTEM_VARIABLES_VAR: &[u8] = b"session_track_system_variables";
/// Name of the session variable that switches the transaction items on.
pub const SESSION_TRACK_TRANSACTION_INFO_VAR: &[u8] = b"session_track_transaction_info";

/// An OK packet, parsed without copying: where the primary reports a commit's GTID, and where the
/// proxy removes the tracking data it asked for on the client's behalf (rebuilding the packet
/// only when something has to go, [`OkPacket::write_filtered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OkPacket<'a> {
    /// `0x00`, or `0xFE` for a result-set terminator under `CLIENT_DEPRECATE_EOF`.
    pub header: u8,
    /// Affected rows.
    pub affected_rows: u64,
    /// Last insert id.
    pub last_insert_id: u64,
    /// Server status flags.
    pub status: StatusFlags,
    /// Warning count.
    pub warnings: u16,
    /// Human-readable info (e.g. `Rows matched: 1  Changed: 1  Warnings: 0`), may be empty.
    pub info: &'a [u8],
    /// The session-state items, still encoded (empty when there are none).
    pub session_state: &'a [u8],
    /// Bytes from the header through the last insert id, copied verbatim when rewriting.
    head: &'a [u8],
}

/// One session-state item: `u8 type | lenenc-str data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateItem<'a> {
    /// Item type (`SESSION_TRACK_*`).
    pub kind: u8,
    /// The item's data.
    pub data: &'a [u8],
}

/// Iterates over the items of a session-state block.
#[derive(Debug, Clone)]
pub struct StateItems<'a> {
    reader: Reader<'a>,
}

/// Which tracking data a client gets to see, decided per session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackingFilter {
    /// The client negotiated `CLIENT_SESSION_TRACK`: it reads the state block at all.
    pub client_tracks: bool,
    /// The client's own `session_track_system_variables` includes `last_gtid` (or `*`).
    pub keep_last_gtid: bool,
    /// The client's own `session_track_gtids` is on (MySQL).
    pub keep_gtids: bool,
    /// The client's own `session_track_state_change` is on: it reads
    /// `SESSION_TRACK_STATE_CHANGE` items.
    pub keep_state_change: bool,
    /// The client's own `session_track_system_variables` includes
    /// `session_track_state_change` (or `*`).
    pub keep_state_change_var: bool,
    /// The client's own `session_track_system_variables` includes
    /// `session_track_transaction_info` (or `*`).
    pub keep_transaction_info_var: bool,
    /// The client's own `session_track_system_variables` includes `session_track_gtids` (or
    /// `*`).
    pub keep_gtids_var: bool,
    /// The client's own `session_track_system_variables` includes
    /// `session_track_system_variables` (or `*`).
    pub keep_list_var: bool,
    /// The client's own `session_track_transaction_info` is `STATE` or `CHARACTERISTICS`.
    pub keep_transaction_state: bool,
    /// The client's own `session_track_transaction_info` is `CHARACTERISTICS`.
    pub keep_transaction_characteristics: bool,
}

/// An EOF packet: `FE u16 warnings u16 status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EofPacket {
    /// Warning count.
    pub warnings: u16,
    /// Server status flags.
    pub status: StatusFlags,
}

/// An ERR packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrPacket<'a> {
    /// Error code.
    pub code: u16,
    /// SQLSTATE, when the packet carries one.
    pub sql_state: Option<&'a [u8]>,
    /// Message.
    pub message: &'a [u8],
}

/// True if `payload` is an EOF packet (as opposed to a row or an OK that starts with `0xFE`).
pub fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&EOF_HEADER) && payload.len() < 9
}

/// Appends an ERR packet payload. `sql_state` must be 5 bytes; pass `None` before the client
/// has negotiated `CLIENT_PROTOCOL_41` (the connection phase), where the marker is not parsed.
pub fn put_err(dst: &mut impl BufMut, code: u16, sql_state: Option<&[u8; 5]>, message: &str) {
    dst.put_u8(ERR_HEADER);
    dst.put_u16_le(code);
    if let Some(state) = sql_state {
        dst.put_u8(b'#');
        dst.put_slice(state);
    }
    dst.put_slice(message.as_bytes());
}

// === impl OkPacket ===

impl<'a> OkPacket<'a> {
    /// Parses an OK packet. `session_track` says whether `CLIENT_SESSION_TRACK` was negotiated
    /// on the connection that carried it, which decides how `info` is encoded.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] / [`ProtoError::Malformed`] for a packet that is not an OK.
    pub fn parse(payload: &'a [u8], session_track: bool) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        let header = r.u8("OK header")?;
        if header != OK_HEADER && header != EOF_HEADER {
            return Err(ProtoError::Malformed { what: "OK header" });
        }
        let affected_rows = r.lenenc_int("OK affected rows")?;
        let last_insert_id = r.lenenc_int("OK last insert id")?;
        let head = &payload[..r.position()];
        let status = StatusFlags::from_bits_retain(r.u16("OK status")?);
        let warnings = r.u16("OK warnings")?;
        let (info, session_state) = if r.is_empty() {
            (&[][..], &[][..])
        } else if !session_track {
            // The protocol docs say string<EOF>, but servers write the info length-encoded
            // either way (MariaDB 10.11 and MySQL net_send_ok use net_store_data); the
            // documented form is accepted too.
            let rest = r.rest();
            match Reader::new(rest).lenenc_str("OK info") {
                Ok(info) if lenenc_int_len(info.len() as u64) + info.len() == rest.len() => {
                    (info, &[][..])
                }
                _ => (rest, &[][..]),
            }
        } else {
            let info = r.lenenc_str("OK info")?;
            let changed = status.contains(StatusFlags::SERVER_SESSION_STATE_CHANGED);
            let state = if changed && !r.is_empty() {
                r.lenenc_str("OK session state")?
            } else {
                &[][..]
            };
            (info, state)
        };
        Ok(OkPacket {
            header,
            affected_rows,
            last_insert_id,
            status,
            warnings,
            info,
            session_state,
            head,
        })
    }

    /// The session-state items.
    pub fn state_items(&self) -> StateItems<'a> {
        StateItems {
            reader: Reader::new(self.session_state),
        }
    }

    /// True if the state block reports nothing but the session's last GTID and its
    /// transaction's state: at least one item, every item a system-variables item naming only
    /// `last_gtid`, a MySQL GTIDs item, or a transaction-info item. What a commit, a `BEGIN` or
    /// any statement that only moves the transaction along makes the server send; anything else (another variable, a
    /// state-change item, an empty block under `SERVER_SESSION_STATE_CHANGED`, an item that does
    /// not parse) says something else about the session changed.
    pub fn reports_only_routine_state(&self) -> bool {
        self.reports_only_routine_state_and(&[LAST_GTID])
    }

    /// [`reports_only_routine_state`](Self::reports_only_routine_state), with the variables
    /// whose report is routine named by `routine` (as many as the caller counts as such).
    pub fn reports_only_routine_state_and(&self, routine: &[&[u8]]) -> bool {
        self.reports_only_state(false, |name, _| {
            routine.iter().any(|r| name.eq_ignore_ascii_case(r))
        })
    }

    /// True if the state block has at least one item, and every item is a commit's GTIDs, the
    /// transaction's state, a state-change item if `change` allows it, or a system-variables
    /// item each of whose variables `variable(name, value)` accepts.
    pub fn reports_only_state(
        &self,
        change: bool,
        mut variable: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> bool {
        let mut items = self.state_items().peekable();
        items.peek().is_some()
            && items.all(|item| {
                item.is_ok_and(|item| match item.kind {
                    SESSION_TRACK_TRANSACTION_STATE
                    | SESSION_TRACK_TRANSACTION_CHARACTERISTICS
                    | SESSION_TRACK_GTIDS => true,
                    SESSION_TRACK_STATE_CHANGE => change,
                    SESSION_TRACK_SYSTEM_VARIABLES => {
                        let mut vars = item.variables().peekable();
                        vars.peek().is_some()
                            && vars.all(|var| var.is_ok_and(|(name, value)| variable(name, value)))
                    }
                    _ => false,
                })
            })
    }

    /// The transaction state the packet reports (the last, if several), undecoded flags.
    pub fn transaction_state(&self) -> Option<&'a [u8]> {
        self.transaction_item(SESSION_TRACK_TRANSACTION_STATE)
    }

    /// The transaction characteristics the packet reports (the last, if several).
    pub fn transaction_characteristics(&self) -> Option<&'a [u8]> {
        self.transaction_item(SESSION_TRACK_TRANSACTION_CHARACTERISTICS)
    }

    /// The text of the last item of `kind`, a length-encoded string inside the item; an item
    /// that does not hold one reads as empty (no state is ever empty).
    fn transaction_item(&self, kind: u8) -> Option<&'a [u8]> {
        self.state_items()
            .flatten()
            .filter(|item| item.kind == kind)
            .last()
            .map(|item| {
                let mut r = Reader::new(item.data);
                match r.lenenc_str("transaction info") {
                    Ok(text) if r.is_empty() => text,
                    _ => &[],
                }
            })
    }

    /// True if the packet (as parsed from a leg with session tracking) must be rebuilt before a
    /// client with `filter` may see it.
    pub fn needs_filtering(&self, filter: TrackingFilter) -> bool {
        if !filter.client_tracks {
            // Without tracking there is no state block (nor the flag announcing one).
            return self
                .status
                .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED);
        }
        self.state_items()
            .any(|item| item.is_ok_and(|item| item.dropped_by(filter) != Kept::All))
    }

    /// Appends the payload a client with `filter` should see: the same packet with the
    /// tracking data it did not ask for removed, laid out as the server would have laid it out
    /// had that tracking never been on (the info stays length-encoded: servers write it so
    /// with or without `CLIENT_SESSION_TRACK`). An item whose variable list does not parse is
    /// kept whole; a state block that breaks part-way is cut before the first item that does
    /// not parse, since where that item ends is unknown.
    pub fn write_filtered(&self, filter: TrackingFilter, dst: &mut impl BufMut) {
        dst.put_slice(self.head);
        let kept_len: usize = if filter.client_tracks {
            self.state_items()
                .map(|item| item.map_or(0, |item| item.filtered_len(filter)))
                .sum()
        } else {
            0
        };
        let mut status = self.status;
        status.set(StatusFlags::SERVER_SESSION_STATE_CHANGED, kept_len > 0);
        dst.put_u16_le(status.bits());
        dst.put_u16_le(self.warnings);
        if kept_len == 0 {
            if !self.info.is_empty() {
                put_lenenc_str(dst, self.info);
            }
            return;
        }
        put_lenenc_str(dst, self.info);
        put_lenenc_int(dst, kept_len as u64);
        for item in self.state_items().flatten() {
            item.write_filtered(filter, dst);
        }
    }
}

// === impl StateItems ===

impl<'a> Iterator for StateItems<'a> {
    type Item = Result<StateItem<'a>, ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.reader.is_empty() {
            return None;
        }
        let item = (|| {
            let kind = self.reader.u8("session state item type")?;
            let data = self.reader.lenenc_str("session state item")?;
            Ok(StateItem { kind, data })
        })();
        if item.is_err() {
            self.reader.rest(); // stop after the first broken item
        }
        Some(item)
    }
}

// === impl StateItem ===

/// How much of an item survives a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    All,
    Some,
    None,
}

impl<'a> StateItem<'a> {
    /// For a `SESSION_TRACK_SYSTEM_VARIABLES` item, its `(name, value)` pairs. MariaDB and MySQL
    /// send one pair per item, but the format allows several.
    pub fn variables(&self) -> Variables<'a> {
        Variables {
            reader: Reader::new(if self.kind == SESSION_TRACK_SYSTEM_VARIABLES {
                self.data
            } else {
                &[]
            }),
        }
    }

    fn drops_variable(name: &[u8], filter: TrackingFilter) -> bool {
        (!filter.keep_last_gtid && name.eq_ignore_ascii_case(LAST_GTID))
            || (!filter.keep_state_change_var
                && name.eq_ignore_ascii_case(SESSION_TRACK_STATE_CHANGE_VAR))
            || (!filter.keep_transaction_info_var
                && name.eq_ignore_ascii_case(SESSION_TRACK_TRANSACTION_INFO_VAR))
            || (!filter.keep_gtids_var && name.eq_ignore_ascii_case(SESSION_TRACK_GTIDS_VAR))
            || (!filter.keep_list_var
                && name.eq_ignore_ascii_case(SESSION_TRACK_SYSTEM_VARIABLES_VAR))
    }

    fn dropped_by(&self, filter: TrackingFilter) -> Kept {
        match self.kind {
            SESSION_TRACK_GTIDS if !filter.keep_gtids => Kept::None,
            SESSION_TRACK_STATE_CHANGE if !filter.keep_state_change => Kept::None,
            SESSION_TRACK_TRANSACTION_STATE if !filter.keep_transaction_state => Kept::None,
            SESSION_TRACK_TRANSACTION_CHARACTERISTICS
                if !filter.keep_transaction_characteristics =>
            {
                Kept::None
            }
            SESSION_TRACK_SYSTEM_VARIABLES => {
                let (mut kept, mut dropped) = (0, 0);
                for var in self.variables() {
                    match var {
                        Ok((name, _)) if Self::drops_variable(name, filter) => dropped += 1,
                        Ok(_) => kept += 1,
                        Err(_) => return Kept::All,
                    }
                }
                match (kept, dropped) {
                    (_, 0) => Kept::All,
                    (0, _) => Kept::None,
                    _ => Kept::Some,
                }
            }
            _ => Kept::All,
        }
    }

    /// Encoded length of what survives `filter` (type byte included).
    fn filtered_len(&self, filter: TrackingFilter) -> usize {
        let data_len = match self.dropped_by(filter) {
            Kept::None => return 0,
            Kept::All => self.data.len(),
            Kept::Some => self
                .kept_variables(filter)
                .map(|(n, v)| pair_len(n, v))
                .sum(),
        };
        1 + lenenc_int_len(data_len as u64) + data_len
    }

    fn write_filtered(&self, filter: TrackingFilter, dst: &mut impl BufMut) {
        match self.dropped_by(filter) {
            Kept::None => {}
            Kept::All => {
                dst.put_u8(self.kind);
                put_lenenc_str(dst, self.data);
            }
            Kept::Some => {
                let data_len: usize = self
                    .kept_variables(filter)
                    .map(|(n, v)| pair_len(n, v))
                    .sum();
                dst.put_u8(self.kind);
                put_lenenc_int(dst, data_len as u64);
                for (name, value) in self.kept_variables(filter) {
                    put_lenenc_str(dst, name);
                    put_lenenc_str(dst, value);
                }
            }
        }
    }

    fn kept_variables(&self, filter: TrackingFilter) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.variables()
            .flatten()
            .filter(move |(name, _)| !Self::drops_variable(name, filter))
    }
}

fn pair_len(name: &[u8], value: &[u8]) -> usize {
    lenenc_int_len(name.len() as u64)
        + name.len()
        + lenenc_int_len(value.len() as u64)
        + value.len()
}

/// The `(name, value)` pairs of a system-variables item.
#[derive(Debug, Clone)]
pub struct Variables<'a> {
    reader: Reader<'a>,
}

impl<'a> Iterator for Variables<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.reader.is_empty() {
            return None;
        }
        let pair = (|| {
            let name = self.reader.lenenc_str("tracked variable name")?;
            let value = self.reader.lenenc_str("tracked variable value")?;
            Ok((name, value))
        })();
        if pair.is_err() {
            self.reader.rest();
        }
        Some(pair)
    }
}

// === impl EofPacket ===

impl EofPacket {
    /// Parses an EOF packet.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] / [`ProtoError::Truncated`] if `payload` is not one.
    pub fn parse(payload: &[u8]) -> Result<Self, ProtoError> {
        if !is_eof(payload) {
            return Err(ProtoError::Malformed { what: "EOF packet" });
        }
        let mut r = Reader::new(&payload[1..]);
        Ok(EofPacket {
            warnings: r.u16("EOF warnings")?,
            status: StatusFlags::from_bits_retain(r.u16("EOF status")?),
        })
    }
}

// === impl ErrPacket ===

impl<'a> ErrPacket<'a> {
    /// Parses an ERR packet (in the command phase, where the SQLSTATE marker may follow).
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] / [`ProtoError::Truncated`] if `payload` is not one.
    pub fn parse(payload: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        if r.u8("ERR header")? != ERR_HEADER {
            return Err(ProtoError::Malformed { what: "ERR header" });
        }
        let code = r.u16("ERR code")?;
        let sql_state = if payload.get(3) == Some(&b'#') && payload.len() >= 9 {
            r.take(1, "ERR sqlstate marker")?;
            Some(r.take(5, "ERR sqlstate")?)
        } else {
            None
        };
        Ok(ErrPacket {
            code,
            sql_state,
            message: r.rest(),
        })
    }
}

#[cfg(test)]
mod tests;
