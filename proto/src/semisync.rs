//! Semisync on the replica side of the proxy: the statements a replica uses to ask for it,
//! the `EF <flag>` header in front of every event, and the ACK a replica sends back.

use bytes::{BufMut, BytesMut};

use crate::packet::put_payload_parts;
use crate::wire::Reader;
use crate::ProtoError;

/// First byte of the semisync header and of an ACK.
pub const MAGIC: u8 = 0xEF;
/// Header flag: the replica must ACK this event.
pub const ACK_REQUESTED: u8 = 0x01;
/// Header flag: no ACK wanted.
pub const NO_ACK: u8 = 0x00;
/// Longest binlog file name an ACK may carry (MariaDB's FN_REFLEN).
pub const MAX_ACK_FILE_NAME: usize = 511;

/// A replica's ACK: it has the primary's binlog up to `position` in `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack<'a> {
    /// Offset in `file` (the end of the ACKed event).
    pub position: u64,
    /// Binlog file name.
    pub file: &'a [u8],
}

/// The statements a replica sends to negotiate semisync; the proxy answers them itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiation {
    /// MariaDB: `SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'` (one row means yes).
    ShowMasterEnabled,
    /// MySQL: `SELECT @@global.rpl_semi_sync_master_enabled` (before 8.0.26).
    SelectMasterEnabled,
    /// MySQL 8.0.26+: `SELECT @@global.rpl_semi_sync_source_enabled`.
    SelectSourceEnabled,
    /// `SET @rpl_semi_sync_slave = 1` (or `@rpl_semi_sync_replica`): this replica will ACK.
    ReplicaEnabled,
}

// === impl Ack ===

impl<'a> Ack<'a> {
    /// Parses an ACK: `EF | u64 position | file name` (no NUL).
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] or [`ProtoError::Truncated`] for anything else, including a
    /// missing or over-long file name or one with bytes that cannot be in a file name.
    pub fn parse(payload: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        if r.u8("semisync ACK magic")? != MAGIC {
            return Err(ProtoError::Malformed {
                what: "semisync ACK (no 0xEF magic byte)",
            });
        }
        let position = r.u64("semisync ACK position")?;
        let file = r.rest();
        if file.is_empty()
            || file.len() > MAX_ACK_FILE_NAME
            || !file.iter().all(|b| b.is_ascii_graphic())
        {
            return Err(ProtoError::Malformed {
                what: "semisync ACK file name",
            });
        }
        Ok(Ack { position, file })
    }
}

/// Appends an ACK payload.
pub fn put_ack(dst: &mut impl BufMut, position: u64, file: &[u8]) {
    dst.put_u8(MAGIC);
    dst.put_u64_le(position);
    dst.put_slice(file);
}

/// Appends a dump stream event packet for a semisync replica: `00 EF flag event`, split into
/// as many packets as it needs (the two header bytes shift packet boundaries). `event` is the
/// event without the stream's `00` byte. Returns the next sequence id.
pub fn put_event(dst: &mut BytesMut, seq: u8, flag: u8, event: &[u8]) -> u8 {
    put_payload_parts(dst, seq, &[&[0x00, MAGIC, flag], event])
}

// === impl Negotiation ===

