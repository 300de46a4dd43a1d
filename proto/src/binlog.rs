//! The binlog network stream as strong sync needs it: event headers, where each transaction ends
//! (the event a semisync replica must ACK), the GTID it belongs to, and the primary's
//! position after it.

use bytes::BufMut;
use mysql_common::binlog::events::{FormatDescriptionEvent, GtidEvent};
use mysql_common::binlog::{consts::BinlogVersion, BinlogCtx};
use mysql_common::io::ParseBuf;
use mysql_common::proto::MyDeserialize;

use crate::gtid::{Gtid, SourceId};
use crate::position::{file_seq, Position};
use crate::wire::Reader;
use crate::ProtoError;

/// Bytes of the common event header.
pub const EVENT_HEADER_LEN: usize = 19;
/// Bytes of the CRC32 checksum that ends each event when `binlog_checksum=CRC32`.
pub const CHECKSUM_LEN: usize = 4;

/// QUERY_EVENT.
pub const QUERY_EVENT: u8 = 2;
/// ROTATE_EVENT.
pub const ROTATE_EVENT: u8 = 4;
/// FORMAT_DESCRIPTION_EVENT.
pub const FORMAT_DESCRIPTION_EVENT: u8 = 15;
/// XID_EVENT.
pub const XID_EVENT: u8 = 16;
/// INCIDENT_EVENT.
pub const INCIDENT_EVENT: u8 = 26;
/// HEARTBEAT_LOG_EVENT.
pub const HEARTBEAT_EVENT: u8 = 27;
/// XA_PREPARE_LOG_EVENT.
pub const XA_PREPARE_EVENT: u8 = 38;
/// MySQL GTID_LOG_EVENT.
pub const MYSQL_GTID_EVENT: u8 = 33;
/// MySQL ANONYMOUS_GTID_LOG_EVENT (`gtid_mode = OFF`).
pub const MYSQL_ANONYMOUS_GTID_EVENT: u8 = 34;
/// MySQL TRANSACTION_PAYLOAD_EVENT: a transaction compressed whole
/// (`binlog_transaction_compression = ON`).
pub const TRANSACTION_PAYLOAD_EVENT: u8 = 40;
/// MySQL HEARTBEAT_LOG_EVENT_V2 (8.0.26 on).
pub const HEARTBEAT_V2_EVENT: u8 = 41;
/// MySQL GTID_TAGGED_LOG_EVENT (8.4 on).
pub const MYSQL_TAGGED_GTID_EVENT: u8 = 42;
/// MariaDB GTID_EVENT.
pub const GTID_EVENT: u8 = 162;
/// MariaDB QUERY_COMPRESSED_EVENT.
pub const QUERY_COMPRESSED_EVENT: u8 = 165;

/// Event header flag: made up by the server for the dump (fake ROTATE, GTID_LIST).
pub const LOG_EVENT_ARTIFICIAL_F: u16 = 0x0020;
/// GTID event `flags2`: the transaction is a single statement (no XID at its end).
const FL_STANDALONE: u8 = 0x01;

/// The common header of every binlog event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHeader {
    /// Seconds since the epoch (0 for made-up events).
    pub timestamp: u32,
    /// Event type.
    pub kind: u8,
    /// Server that wrote the event.
    pub server_id: u32,
    /// Size of the whole event, header and checksum included.
    pub event_size: u32,
    /// Position of the next event in the file (0 for some made-up events).
    pub log_pos: u32,
    /// Event flags.
    pub flags: u16,
}

