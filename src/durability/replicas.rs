//! The replica side of strong sync: registering a replica's dump, what it relays, what it
//! acknowledges, and leaving.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use strongsync_proto::gtid::MariaGtid;
use strongsync_proto::position::Position;
use thiserror::Error;
use tokio::time::Instant;

use super::held::GtidPosition;
use super::index::Lookup;
use super::{wake, Durability, Inner, ReplicaStatus, WithoutQuorum};

/// A connected replica.
pub(super) struct Replica {
    pub pipe: u64,
    pub address: String,
    pub semisync: bool,
    pub acked: Option<Position>,
    pub last_ack: Option<Instant>,
    /// The GTIDs it holds: what it said it had when it connected, then what it acknowledged.
    pub held: GtidPosition,
    /// Transactions relayed to it and not acknowledged yet, with their GTIDs, oldest first.
    /// Bounded by the GTID index capacity: past it the oldest go, which only leaves `held`
    /// behind what the replica really has (never ahead of it).
    pub unacked: VecDeque<(Position, MariaGtid)>,
}

/// A replica that has disconnected, as it was last known: what a failover tool needs once the
/// primary (and so every replica's dump) is gone.
pub(super) struct Departed {
    pub replica: Replica,
    pub left: Instant,
}

/// Disconnected replicas remembered, the most recent ones.
pub(super) const DEPARTED_KEPT: usize = 64;

/// A replica's dump, registered with strong sync for as long as it lives.
pub struct ReplicaHandle {
    durability: Arc<Durability>,
    server_id: u32,
    pipe: u64,
}

/// An acknowledgement strong sync refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AckError {
    /// The replica acknowledged a position the proxy never sent it.
    #[error("acknowledged {acked}, beyond anything relayed to it (last {relayed:?})")]
    BeyondRelayed {
        /// What it acknowledged.
        acked: Position,
        /// The furthest position relayed to it.
        relayed: Option<Position>,
    },
}

// === impl Durability (replicas) ===

impl Durability {
    /// Registers a replica's dump. A replica that reconnects (same `server_id`) replaces its
    /// old registration; the primary ends the old dump too.
    pub fn register_replica(
        self: &Arc<Self>,
        server_id: u32,
        address: SocketAddr,
        semisync: bool,
    ) -> ReplicaHandle {
        let mut woken = Vec::new();
        let pipe = {
            let mut inner = self.lock();
            inner.next_pipe += 1;
            let pipe = inner.next_pipe;
            inner.departed.remove(&server_id);
            inner.replicas.insert(
                server_id,
                Replica {
                    pipe,
                    address: address.to_string(),
                    semisync,
                    acked: None,
                    last_ack: None,
                    held: GtidPosition::default(),
                    unacked: VecDeque::new(),
                },
            );
            inner.update_quorum(self.config().quorum, &mut woken);
            pipe
        };
        wake(woken);
        tracing::info!(server_id, %address, semisync, "replica connected");
        ReplicaHandle {
            durability: Arc::clone(self),
            server_id,
            pipe,
        }
    }
}

// === impl ReplicaHandle ===

impl ReplicaHandle {
    /// The replica's `server_id`.
    pub fn server_id(&self) -> u32 {
        self.server_id
    }

    /// A transaction end was relayed: where it ends, and its GTID if it had one.
    pub fn transaction_relayed(&self, gtid: Option<MariaGtid>, end: Position) {
        let d = &self.durability;
        let mut woken = Vec::new();
        {
            let mut inner = d.lock();
            inner.head = Some(inner.head.map_or(end, |h| h.max(end)));
            inner.lag.transaction(end);
            if let Some(gtid) = gtid {
                let capacity = inner.index.capacity();
                if let Some(replica) = inner.replica_mut(self.server_id, self.pipe) {
                    if replica.semisync {
                        if replica.unacked.len() >= capacity {
                            replica.unacked.pop_front();
                        }
                        replica.unacked.push_back((end, gtid));
                    }
                }
                inner.index.insert(gtid, end);
                if let Some(list) = inner.waiters.by_gtid.remove(&gtid) {
                    woken.extend(list.into_iter().map(|(_, tx)| tx));
                }
            }
            inner.maybe_strong(d.config().quorum);
        }
        wake(woken);
    }

    /// A binlog file ended at `end` (its ROTATE was relayed).
    pub fn file_ended(&self, end: Position) {
        self.durability.lock().lag.file_ended(end);
    }

