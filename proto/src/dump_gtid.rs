//! MySQL's `COM_BINLOG_DUMP_GTID`: a replica's request for the binlog, with the GTID set it already
//! has — what the replica holds when its dump starts, which strong sync credits it with, source by
//! source.

use crate::gtid::{GtidPosition, SourceId};
use crate::wire::Reader;
use crate::ProtoError;

/// Bytes of a plain source with no interval: UUID and interval count.
const MIN_SOURCE_LEN: u64 = 16 + 8;
/// Bytes of an interval.
const INTERVAL_LEN: u64 = 16;

/// Most intervals of one request credited to the replica: any logged-in account can send one,
/// and past this the rest are left out (the replica is then credited with less than it said,
/// and with the rest once it ACKs them). A real replica's set has a few per source.
pub const MAX_PEER_INTERVALS: usize = 65_536;

/// What a `COM_BINLOG_DUMP_GTID` asks for.
///
/// `u8 0x1E | u16 flags | u32 server_id | u32 name_len | name | u64 position | u32 data_len |
/// data`, where `data` is the set: `u64 n_sids` (the top byte says the format: 0 plain, 1
/// tagged, whose count is then in bits 8..56) and per source `uuid[16] | [varlen tag_len | tag]
/// | u64 n_intervals | (u64 start, u64 end exclusive) …`. The counts come from the peer, so each
/// is held to what the bytes that remain could carry before anything is read for it
/// (mysql_common's reader, the oracle of the tests, reserves memory from them as sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpGtid {
    /// The replica's server id.
    pub server_id: u32,
    /// The GTIDs the replica has, as far as the table of sources takes them (a source it
    /// cannot name is left out, and intervals past [`MAX_PEER_INTERVALS`]: the replica then
    /// holds less than it said, never more).
    pub has: GtidPosition,
}

impl DumpGtid {
    /// Reads a `COM_BINLOG_DUMP_GTID` payload (command byte included).
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] or [`ProtoError::Truncated`] if it is not one.
    pub fn parse(payload: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        if r.u8("dump command")? != crate::command::COM_BINLOG_DUMP_GTID {
            return Err(ProtoError::Malformed {
                what: "COM_BINLOG_DUMP_GTID command",
            });
        }
        r.u16("dump flags")?;
        let server_id = r.u32("dump server id")?;
        let name_len = r.u32("dump file name length")? as usize;
        r.take(name_len, "dump file name")?;
        r.u64("dump position")?;
        let data_len = r.u32("dump GTID set length")? as usize;
        let data = r.take(data_len, "dump GTID set")?;
        Ok(DumpGtid {
            server_id,
            has: gtid_set(data)?,
        })
    }
}

/// The GTID set a dump request carries.
fn gtid_set(data: &[u8]) -> Result<GtidPosition, ProtoError> {
    let mut has = GtidPosition::default();
    if data.is_empty() {
        return Ok(has);
    }
    let mut r = Reader::new(data);
    let mut credited = 0usize;
    let header = r.u64("GTID set source count")?;
    let tagged = match header >> 56 {
        0 => false,
        1 => true,
        _ => {
            return Err(ProtoError::Unsupported {
                what: "GTID set format",
            })
        }
    };
    let sources = if tagged {
        (header & 0x00ff_ffff_ffff_ff00) >> 8
    } else {
        header & 0x00ff_ffff_ffff_ffff
    };
    if sources > r.remaining() as u64 / MIN_SOURCE_LEN {
        return Err(ProtoError::Malformed {
            what: "GTID set source count",
        });
    }
    for _ in 0..sources {
        let uuid: [u8; 16] = r.take(16, "GTID set UUID")?.try_into().unwrap_or([0; 16]);
        let tag = if tagged { tag(&mut r)? } else { None };
        let intervals = r.u64("GTID set interval count")?;
        if intervals > r.remaining() as u64 / INTERVAL_LEN {
            return Err(ProtoError::Malformed {
                what: "GTID set interval count",
            });
        }
        // Any logged-in account can send this: its sources take only a peer's share of the
        // table (one it cannot name is left out, so the replica is credited with less).
        let source = SourceId::intern_from_peer(uuid, tag.as_deref());
        for _ in 0..intervals {
            let start = r.u64("GTID interval start")?;
            let end = r.u64("GTID interval end")?;
            if start == 0 || end <= start {
                return Err(ProtoError::Malformed {
                    what: "GTID interval",
                });
            }
            if let Some(source) = source.filter(|_| credited < MAX_PEER_INTERVALS) {
                has.add_interval(source, start, end - 1);
                credited += 1;
            }
        }
    }
    if !r.is_empty() {
        return Err(ProtoError::Malformed {
            what: "GTID set length",
        });
    }
    Ok(has)
}

/// A tagged source's tag (none if its length is 0), its length in the serialization library's
/// variable-length form: as many extra bytes as the first byte has trailing one bits.
fn tag(r: &mut Reader<'_>) -> Result<Option<String>, ProtoError> {
    let first = r.u8("GTID tag length")?;
    let extra = first.trailing_ones() as usize;
    let len = if extra == 8 {
        r.u64("GTID tag length")?
    } else {
        let mut value = u64::from(first) >> (extra + 1);
        for (i, byte) in r.take(extra, "GTID tag length")?.iter().enumerate() {
            value |= u64::from(*byte) << (8 * i + 7 - extra);
        }
        value
    };
    if len == 0 {
        return Ok(None);
    }
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= crate::gtid::MAX_TAG_LEN)
        .ok_or(ProtoError::Malformed {
            what: "GTID tag length",
        })?;
    let text = r.take(len, "GTID tag")?;
    String::from_utf8(text.to_vec())
        .map(Some)
        .map_err(|_| ProtoError::Malformed { what: "GTID tag" })
}

#[cfg(test)]
mod tests;