/// Follows one dump stream: the current binlog file, whether events carry checksums, and the
/// transaction in progress.
///
/// No row decoding.
///
/// A MariaDB transaction starts with a GTID event. It ends at the next QUERY event if the GTID is
/// flagged standalone (DDL, `XA COMMIT`/`XA ROLLBACK`), otherwise at an XID event, an XA_PREPARE
/// event, or a QUERY event whose text is `COMMIT` or `ROLLBACK` (non-transactional engines) — the
/// rule MariaDB's own I/O thread uses to decide a whole group was received.
///
/// A MySQL transaction starts with a GTID event (tagged from 8.4, anonymous without GTIDs) that
/// says how long the whole transaction is (8.0.2 on): it ends at the event that ends there,
/// whatever it is (XID, QUERY `COMMIT`, a DDL's QUERY, XA_PREPARE, `XA COMMIT`, a
/// TRANSACTION_PAYLOAD holding a compressed transaction). Without a length, MySQL's own boundary
/// rule applies: a QUERY that is not `BEGIN` or `XA START` ends a transaction that did not begin
/// with one, and XID, XA_PREPARE and a QUERY `COMMIT`, `ROLLBACK`, `XA COMMIT` or `XA ROLLBACK` end
/// one that did.
#[derive(Debug, Clone, Default)]
pub struct StreamTracker {
    file: Option<Box<[u8]>>,
    file_seq: u64,
    /// Offset in `file` the stream has reached.
    offset: u64,
    /// Server id of the primary itself (from the FORMAT_DESCRIPTION_EVENT it wrote).
    server_id: Option<u32>,
    checksum: Option<bool>,
    group: Option<OpenGroup>,
}

#[derive(Debug, Clone, Copy)]
struct OpenGroup {
    /// None for a MySQL anonymous transaction, or one whose source the table of sources
    /// could not take.
    gtid: Option<Gtid>,
    /// MariaDB: one statement, no XID.
    standalone: bool,
    /// MySQL: the offset the transaction ends at, from its length.
    ends_at: Option<u64>,
    /// MySQL without a length: a `BEGIN` or `XA START` opened it.
    begun: bool,
    mysql: bool,
}

/// What one event tells the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSeen {
    /// The event's header.
    pub header: EventHeader,
    /// Where the primary's binlog stands after this event, if the event says (made-up events
    /// with `log_pos` 0 and heartbeats do not move it).
    pub end: Option<Position>,
    /// True if the event ends a transaction: the one a semisync replica is asked to ACK.
    pub ends_transaction: bool,
    /// The GTID of the transaction this event ends, if it started with a GTID event.
    pub gtid: Option<Gtid>,
}

// === impl EventHeader ===

impl EventHeader {
    /// Parses the header at the start of `event`.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] if fewer than 19 bytes; [`ProtoError::Malformed`] if the size
    /// is smaller than the header.
    pub fn parse(event: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(event);
        let header = EventHeader {
            timestamp: r.u32("event timestamp")?,
            kind: r.u8("event type")?,
            server_id: r.u32("event server id")?,
            event_size: r.u32("event size")?,
            log_pos: r.u32("event log_pos")?,
            flags: r.u16("event flags")?,
        };
        if (header.event_size as usize) < EVENT_HEADER_LEN {
            return Err(ProtoError::Malformed { what: "event size" });
        }
        Ok(header)
    }
}

// === impl StreamTracker ===

impl StreamTracker {
    /// A tracker for a stream that has not started yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The binlog file the stream is in, once a ROTATE has said.
    pub fn file(&self) -> Option<&[u8]> {
        self.file.as_deref()
    }

    /// Whether events end in a CRC32, once the FORMAT_DESCRIPTION_EVENT has said.
    pub fn checksum(&self) -> Option<bool> {
        self.checksum
    }

    /// Where the stream stands in the primary's binlog: the current file and the end of the
    /// last event that moved it.
    pub fn position(&self) -> Option<Position> {
        self.file.as_ref().map(|_| Position {
            file_seq: self.file_seq,
            offset: self.offset,
        })
    }

    /// The primary's own server id, once its FORMAT_DESCRIPTION_EVENT has been seen.
    pub fn server_id(&self) -> Option<u32> {
        self.server_id
    }

