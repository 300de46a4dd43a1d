//! The binlog network stream as strong sync needs it: event headers, where each transaction
//! ends (the event a semisync replica must acknowledge), the GTID it belongs to, and the
//! primary's position after it. No row decoding.
//!
//! A MariaDB transaction starts with a GTID event. It ends at the next QUERY event if the GTID
//! is flagged standalone (DDL, `XA COMMIT`/`XA ROLLBACK`), otherwise at an XID event, an
//! XA_PREPARE event, or a QUERY event whose text is `COMMIT` or `ROLLBACK` (non-transactional
//! engines) — the rule MariaDB's own I/O thread uses to decide a whole group was received.

use bytes::BufMut;

use crate::gtid::MariaGtid;
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
    gtid: MariaGtid,
    standalone: bool,
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
    pub gtid: Option<MariaGtid>,
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
        let end = (header.log_pos != 0 && header.kind != HEARTBEAT_EVENT && self.file.is_some())
            .then_some(Position {
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
                    gtid: MariaGtid {
                        domain,
                        server_id: header.server_id,
                        seq_no,
                    },
                    standalone: flags2 & FL_STANDALONE != 0,
                });
            }
            XID_EVENT | XA_PREPARE_EVENT | INCIDENT_EVENT => ends_transaction = true,
            QUERY_EVENT | QUERY_COMPRESSED_EVENT => {
                ends_transaction = match self.group {
                    Some(group) if group.standalone => true,
                    _ => {
                        header.kind == QUERY_EVENT
                            && whole
                            && self.is_commit_query(event, &header)?
                    }
                };
            }
            _ => {}
        }
        if ends_transaction {
            gtid = self.group.take().map(|g| g.gtid);
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

    /// `COMMIT` or `ROLLBACK` as the whole query text of a QUERY event: it ends a transaction
    /// of a non-transactional engine.
    fn is_commit_query(&self, event: &[u8], header: &EventHeader) -> Result<bool, ProtoError> {
        let body = self.body(event, header)?;
        let mut r = Reader::new(body);
        r.take(4 + 4, "QUERY thread id and time")?;
        let db_len = usize::from(r.u8("QUERY schema length")?);
        r.take(2, "QUERY error code")?;
        let status_len = usize::from(r.u16("QUERY status length")?);
        r.take(status_len + db_len + 1, "QUERY status and schema")?;
        let query = r.rest();
        Ok(query.eq_ignore_ascii_case(b"COMMIT") || query.eq_ignore_ascii_case(b"ROLLBACK"))
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
