//! The fence: once an operator (or a failover manager) says the primary is no longer to be
//! trusted, nothing more of its binlog reaches a replica and nothing it committed is
//! acknowledged. Parked commits the quorum does not hold are answered with an error naming
//! their GTIDs; they and every relayed transaction the quorum does not hold make up the
//! *tail*: committed on the fenced primary, never acknowledged, errant on any replica that
//! gets them after a failover. The fence lifts only when strongsync follows a new primary,
//! whose binlog positions start strong sync's position space again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use strongsync_proto::gtid::{Gtid, GtidSet};

use super::waiters::waking;
use super::{Durability, Inner, Plan};

/// The fence, as strong sync keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fence {
    /// The epoch of the primary it fenced.
    pub epoch: u64,
}

// === impl Durability (fence) ===

impl Durability {
    /// Whether strong sync is fenced (read by every command and every relayed batch).
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// The fence in force, if any.
    pub fn fence_state(&self) -> Option<Fence> {
        self.lock().fence
    }

    /// The tail of every fence so far: committed on a fenced primary, known to strongsync,
    /// and not held by the quorum. It outlives the fence (a follow lifts the fence, not what
    /// the old primary holds).
    pub fn tail(&self) -> GtidSet {
        self.lock().tail.clone()
    }

    /// Fences the primary of `epoch` (idempotent: a second call changes nothing and returns
    /// the fence in force). Replica pipes stop before their next write; parked commits look
    /// again and those the quorum does not hold get the fence's error. Waits up to `drain`
    /// for every replica pipe to close, then adds what was relayed and not held by the quorum
    /// to the tail. Returns the fence in force and whether this call set it.
    pub async fn fence(&self, epoch: u64, drain: Duration) -> (Fence, bool) {
        let newly = waking(|woken| {
            let mut inner = self.lock();
            if inner.fence.is_some() {
                return false;
            }
            inner.fence = Some(Fence { epoch });
            self.fenced.store(true, Ordering::SeqCst);
            inner.waiters.all(woken);
            true
        });
        if newly {
            self.fence_watch.send_replace(true);
        }
        let mut pipes = self.pipes.subscribe();
        let drained = tokio::time::timeout(drain, pipes.wait_for(|open| *open == 0))
            .await
            .is_ok();
        if !drained {
            tracing::warn!(
                open = *pipes.borrow(),
                ?drain,
                "replica pipes still open after the fence's drain; they write nothing more"
            );
        }
        let mut inner = self.lock();
        for gtid in inner.unheld_relayed() {
            inner.tail.insert(gtid);
        }
        inner.changed();
        (inner.fence.unwrap_or(Fence { epoch }), newly)
    }

    /// Lifts the fence: strongsync follows a new primary, whose binlog positions have nothing
    /// to do with the old one's. Every position known goes (the index, the replicas'
    /// acknowledged positions, the quorum position); what each replica holds by GTID, the
    /// watermark, the releases and the tail stay. Nothing is parked: the fence answered it.
    pub fn unfence(&self) {
        let mut inner = self.lock();
        let capacity = inner.config.gtid_index_capacity;
        inner.index = super::index::GtidIndex::new(capacity);
        inner.lag = super::lag::LagBook::new(capacity);
        inner.head = None;
        inner.registry.forget_positions();
        inner.quorum_watch.send_replace(None);
        inner.fence = None;
        self.fenced.store(false, Ordering::SeqCst);
        self.fence_watch.send_replace(false);
        inner.changed();
    }

    /// Fires when the fence goes up (or down).
    pub fn watch_fence(&self) -> tokio::sync::watch::Receiver<bool> {
        self.fence_watch.subscribe()
    }
}

// === impl Inner (fence) ===

impl Inner {
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
