//! The session's dump phase: a client that wants to be a replica negotiates semisync with
//! strongsync (its semisync master) and asks for the binlog, which the primary may accept.

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::command::{COM_BINLOG_DUMP, COM_QUERY};
use strongsync_proto::packet::Packet;
use strongsync_proto::resultset::{self, Layout};
use strongsync_proto::semisync::Negotiation;
use tracing::{debug, info};

use crate::error::{Error, ReplicaSetupError};
use crate::flavour::{Answer, Flavour, OwnQueries};
use crate::legs::Legs;
use crate::metrics::Metrics;
use crate::replica::AcceptedDump;

/// A replica's setup, as far as the proxy cares.
///
/// The connection becomes a replica only once the primary has accepted the dump — its first event
/// came back — and then leaves the session for a [`ReplicaPipe`]. Until then nothing it says
/// counts: a dump the primary refuses (no `REPLICATION SLAVE`, a connect state the primary's binlog
/// does not have, …) leaves a log line and a counter, and the connection goes on as an ordinary
/// client.
///
/// [`ReplicaPipe`]: crate::replica::ReplicaPipe
#[derive(Debug, Default)]
pub(super) struct ReplicaSetup {
    /// It sent `SET @rpl_semi_sync_slave = 1`: it will ACK flagged events.
    semisync: bool,
}

// === impl ReplicaSetup ===

impl ReplicaSetup {
    /// Recognises a semisync negotiation statement (to answer, not forward).
    pub(super) fn negotiation(&self, payload: &[u8]) -> Option<Negotiation> {
        Negotiation::recognise(payload.strip_prefix(&[COM_QUERY])?)
    }

    /// Answers a semisync negotiation statement as a semisync-enabled primary would, laid out
    /// as the client reads result sets, its terminator carrying `status`.
    pub(super) async fn answer(
        &mut self,
        negotiation: Negotiation,
        legs: &mut Legs,
        layout: Layout,
        status: StatusFlags,
    ) -> Result<(), Error> {
        debug!(?negotiation, "semisync negotiation answered by the proxy");
        let seq = legs.next_client_seq();
        // The result a semisync-enabled primary gives, as its columns and its one row.
        let result: Option<(&[&str], &[Option<&str>])> = match negotiation {
            Negotiation::ShowMasterEnabled => Some((
                &["Variable_name", "Value"],
                &[Some("rpl_semi_sync_master_enabled"), Some("ON")],
            )),
            Negotiation::SelectMasterEnabled => {
                Some((&["@@global.rpl_semi_sync_master_enabled"], &[Some("1")]))
            }
            Negotiation::SelectSourceEnabled => {
                Some((&["@@global.rpl_semi_sync_source_enabled"], &[Some("1")]))
            }
            Negotiation::ReplicaEnabled => None,
        };
        legs.client().queue(|buf| match result {
            Some((columns, row)) => {
                resultset::put_text_result(buf, seq, layout, columns, &[row], status)
            }
            None => resultset::put_ok(buf, seq, status),
        });
        if negotiation == Negotiation::ReplicaEnabled {
            self.semisync = true;
        }
        legs.flush_client().await
    }

    /// Asks the primary for the binlog on the client's behalf. The connection is handed over
    /// to a replica pipe only if the primary accepts (its first event comes back); if it
    /// refuses, the client gets the primary's error and stays an ordinary client (`None`).
    pub(super) async fn request_dump(
        &self,
        dump: &Packet,
        legs: &mut Legs,
        flavour: Flavour,
        metrics: &Metrics,
    ) -> Result<Option<AcceptedDump>, Error> {
        let server_id = dump_server_id(dump.payload());
        metrics.session_statements_ran("replica_dump", 1);
        let [answer] = Answer::each(legs.ask(&[flavour.dump_query()]).await?);
        let setup = match flavour.dump_setup(dump.payload(), &answer) {
            Ok(setup) => setup,
            Err(why) => {
                refuse_dump(legs, server_id, why, metrics).await?;
                return Ok(None);
            }
        };
        legs.pass_to_primary(dump);
        legs.flush_primary().await?;
        let first = legs.next_primary_packet().await?;
        legs.check_primary_seq(&first)?;
        if first.first_byte() == Some(0x00) {
            return Ok(Some(AcceptedDump {
                server_id,
                semisync: self.semisync,
                connect_state: setup.connect_state,
                first,
            }));
        }
        // ERR (or an EOF, a dump that ended before its first event): passed on as it is.
        legs.pass_to_client(&first);
        legs.flush_client().await?;
        let said = strongsync_proto::ok::ErrPacket::parse(first.payload())
            .map(|err| format!("{} {}", err.code, String::from_utf8_lossy(err.message)))
            .unwrap_or_else(|_| "the dump ended at once".into());
        metrics.replica_dumps_refused.inc();
        info!(server_id, primary_said = %said, "binlog dump refused by the primary: the connection does not count as a replica");
        Ok(None)
    }
}

/// Answers a dump request the proxy refuses itself, with the error saying why.
async fn refuse_dump(
    legs: &mut Legs,
    server_id: u32,
    why: ReplicaSetupError,
    metrics: &Metrics,
) -> Result<(), Error> {
    metrics.replica_dumps_refused.inc();
    info!(server_id, %why, "binlog dump refused: the connection does not count as a replica");
    legs.queue_client_error(&Error::ReplicaSetup(why));
    legs.flush_client().await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_the_semisync_negotiation_sent_as_a_query() {
        let setup = ReplicaSetup::default();
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
