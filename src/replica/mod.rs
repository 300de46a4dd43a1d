//! The replica relay: once the primary accepted a replica's binlog dump, a pipe relays the
//! binlog to the replica and reads its ACKs for strong sync, knowing nothing of the session.

mod held_back;
mod pipe;

use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::GtidPosition;
use strongsync_proto::packet::Packet;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::durability::Durability;
use crate::gate::{Gate, OnEpoch};
use crate::metrics::Metrics;
use crate::primary::PrimaryStream;
use crate::stream::ClientStream;

pub(crate) use pipe::ReplicaPipe;

/// What a replica pipe needs of the proxy, and nothing more.
#[derive(Clone)]
pub(crate) struct PipeContext {
    /// Strong sync, which the pipe reports the replica's stream and ACKs to.
    pub durability: Arc<Durability>,
    /// The gate: the pipe relays nothing once its epoch is fenced or over, or this instance
    /// may not act.
    pub gate: Arc<Gate>,
    pub metrics: Arc<Metrics>,
    /// How long a write to the replica may take.
    pub write_timeout: Duration,
    /// The most bytes held back from a replica without semisync.
    pub max_held_bytes: usize,
    /// Fires at the end of the shutdown grace period: the dump stops.
    pub hard_stop: CancellationToken,
}

/// The connections a dump goes on: the replica's, with the sequence id of the next packet to
/// it, and the one to the primary, with its epoch.
pub(crate) struct DumpLegs {
    pub replica: Conn<ClientStream>,
    pub seq: u8,
    pub primary: Conn<PrimaryStream>,
    pub epoch: OnEpoch,
}

/// A dump the primary accepted: what the replica pipe starts from.
#[derive(Debug)]
pub(crate) struct AcceptedDump {
    /// The replica's `server_id` (from its dump request).
    pub server_id: u32,
    /// It negotiated semisync with the proxy.
    pub semisync: bool,
    /// The GTIDs the primary was told it has.
    pub connect_state: GtidPosition,
    /// The primary's first packet of the dump, not relayed yet.
    pub first: Packet,
}
