//! The replica side of strong sync: a replica pipe's registration, made once the primary has
//! accepted the dump, through which it reports what it relays, what its replica ACKs
//! and what its stream shows the replica holds; dropping it is the replica leaving.

use std::sync::Arc;

use strongsync_proto::gtid::Gtid;
use strongsync_proto::position::Position;
use thiserror::Error;
use tokio::time::Instant;

use super::inner::Inner;
use super::waiters::waking;
use super::Durability;
use crate::config::WithoutQuorum;

/// A replica's accepted dump, registered with strong sync for as long as it lives.
pub struct ReplicaHandle {
    durability: Arc<Durability>,
    server_id: u32,
    pipe: u64,
    /// The epoch its dump belongs to: once that epoch is over, what it reports is ignored
    /// (its positions are the old primary's binlog).
    epoch: u64,
}

/// An ACK strong sync refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AckError {
    /// The replica ACKed a position the proxy never sent it.
    #[error("ACKed {acked}, beyond anything relayed to it (last {relayed:?})")]
    BeyondRelayed {
        /// What it ACKed.
        acked: Position,
        /// The furthest position relayed to it.
        relayed: Option<Position>,
    },
}

// === impl ReplicaHandle ===

impl ReplicaHandle {
    /// The handle of pipe `pipe`, admitted in `epoch`.
    pub(super) fn new(durability: Arc<Durability>, server_id: u32, pipe: u64, epoch: u64) -> Self {
        ReplicaHandle {
            durability,
            server_id,
            pipe,
            epoch,
        }
    }

    /// The replica's `server_id`.
    pub fn server_id(&self) -> u32 {
        self.server_id
    }

    /// A transaction end was relayed: where it ends, and its GTID if it had one.
    pub fn transaction_relayed(&self, gtid: Option<Gtid>, end: Position) {
        self.relayed(&[(gtid, end)], None);
    }

    /// Transaction ends were relayed (in binlog order: where each ends, and its GTID if it had
    /// one), and the replica's stream shows it holds everything through `covered` if that is
    /// given: all reported under one lock. Commits waiting to learn where their transaction
    /// ends are moved to that position, not woken.
    pub fn relayed(&self, ends: &[(Option<Gtid>, Position)], covered: Option<Position>) {
        let d = &self.durability;
        waking(|woken| {
            let mut inner = d.lock();
            if !self.current(&inner) {
                return;
            }
            let capacity = inner.index.capacity();
            for &(gtid, end) in ends {
                inner.head = Some(inner.head.map_or(end, |h| h.max(end)));
                inner.lag.transaction(end);
                if let Some(gtid) = gtid {
                    if let Some(replica) = inner.registry.get_mut(self.server_id, self.pipe) {
                        replica.relayed(end, gtid, capacity);
                    }
                    inner.index.insert(gtid, end);
                    inner.relayed(&gtid, woken);
                }
            }
            let moved = match (covered, inner.registry.get_mut(self.server_id, self.pipe)) {
                (Some(covered), Some(replica)) => {
                    replica.covered(covered);
                    true
                }
                _ => false,
            };
            if moved {
                inner.positions_changed(woken);
            } else {
                inner.maybe_strong();
            }
        });
    }

    /// Its stream goes in compressed frames.
    pub fn compressed(&self) {
        self.update(|replica| replica.compressed = true);
    }

    /// A binlog file ended at `end` (its ROTATE was relayed).
    pub fn file_ended(&self, end: Position) {
        let mut inner = self.durability.lock();
        if self.current(&inner) {
            inner.lag.file_ended(end);
        }
    }

    /// The replica ACKed everything up to `position`; `relayed` is the furthest
    /// position sent to it, which an ACK may not pass. `covered` is what its
    /// stream now shows it holds, if that grew past `position` (reported with the ACK, under
    /// one lock).
    ///
    /// # Errors
    /// [`AckError::BeyondRelayed`]: the caller should disconnect the replica.
    pub fn acked(
        &self,
        position: Position,
        relayed: Option<Position>,
        covered: Option<Position>,
    ) -> Result<(), AckError> {
        if relayed.is_none_or(|r| position > r) {
            return Err(AckError::BeyondRelayed {
                acked: position,
                relayed,
            });
        }
        self.update(|replica| {
            replica.acked(position, Instant::now());
            if let Some(covered) = covered {
                replica.covered(covered);
            }
        });
        Ok(())
    }

    /// The replica's stream shows it holds every transaction through `position` (see
    /// [`StreamCoverage`](super::StreamCoverage)).
    pub fn covered(&self, position: Position) {
        self.update(|replica| replica.covered(position));
    }

    /// Whether its epoch is still the one in force; if not, what it reports is counted and
    /// ignored.
    fn current(&self, inner: &Inner) -> bool {
        let current = inner.epoch_number == self.epoch;
        if !current {
            self.durability.counters.stale_report();
        }
        current
    }

    fn update(&self, f: impl FnOnce(&mut super::registry::Replica)) {
        let d = &self.durability;
        waking(|woken| {
            let mut inner = d.lock();
            if !self.current(&inner) {
                return;
            }
            let Some(replica) = inner.registry.get_mut(self.server_id, self.pipe) else {
                return;
            };
            f(replica);
            inner.positions_changed(woken);
        });
    }
}

impl Drop for ReplicaHandle {
    fn drop(&mut self) {
        let d = &self.durability;
        let left = waking(|woken| {
            let mut inner = d.lock();
            let left = inner
                .registry
                .leave(self.server_id, self.pipe, Instant::now());
            if left {
                inner.positions_changed(woken);
                if inner.config.without_quorum == WithoutQuorum::Immediate {
                    // Waiters whose rule the replicas left can no longer meet must apply the
                    // timeout policy now rather than at their deadline.
                    inner.waiters.all(woken);
                }
            }
            left
        });
        d.pipes.send_modify(|open| *open = open.saturating_sub(1));
        if left {
            tracing::info!(server_id = self.server_id, "replica disconnected");
        }
    }
}
