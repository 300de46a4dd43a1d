//! What a MySQL replica's dump starts from: the GTID set its `COM_BINLOG_DUMP_GTID` carries,
//! credited to it source by source (a replica asking by file and position holds nothing the
//! proxy can name); and whether the primary would add a semisync header of its own.

use strongsync_proto::command::COM_BINLOG_DUMP_GTID;
use strongsync_proto::dump_gtid::DumpGtid;
use strongsync_proto::gtid::GtidPosition;
use tracing::debug;

use super::super::{Answer, DumpSetup};
use crate::error::ReplicaSetupError;

/// Whether the replica asked the primary for semisync headers (under either name), read on its
/// connection just before its dump: it may have set them any way SQL allows.
pub(in crate::flavour) const DUMP_QUERY: &str =
    "SELECT @rpl_semi_sync_slave, @rpl_semi_sync_replica";

/// What a MySQL replica's dump request (`dump`, its payload) and the answer to [`DUMP_QUERY`]
/// say the dump will start from.
pub(in crate::flavour) fn dump_setup(
    dump: &[u8],
    answer: &Answer,
) -> Result<DumpSetup, ReplicaSetupError> {
    if let Some(error) = &answer.error {
        return Err(ReplicaSetupError::Probe {
            code: answer.code,
            error: error.clone(),
        });
    }
    if answer.value(0).or(answer.value(1)).is_some() {
        return Err(ReplicaSetupError::SemisyncOnPrimary);
    }
    let connect_state = match dump.first() {
        Some(&COM_BINLOG_DUMP_GTID) => DumpGtid::parse(dump).map(|d| d.has).unwrap_or_else(|error| {
            debug!(%error, "GTID set of the dump request not read: the replica is credited only with what it ACKs");
            GtidPosition::default()
        }),
        _ => GtidPosition::default(),
    };
    Ok(DumpSetup { connect_state })
}
