//! What strong sync keeps across its own restart, in the state file (see [`crate::failover`]).

use strongsync_proto::gtid::{GtidPosition, GtidSet};

use super::Fence;

/// Strong sync's state worth keeping: read back at start, it keeps the failover candidates and
/// the follow check right before any replica has reconnected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persisted {
    /// The watermark: every transaction the quorum held, as a position.
    pub watermark: GtidPosition,
    /// The same, as an exact set (what the commit outcome reads).
    pub watermark_set: GtidSet,
    /// The watermark passed its bound and holds more than the quorum held.
    pub watermark_inexact: bool,
    /// Commits acknowledged to clients without it.
    pub released_without_quorum: GtidSet,
    /// Every replica known, connected or not.
    pub replicas: Vec<PersistedReplica>,
    /// The fence, if it is up.
    pub fence: Option<Fence>,
    /// The tail of every fence so far.
    pub tail: GtidSet,
}

/// A replica as last known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedReplica {
    /// Its `server_id`.
    pub server_id: u32,
    /// Where it connected from.
    pub address: String,
    /// It ACKs (semisync).
    pub semisync: bool,
    /// What it holds: its connect state and every transaction it ACKed since.
    pub held: GtidPosition,
}
