//! A client that wants to be a replica: the semisync negotiation, which the proxy answers
//! itself (the proxy, not the primary, is the replica's semisync master), and its binlog dump
//! request. The connection becomes a replica only once the primary has accepted the dump —
//! its first event came back — and then leaves the session for a [`ReplicaPipe`]. Until then
//! nothing it says counts: a dump the primary refuses (no `REPLICATION SLAVE`, a connect state
//! the primary's binlog does not have, …) leaves a log line and a counter, and the connection
//! goes on as an ordinary client.
//!
//! [`ReplicaPipe`]: super::pipe::ReplicaPipe

use strongsync_proto::capabilities::MariadbCapabilities;
use strongsync_proto::command::{COM_BINLOG_DUMP, COM_QUERY};
use strongsync_proto::packet::Packet;
use strongsync_proto::resultset::{self, Layout};
use strongsync_proto::semisync::Negotiation;
use tracing::{debug, info};

use super::session::{queue_client_error, Phase, Session};
use crate::durability::GtidPosition;
use crate::error::{Error, ReplicaSetupError};

/// What the primary will start a dump from and whether it would add a semisync header of its
/// own, read on the replica's connection just before its dump: the replica may have set them
/// any way SQL allows, not only with the statements the proxy recognises.
const DUMP_PROBE: &str =
    "SELECT @slave_connect_state, @rpl_semi_sync_slave, @rpl_semi_sync_replica";

/// A replica's setup, as far as the proxy cares.
#[derive(Debug, Default)]
pub(super) struct ReplicaSetup {
    /// It sent `SET @rpl_semi_sync_slave = 1`: it will acknowledge flagged events.
    pub semisync: bool,
}

/// A dump the primary accepted: what the replica pipe starts from.
#[derive(Debug)]
pub(super) struct AcceptedDump {
    /// The replica's `server_id` (from its dump request).
    pub server_id: u32,
    /// It negotiated semisync with the proxy.
    pub semisync: bool,
    /// The GTIDs the primary was told it has.
    pub connect_state: GtidPosition,
    /// The primary's first packet of the dump, not relayed yet.
    pub first: Packet,
}

// === impl ReplicaSetup ===

impl ReplicaSetup {
    /// Recognises a semisync negotiation statement (to answer, not forward).
    pub(super) fn negotiation(&mut self, payload: &[u8]) -> Option<Negotiation> {
        Negotiation::recognise(payload.strip_prefix(&[COM_QUERY])?)
    }
}

