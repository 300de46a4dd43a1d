//! The replica side of a connection: its semisync negotiation and dump request, then the pipe
//! that relays the binlog to it and reads its ACKs, knowing nothing of the client session.

mod held_back;
mod pipe;
mod setup;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::durability::{Durability, OnEpoch};
use crate::metrics::Metrics;
use crate::primary::PrimaryStream;
use crate::stream::ClientStream;

pub(super) use pipe::ReplicaPipe;
pub(super) use setup::{AcceptedDump, ReplicaSetup};

/// What a replica pipe needs of the proxy, and nothing more.
pub(super) struct PipeContext {
    /// Strong sync, which the pipe reports the replica's stream and ACKs to.
    pub durability: Arc<Durability>,
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
pub(super) struct DumpLegs {
    pub replica: Conn<ClientStream>,
    pub seq: u8,
    pub primary: Conn<PrimaryStream>,
    pub epoch: OnEpoch,
}
