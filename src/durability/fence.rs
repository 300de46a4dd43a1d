//! The fence: once an operator (or a failover manager) says the primary is no longer to be
//! trusted, nothing more of its binlog reaches a replica, nothing more is written to it and
//! nothing it committed is acknowledged.

use strongsync_proto::gtid::{Gtid, GtidSet};

/// The fence, as strong sync keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fence {
    /// The epoch of the primary it fenced.
    pub epoch: u64,
}

/// The fence in force, if any, and the tail of every fence so far.
///
/// Parked commits the quorum does not hold are answered with an error naming their GTIDs; they
/// and every relayed transaction the quorum does not hold make up the *tail*: committed on the
/// fenced primary, never acknowledged, errant on any replica that gets them after a failover.
/// The fence lifts only when strongsync follows a new primary in a new
/// [epoch](super::Epoch), whose binlog positions start strong sync's position space again; the
/// tail outlives it (a follow lifts the fence, not what the old primary holds).
#[derive(Debug, Default)]
pub(super) struct Fencing {
    up: Option<Fence>,
    tail: GtidSet,
}

// === impl Fencing ===

impl Fencing {
    /// The fence in force, if any.
    pub(super) fn up(&self) -> Option<Fence> {
        self.up
    }

    /// Raises the fence over the primary of `epoch` unless one is up. Returns the fence in
    /// force and whether this raised it.
    pub(super) fn raise(&mut self, epoch: u64) -> (Fence, bool) {
        if let Some(fence) = self.up {
            return (fence, false);
        }
        let fence = Fence { epoch };
        self.up = Some(fence);
        (fence, true)
    }

    /// A new epoch opened: the fence lifts, the tail stays.
    pub(super) fn lift(&mut self) {
        self.up = None;
    }

    /// The tail of every fence so far.
    pub(super) fn tail(&self) -> &GtidSet {
        &self.tail
    }

    /// `gtids`, committed on a fenced primary and not held by the quorum, join the tail.
    pub(super) fn join_tail(&mut self, gtids: impl IntoIterator<Item = Gtid>) {
        for gtid in gtids {
            self.tail.insert(gtid);
        }
    }

    /// Takes back a previous run's fence and tail; returns whether the fence is up.
    pub(super) fn restore(&mut self, fence: Option<Fence>, tail: &GtidSet) -> bool {
        self.tail.extend(tail);
        if fence.is_some() {
            self.up = fence;
        }
        self.up.is_some()
    }
}
