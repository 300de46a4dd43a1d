//! The fence: once an operator (or a failover manager) says the primary is no longer to be
//! trusted, nothing more of its binlog reaches a replica, nothing more is written to it and
//! nothing it committed is acknowledged. Parked commits the quorum does not hold are answered with an error naming
//! their GTIDs; they and every relayed transaction the quorum does not hold make up the
//! *tail*: committed on the fenced primary, never acknowledged, errant on any replica that
//! gets them after a failover. The fence lifts only when strongsync follows a new primary in a
//! new [epoch](super::Epoch), whose binlog positions start strong sync's position space again.

use std::sync::Arc;
use std::task::Waker;

use strongsync_proto::gtid::Gtid;

use super::epoch::Epoch;
use super::index::GtidIndex;
use super::inner::{Inner, Plan};
use super::lag::LagBook;

/// The fence, as strong sync keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fence {
    /// The epoch of the primary it fenced.
    pub epoch: u64,
}

// === impl Inner (fence) ===

impl Inner {
    /// Raises the fence over the primary of `epoch` unless one is up: its pipes stop, and
    /// parked commits look again. Returns the fence in force and whether this raised it.
    pub(super) fn raise_fence(&mut self, epoch: u64, woken: &mut Vec<Waker>) -> (Fence, bool) {
        if let Some(fence) = self.fence {
            return (fence, false);
        }
        let fence = Fence { epoch };
        self.fence = Some(fence);
        self.epoch.mark_fenced();
        self.waiters.all(woken);
        self.changed();
        (fence, true)
    }

    /// The fence's drain is over: what was relayed and the quorum does not hold joins the tail.
    pub(super) fn drained(&mut self) {
        for gtid in self.unheld_relayed() {
            self.tail.insert(gtid);
        }
        self.changed();
    }

    /// Opens epoch `number` on `primary` and lifts the fence: every position known goes (the
    /// index, the replicas' acknowledged positions, the quorum position), parked commits look
    /// again (and, of the old epoch, are refused). Returns the old epoch.
    pub(super) fn open_epoch(
        &mut self,
        number: u64,
        primary: String,
        woken: &mut Vec<Waker>,
    ) -> Arc<Epoch> {
        let old = Epoch::replace(&mut self.epoch, number, primary);
        let capacity = self.config.gtid_index_capacity;
        self.index = GtidIndex::new(capacity);
        self.lag = LagBook::new(capacity);
        self.head = None;
        self.registry.forget_positions();
        self.quorum_watch.send_replace(None);
        self.fence = None;
        self.waiters.all(woken);
        self.changed();
        old
    }

    /// Relayed transactions the configured quorum does not hold.
    fn unheld_relayed(&self) -> Vec<Gtid> {
        let rule = self.config.rule();
        self.index
            .relayed()
            .filter(|gtid| !matches!(self.plan(std::slice::from_ref(*gtid), &rule), Plan::Held))
            .copied()
            .collect()
    }

    /// A commit of `gtids` meets the fence: the ones the quorum does not hold join the tail.
    pub(super) fn fenced_commit(&mut self, gtids: &[Gtid]) {
        let rule = self.config.rule();
        let unheld: Vec<Gtid> = gtids
            .iter()
            .filter(|gtid| !matches!(self.plan(std::slice::from_ref(*gtid), &rule), Plan::Held))
            .copied()
            .collect();
        for gtid in unheld {
            self.tail.insert(gtid);
        }
        self.changed();
    }
}