    /// Takes note of one event. `event` is the event as sent (after the stream's `00` byte);
    /// for an event spread over several packets, its first packet is enough.
    ///
    /// # Errors
    /// A [`ProtoError`] for an event whose header or a body the tracker needs is malformed.
    pub fn on_event(&mut self, event: &[u8]) -> Result<EventSeen, ProtoError> {
        let header = EventHeader::parse(event)?;
        let whole = event.len() >= header.event_size as usize;
        // Where the event ends, in the file it belongs to (a ROTATE ends the file it is in).
        let heartbeat = matches!(header.kind, HEARTBEAT_EVENT | HEARTBEAT_V2_EVENT);
        let end = (header.log_pos != 0 && !heartbeat && self.file.is_some()).then_some(Position {
            file_seq: self.file_seq,
            offset: u64::from(header.log_pos),
        });
        let mut ends_transaction = false;
        let mut gtid = None;
        match header.kind {
            ROTATE_EVENT => self.on_rotate(event, &header)?,
            // The FDE says which algorithm the stream uses; its own CRC32 says it just as well,
            // whatever the layout of the version-dependent fields before it.
            FORMAT_DESCRIPTION_EVENT if whole => {
                self.checksum = Some(has_valid_checksum(&event[..header.event_size as usize]));
                self.server_id = Some(header.server_id);
            }
            GTID_EVENT => {
                let mut r = Reader::new(&event[EVENT_HEADER_LEN..]);
                let seq_no = r.u64("GTID seq_no")?;
                let domain = r.u32("GTID domain")?;
                let flags2 = r.u8("GTID flags")?;
                self.group = Some(OpenGroup {
                    gtid: Some(Gtid::maria(domain, header.server_id, seq_no)),
                    standalone: flags2 & FL_STANDALONE != 0,
                    ends_at: None,
                    begun: false,
                    mysql: false,
                });
            }
            MYSQL_GTID_EVENT | MYSQL_ANONYMOUS_GTID_EVENT | MYSQL_TAGGED_GTID_EVENT => {
                self.group = Some(self.mysql_group(event, &header)?);
            }
            XID_EVENT | XA_PREPARE_EVENT | INCIDENT_EVENT | TRANSACTION_PAYLOAD_EVENT => {
                ends_transaction = true;
            }
            QUERY_EVENT | QUERY_COMPRESSED_EVENT => {
                ends_transaction = match self.group {
                    Some(group) if group.standalone => true,
                    Some(group) if group.mysql && whole => {
                        let query = self.query_text(event, &header)?;
                        if !group.begun && opens_transaction(query) {
                            if let Some(open) = &mut self.group {
                                open.begun = true;
                            }
                            false
                        } else {
                            !group.begun || ends_mysql_transaction(query)
                        }
                    }
                    _ => {
                        header.kind == QUERY_EVENT
                            && whole
                            && is_commit(self.query_text(event, &header)?)
                    }
                };
            }
            _ => {}
        }
        // A MySQL transaction whose length is known ends exactly where that says, and only
        // there.
        if let (Some(at), Some(end)) = (self.group.and_then(|g| g.ends_at), end) {
            ends_transaction = end.offset == at;
        }
        if ends_transaction {
            gtid = self.group.take().and_then(|g| g.gtid);
        }
        if let Some(end) = end.filter(|_| header.kind != ROTATE_EVENT) {
            self.offset = end.offset;
        }
        Ok(EventSeen {
            header,
            end,
            ends_transaction,
            gtid,
        })
    }

    /// ROTATE: `u64 position | file name` (+ CRC32). The fake ROTATE that starts a dump comes
    /// before the FORMAT_DESCRIPTION_EVENT says whether there are checksums, so a trailing
    /// CRC32 is recognised by checking it.
    fn on_rotate(&mut self, event: &[u8], header: &EventHeader) -> Result<(), ProtoError> {
        let body = self.body(event, header)?;
        let mut r = Reader::new(body);
        let offset = r.u64("ROTATE position")?;
        let name = r.rest();
        self.file_seq = file_seq(name)?;
        self.file = Some(name.into());
        self.offset = offset;
        Ok(())
    }

    /// A MySQL GTID event (plain, tagged or anonymous) opens a transaction, and says how long
    /// it is.
    fn mysql_group(&self, event: &[u8], header: &EventHeader) -> Result<OpenGroup, ProtoError> {
        let body = self.body(event, header)?;
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
        let ctx = BinlogCtx::new(header.event_size as usize, &fde, header.kind);
        let parsed = GtidEvent::deserialize(ctx, &mut ParseBuf(body)).map_err(|_| {
            ProtoError::Malformed {
                what: "MySQL GTID event",
            }
        })?;
        let gtid = (header.kind != MYSQL_ANONYMOUS_GTID_EVENT)
            .then(|| {
                let tag = parsed.tag().map(|t| t.as_str());
                SourceId::intern(parsed.sid(), tag).map(|source| Gtid::mysql(source, parsed.gno()))
            })
            .flatten();
        let start = u64::from(header.log_pos).checked_sub(u64::from(header.event_size));
        let ends_at = start
            .filter(|_| parsed.tx_length() > 0 && header.log_pos != 0)
            .map(|start| start + parsed.tx_length());
        Ok(OpenGroup {
            gtid,
            standalone: false,
            ends_at,
            begun: false,
            mysql: true,
        })
    }