impl Negotiation {
    /// Recognises a negotiation statement in `COM_QUERY` text (case and spacing as any client
    /// might write them).
    pub fn recognise(sql: &[u8]) -> Option<Self> {
        // Longest statement we look for, plus room for spacing.
        if sql.len() > 128 {
            return None;
        }
        let mut norm = [0u8; 128];
        let mut n = 0;
        for &b in sql.iter().filter(|b| !b.is_ascii_whitespace()) {
            norm[n] = b.to_ascii_lowercase();
            n += 1;
        }
        match norm[..n].strip_suffix(b";").unwrap_or(&norm[..n]) {
            b"showvariableslike'rpl_semi_sync_master_enabled'" => {
                Some(Negotiation::ShowMasterEnabled)
            }
            b"select@@global.rpl_semi_sync_master_enabled" => {
                Some(Negotiation::SelectMasterEnabled)
            }
            b"select@@global.rpl_semi_sync_source_enabled" => {
                Some(Negotiation::SelectSourceEnabled)
            }
            b"set@rpl_semi_sync_slave=1" | b"set@rpl_semi_sync_replica=1" => {
                Some(Negotiation::ReplicaEnabled)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::hex;
    use crate::PacketDecoder;

    #[test]
    fn captured_acks_parse_and_rebuild() {
        // From MariaDB 10.11.19: position 1935 in mysql-bin.000002, sequence id 0.
        let captured =
            hex("ef 8f 07 00 00 00 00 00 00 6d 79 73 71 6c 2d 62 69 6e 2e 30 30 30 30 30 32");
        let ack = Ack::parse(&captured).unwrap();
        assert_eq!((ack.position, ack.file), (1935, &b"mysql-bin.000002"[..]));
        let mut rebuilt = Vec::new();
        put_ack(&mut rebuilt, 1935, b"mysql-bin.000002");
        assert_eq!(rebuilt, captured);
        // What mysql_common (an independent implementation) makes of it.
        let theirs: mysql_common::packets::SemiSyncAckPacket<'_> =
            mysql_common::io::ParseBuf(&captured).parse(()).unwrap();
        assert_eq!(theirs.position(), 1935);
    }

    #[test]
    fn malformed_acks_are_errors() {
        let table: [&[u8]; 7] = [
            b"",
            b"\x01",                                       // COM_QUIT
            b"\xee\x8f\x07\x00\x00\x00\x00\x00\x00a.1",    // wrong magic
            b"\xef\x8f\x07\x00",                           // short position
            b"\xef\x8f\x07\x00\x00\x00\x00\x00\x00",       // no file name
            b"\xef\x8f\x07\x00\x00\x00\x00\x00\x00a\x00b", // NUL in the name
            &[0xEF; 9 + 512],                              // over-long name
        ];
        for payload in table {
            assert!(Ack::parse(payload).is_err(), "{payload:02x?}");
        }
    }

    #[test]
    fn events_get_the_header_and_large_ones_are_rechunked() {
        let mut out = BytesMut::new();
        let next = put_event(&mut out, 1, ACK_REQUESTED, b"\x01\x02\x03");
        assert_eq!(next, 2);
        assert_eq!(&out[..], &[6, 0, 0, 1, 0x00, 0xEF, 0x01, 1, 2, 3]);

        let event = vec![7u8; crate::packet::MAX_PACKET_PAYLOAD + 10];
        let mut out = BytesMut::new();
        let next = put_event(&mut out, 200, NO_ACK, &event);
        assert_eq!(next, 202);
        let mut d = PacketDecoder::new(64 << 20);
        let first = d.decode(&mut out).unwrap().unwrap();
        let second = d.decode(&mut out).unwrap().unwrap();
        assert_eq!(&first.payload()[..4], &[0x00, 0xEF, 0x00, 7]);
        assert_eq!(first.payload().len(), crate::packet::MAX_PACKET_PAYLOAD);
        assert_eq!(
            second.payload().len(),
            event.len() + 3 - crate::packet::MAX_PACKET_PAYLOAD
        );
        assert!(out.is_empty());
    }

    #[test]
    fn negotiation_statements_are_recognised_however_spelled() {
        let table: [(&str, Option<Negotiation>); 8] = [
            (
                "SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'",
                Some(Negotiation::ShowMasterEnabled),
            ),
            (
                "show  variables like 'RPL_SEMI_SYNC_MASTER_ENABLED';",
                Some(Negotiation::ShowMasterEnabled),
            ),
            (
                "SET @rpl_semi_sync_slave= 1",
                Some(Negotiation::ReplicaEnabled),
            ),
            (
                "SET @rpl_semi_sync_replica = 1",
                Some(Negotiation::ReplicaEnabled),
            ),
            (
                "SELECT @@global.rpl_semi_sync_source_enabled",
                Some(Negotiation::SelectSourceEnabled),
            ),
            (
                "SELECT @@global.rpl_semi_sync_master_enabled",
                Some(Negotiation::SelectMasterEnabled),
            ),
            ("SET @rpl_semi_sync_slave= 0", None),
            ("SHOW VARIABLES LIKE 'rpl_semi_sync%'", None),
        ];
        for (sql, want) in table {
            assert_eq!(Negotiation::recognise(sql.as_bytes()), want, "{sql}");
        }
    }

    proptest! {
        #[test]
        fn random_acks_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Ack::parse(&bytes);
            let _ = Negotiation::recognise(&bytes);
        }
    }
}