/// The replica's `server_id` in `COM_BINLOG_DUMP` (`u8 cmd | u32 pos | u16 flags | u32
/// server_id | …`) or `COM_BINLOG_DUMP_GTID` (`u8 cmd | u16 flags | u32 server_id | …`);
/// 0 if the packet is too short to say.
fn dump_server_id(payload: &[u8]) -> u32 {
    let at = if payload.first() == Some(&COM_BINLOG_DUMP) {
        7
    } else {
        3
    };
    payload
        .get(at..at + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

// === impl Session (replica setup) ===

impl Session {
    /// Answers a semisync negotiation statement as a semisync-enabled primary would.
    pub(super) async fn answer_negotiation(
        &mut self,
        negotiation: Negotiation,
    ) -> Result<Phase, Error> {
        debug!(?negotiation, "semisync negotiation answered by the proxy");
        let seq = self.client_seq.advance();
        let status = self.last_status;
        let layout = Layout {
            deprecate_eof: self.deprecate_eof(),
            extended_metadata: self
                .client_ext_caps
                .is_some_and(|c| c.contains(MariadbCapabilities::MARIADB_CLIENT_EXTENDED_METADATA)),
        };
        self.client.queue(|buf| match negotiation {
            Negotiation::ShowMasterEnabled => resultset::put_text_result(
                buf,
                seq,
                layout,
                &["Variable_name", "Value"],
                &[&[Some("rpl_semi_sync_master_enabled"), Some("ON")]],
                status,
            ),
            Negotiation::SelectMasterEnabled => resultset::put_text_result(
                buf,
                seq,
                layout,
                &["@@global.rpl_semi_sync_master_enabled"],
                &[&[Some("1")]],
                status,
            ),
            Negotiation::SelectSourceEnabled => resultset::put_text_result(
                buf,
                seq,
                layout,
                &["@@global.rpl_semi_sync_source_enabled"],
                &[&[Some("1")]],
                status,
            ),
            Negotiation::ReplicaEnabled => resultset::put_ok(buf, seq, status),
        });
        if negotiation == Negotiation::ReplicaEnabled {
            self.replica.semisync = true;
        }
        self.flush_client().await?;
        Ok(Phase::Idle)
    }

    /// Asks the primary for the binlog on the client's behalf. The connection is handed over
    /// to a replica pipe only if the primary accepts (its first event comes back); if it
    /// refuses, the client gets the primary's error and stays an ordinary client.
    pub(super) async fn request_dump(&mut self, dump: &Packet) -> Result<Phase, Error> {
        let server_id = dump_server_id(dump.payload());
        self.send_query(DUMP_PROBE);
        self.flush_primary().await?;
        let probe = self.swallow_response().await?;
        let value = |i: usize| probe.row.get(i).cloned().flatten();
        if let Some(error) = probe.error {
            return self
                .refuse_dump(server_id, ReplicaSetupError::Probe(error))
                .await;
        }
        if value(1).or(value(2)).is_some() {
            // The primary would add a semisync header of its own that the proxy does not expect.
            return self
                .refuse_dump(server_id, ReplicaSetupError::SemisyncOnPrimary)
                .await;
        }
        let connect_state = value(0).unwrap_or_default();
        let connect_state = GtidPosition::parse(&connect_state).unwrap_or_else(|error| {
            debug!(%error, state = %String::from_utf8_lossy(&connect_state), "connect state not read: the replica is credited only with what it acknowledges");
            GtidPosition::default()
        });
        self.primary.forward_as(dump, self.primary_seq.advance());
        self.flush_primary().await?;
        let first = self.next_primary_packet().await?;
        self.primary_seq
            .check(first.seq())
            .map_err(Error::PrimaryProtocol)?;
        if first.first_byte() == Some(0x00) {
            return Ok(Phase::Dumping(AcceptedDump {
                server_id,
                semisync: self.replica.semisync,
                connect_state,
                first,
            }));
        }
        // ERR (or an EOF, a dump that ended before its first event): passed on as it is.
        let seq = self.client_seq.advance();
        self.client.forward_as(&first, seq);
        self.flush_client().await?;
        let said = strongsync_proto::ok::ErrPacket::parse(first.payload())
            .map(|err| format!("{} {}", err.code, String::from_utf8_lossy(err.message)))
            .unwrap_or_else(|_| "the dump ended at once".into());
        self.shared.metrics.replica_dumps_refused.inc();
        info!(server_id, primary_said = %said, "binlog dump refused by the primary: the connection does not count as a replica");
        Ok(Phase::Idle)
    }

    /// Answers a dump request the proxy refuses itself, with the error saying why.
    async fn refuse_dump(
        &mut self,
        server_id: u32,
        why: ReplicaSetupError,
    ) -> Result<Phase, Error> {
        self.shared.metrics.replica_dumps_refused.inc();
        info!(server_id, %why, "binlog dump refused: the connection does not count as a replica");
        let seq = self.client_seq.advance();
        queue_client_error(
            &mut self.client,
            seq,
            self.logged_in,
            &Error::ReplicaSetup(why),
        );
        self.flush_client().await?;
        Ok(Phase::Idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_the_semisync_negotiation_sent_as_a_query() {
        let mut setup = ReplicaSetup::default();
        assert_eq!(
            setup.negotiation(b"\x03SET @rpl_semi_sync_slave= 1"),
            Some(Negotiation::ReplicaEnabled)
        );
        assert_eq!(
            setup.negotiation(b"\x16SET @rpl_semi_sync_slave= 1"),
            None,
            "only COM_QUERY"
        );
        assert_eq!(
            setup.negotiation(b"\x03SET @slave_connect_state='0-1-7'"),
            None
        );
    }

    #[test]
    fn finds_the_server_id_in_either_dump_request() {
        // COM_BINLOG_DUMP: pos 4, flags 2, server id 2 (captured from MariaDB 10.11's I/O thread).
        assert_eq!(dump_server_id(&[0x12, 4, 0, 0, 0, 2, 0, 2, 0, 0, 0]), 2);
        // COM_BINLOG_DUMP_GTID: flags, server id 7.
        assert_eq!(dump_server_id(&[0x1e, 0, 0, 7, 0, 0, 0]), 7);
        assert_eq!(dump_server_id(&[0x12, 4, 0]), 0, "too short to say");
    }
}