    /// The query text of a QUERY event.
    fn query_text<'a>(
        &self,
        event: &'a [u8],
        header: &EventHeader,
    ) -> Result<&'a [u8], ProtoError> {
        let body = self.body(event, header)?;
        let mut r = Reader::new(body);
        r.take(4 + 4, "QUERY thread id and time")?;
        let db_len = usize::from(r.u8("QUERY schema length")?);
        r.take(2, "QUERY error code")?;
        let status_len = usize::from(r.u16("QUERY status length")?);
        r.take(status_len + db_len + 1, "QUERY status and schema")?;
        Ok(r.rest())
    }

    /// The event body: after the header, before the checksum (if any).
    fn body<'a>(&self, event: &'a [u8], header: &EventHeader) -> Result<&'a [u8], ProtoError> {
        let size = header.event_size as usize;
        let event = event.get(..size).ok_or(ProtoError::Truncated {
            what: "binlog event",
        })?;
        let crc = match self.checksum {
            Some(on) => on,
            None => has_valid_checksum(event),
        };
        let end = if crc { size - CHECKSUM_LEN } else { size };
        event
            .get(EVENT_HEADER_LEN..end)
            .ok_or(ProtoError::Truncated {
                what: "binlog event body",
            })
    }
}

/// Whether an event of this type starts a transaction: a GTID event of either flavour (MySQL's
/// plain, tagged or anonymous).
pub fn starts_transaction(kind: u8) -> bool {
    matches!(
        kind,
        GTID_EVENT | MYSQL_GTID_EVENT | MYSQL_ANONYMOUS_GTID_EVENT | MYSQL_TAGGED_GTID_EVENT
    )
}

/// `COMMIT` or `ROLLBACK` as the whole query text: it ends a transaction of a
/// non-transactional engine.
fn is_commit(query: &[u8]) -> bool {
    query.eq_ignore_ascii_case(b"COMMIT") || query.eq_ignore_ascii_case(b"ROLLBACK")
}

/// A MySQL query that starts a transaction's body rather than being all of it.
fn opens_transaction(query: &[u8]) -> bool {
    query.eq_ignore_ascii_case(b"BEGIN") || starts_with_words(query, b"XA START")
}

/// A MySQL query that ends a transaction begun with `BEGIN` or `XA START`.
fn ends_mysql_transaction(query: &[u8]) -> bool {
    is_commit(query)
        || starts_with_words(query, b"XA COMMIT")
        || starts_with_words(query, b"XA ROLLBACK")
}

fn starts_with_words(query: &[u8], words: &[u8]) -> bool {
    query
        .get(..words.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(words))
}

/// True if the last four bytes of `event` are the CRC32 of the rest.
fn has_valid_checksum(event: &[u8]) -> bool {
    event.len() >= EVENT_HEADER_LEN + CHECKSUM_LEN && {
        let (data, crc) = event.split_at(event.len() - CHECKSUM_LEN);
        crc32fast::hash(data).to_le_bytes() == crc
    }
}

/// Appends a HEARTBEAT_LOG_EVENT as a primary would send it to a replica that has received
/// everything up to `log_pos` in `file`: the replica accepts it only with its current file
/// name and a position not behind its own.
pub fn put_heartbeat(
    dst: &mut impl BufMut,
    server_id: u32,
    file: &[u8],
    log_pos: u32,
    checksum: bool,
) {
    let size = EVENT_HEADER_LEN + file.len() + if checksum { CHECKSUM_LEN } else { 0 };
    let mut event = Vec::with_capacity(size);
    event.put_u32_le(0);
    event.put_u8(HEARTBEAT_EVENT);
    event.put_u32_le(server_id);
    event.put_u32_le(size as u32);
    event.put_u32_le(log_pos);
    event.put_u16_le(0);
    event.put_slice(file);
    if checksum {
        let crc = crc32fast::hash(&event);
        event.put_u32_le(crc);
    }
    dst.put_slice(&event);
}

#[cfg(test)]
mod tests;
