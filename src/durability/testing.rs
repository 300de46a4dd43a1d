//! Helpers for strong sync's unit tests.

use std::net::SocketAddr;
use std::sync::Arc;

use strongsync_proto::gtid::GtidPosition;
use strongsync_proto::position::Position;

use super::{Durability, ReplicaHandle};

/// `offset` in binlog file 1.
pub(super) fn at(offset: u64) -> Position {
    Position {
        file_seq: 1,
        offset,
    }
}

/// Admits a replica to `d` in the epoch in force (which must be neither fenced nor over).
pub(super) fn admit_replica(
    d: &Arc<Durability>,
    server_id: u32,
    address: SocketAddr,
    semisync: bool,
    connect_state: GtidPosition,
) -> ReplicaHandle {
    d.admit(
        d.gate().epoch_number(),
        server_id,
        address,
        semisync,
        connect_state,
    )
    .expect("admitted in the epoch in force")
}
