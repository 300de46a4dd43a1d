//! The fence: once an operator (or a failover manager) says the primary is no longer to be
//! trusted, nothing more of its binlog reaches a replica, nothing more is written to it and
//! nothing it committed is acknowledged. Parked commits the quorum does not hold are answered with an error naming
//! their GTIDs; they and every relayed transaction the quorum does not hold make up the
//! *tail*: committed on the fenced primary, never acknowledged, errant on any replica that
//! gets them after a failover. The fence lifts only when strongsync follows a new primary in a
//! new [epoch](super::Epoch), whose binlog positions start strong sync's position space again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use strongsync_proto::gtid::{Gtid, GtidSet};

use tracing::warn;

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

    /// Raises the fence over the primary of the epoch in force, `epoch` (idempotent: a second
    /// call changes nothing and returns the fence in force). The epoch's replica pipes stop
    /// before their next write; parked commits look again and those the quorum does not hold
    /// get the fence's error; commands are refused (see [`Durability::pass`]). Returns the
    /// fence in force and whether this call raised it. [`drain_fence`](Self::drain_fence)
    /// then waits for what was under way.
    pub fn raise_fence(&self, epoch: u64) -> (Fence, bool) {
        waking(|woken| {
            let mut inner = self.lock();
            if let Some(fence) = inner.fence {
                return (fence, false);
            }
            let fence = Fence { epoch };
            inner.fence = Some(fence);
            self.fenced.store(true, Ordering::SeqCst);
            inner.epoch.mark_fenced();
            inner.waiters.all(woken);
            inner.changed();
            (fence, true)
        })
    }

    /// Waits up to `drain` for every replica pipe to close and (with `writes`) for every
    /// command under way to the primary to be written, then adds what was relayed and not held
    /// by the quorum to the tail. Returns false if something was still open when the drain
    /// ran out (it writes nothing more, whether or not it closed in time).
    pub async fn drain_fence(&self, drain: Duration, writes: bool) -> bool {
        let deadline = tokio::time::Instant::now() + drain;
        let mut pipes = self.pipes.subscribe();
        let closed = tokio::time::timeout_at(deadline, pipes.wait_for(|open| *open == 0))
            .await
            .is_ok();
        if !closed {
            tracing::warn!(
                open = *pipes.borrow(),
                ?drain,
                "replica pipes still open after the fence's drain; they write nothing more"
            );
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let written = !writes || self.writes_done(left).await;
        if !written {
            tracing::warn!(
                ?drain,
                "commands still being written to the fenced primary after the fence's drain"
            );
        }
        let mut inner = self.lock();
        for gtid in inner.unheld_relayed() {
            inner.tail.insert(gtid);
        }
        inner.changed();
        closed && written
    }

    /// Fences the primary of `epoch` and drains (see [`raise_fence`](Self::raise_fence) and
    /// [`drain_fence`](Self::drain_fence)), waiting for commands under way too.
    pub async fn fence(&self, epoch: u64, drain: Duration) -> (Fence, bool) {
        let raised = self.raise_fence(epoch);
        self.drain_fence(drain, true).await;
        raised
    }

    /// Ends the fenced epoch and opens `number` on `primary`, whose binlog positions have
    /// nothing to do with the old one's: writes to the old primary are refused from now on,
    /// those under way are waited for (up to `drain`), every connection of the old epoch is
    /// told to close, and the fence lifts. Every position known goes (the index, the
    /// replicas' acknowledged positions, the quorum position); what each replica holds by GTID,
    /// the watermark, the releases and the tail stay. Nothing is parked: the fence answered
    /// it, and a commit of the old epoch that comes later is refused. Returns false if writes
    /// were still under way when the drain ran out.
    pub async fn open_epoch(&self, number: u64, primary: String, drain: Duration) -> bool {
        let drained = self.end_writes(number, drain).await;
        let old = waking(|woken| {
            let mut inner = self.lock();
            let old = Durability::replace_epoch(&mut inner, number, primary);
            let capacity = inner.config.gtid_index_capacity;
            inner.index = super::index::GtidIndex::new(capacity);
            inner.lag = super::lag::LagBook::new(capacity);
            inner.head = None;
            inner.registry.forget_positions();
            inner.quorum_watch.send_replace(None);
            inner.fence = None;
            self.fenced.store(false, Ordering::SeqCst);
            // A commit of the old epoch that parked after the fence looks again, and is refused.
            inner.waiters.all(woken);
            inner.changed();
            old
        });
        // Each session and pipe of the old epoch closes its connection to the old primary
        // (a reset: nothing it queued is sent) as soon as it runs; once they all have, nothing
        // written to it before the fence can still arrive, however long it was on its way.
        if !old.connections_closed(drain).await {
            warn!(
                epoch = old.number(),
                open = old.open_connections(),
                "connections to the retired primary still open after the drain; each closes as its session next runs"
            );
        }
        drained
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