    /// The replica acknowledged everything up to `position`; `relayed` is the furthest
    /// position sent to it, which an acknowledgement may not pass.
    ///
    /// # Errors
    /// [`AckError::BeyondRelayed`]: the caller should disconnect the replica.
    pub fn acknowledged(
        &self,
        position: Position,
        relayed: Option<Position>,
    ) -> Result<(), AckError> {
        if relayed.is_none_or(|r| position > r) {
            return Err(AckError::BeyondRelayed {
                acked: position,
                relayed,
            });
        }
        self.record_ack(position);
        Ok(())
    }

    /// A reconnecting replica's GTID state (`@slave_connect_state`) says it has every one of
    /// these transactions: as good as an acknowledgement of their positions.
    pub fn has_gtids(&self, gtids: &[MariaGtid]) {
        let known = {
            let mut inner = self.durability.lock();
            if let Some(replica) = inner.replica_mut(self.server_id, self.pipe) {
                for gtid in gtids {
                    replica.held.advance(*gtid);
                }
            }
            gtids
                .iter()
                .filter_map(|g| match inner.index.lookup(g) {
                    Lookup::Exact(p) => Some(p),
                    // Dropped entries are behind the quorum already; nothing to add.
                    Lookup::AtMost(_) | Lookup::Unknown => None,
                })
                .max()
        };
        if let Some(position) = known {
            self.record_ack(position);
        }
    }

    fn record_ack(&self, position: Position) {
        let d = &self.durability;
        let mut woken = Vec::new();
        {
            let mut inner = d.lock();
            let Some(replica) = inner.replica_mut(self.server_id, self.pipe) else {
                return;
            };
            replica.acked = Some(replica.acked.map_or(position, |a| a.max(position)));
            replica.last_ack = Some(Instant::now());
            while let Some(&(end, gtid)) = replica.unacked.front() {
                if end > position {
                    break;
                }
                replica.held.advance(gtid);
                replica.unacked.pop_front();
            }
            inner.update_quorum(d.config().quorum, &mut woken);
        }
        wake(woken);
    }
}

impl Drop for ReplicaHandle {
    fn drop(&mut self) {
        let d = &self.durability;
        let mut woken = Vec::new();
        {
            let mut inner: std::sync::MutexGuard<'_, Inner> = d.lock();
            if inner.replica_mut(self.server_id, self.pipe).is_some() {
                if let Some(gone) = inner.replicas.remove(&self.server_id) {
                    inner.remember_departed(self.server_id, gone);
                }
                let config = d.config();
                inner.update_quorum(config.quorum, &mut woken);
                let short = Durability::semisync_replicas(&inner) < config.quorum;
                if short && config.without_quorum == WithoutQuorum::Immediate {
                    // Waiters must apply the timeout policy now rather than at their deadline.
                    inner.waiters.all(&mut woken);
                }
            }
        }
        wake(woken);
        tracing::info!(server_id = self.server_id, "replica disconnected");
    }
}

// === impl Inner (replicas) ===

impl Inner {
    /// The replica `server_id` if its registration is still pipe `pipe`'s (a reconnect
    /// replaces it).
    fn replica_mut(&mut self, server_id: u32, pipe: u64) -> Option<&mut Replica> {
        self.replicas.get_mut(&server_id).filter(|r| r.pipe == pipe)
    }

    fn remember_departed(&mut self, server_id: u32, gone: Replica) {
        if self.departed.len() >= DEPARTED_KEPT {
            let oldest = self
                .departed
                .iter()
                .min_by_key(|(_, d)| d.left)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                self.departed.remove(&oldest);
            }
        }
        let replica = Replica {
            unacked: VecDeque::new(),
            ..gone
        };
        let left = Instant::now();
        self.departed.insert(server_id, Departed { replica, left });
    }
}

// === impl Replica ===

impl Replica {
    /// What is known of it at `now`, without the lag (which needs the shared state).
    pub(super) fn status(&self, server_id: u32, now: Instant) -> ReplicaStatus {
        ReplicaStatus {
            server_id,
            address: self.address.clone(),
            semisync: self.semisync,
            acked: self.acked,
            lag_bytes: None,
            lag_transactions: None,
            last_ack_age: self.last_ack.map(|at| now - at),
            held: self.held.clone(),
            gone_for: None,
        }
    }
}
