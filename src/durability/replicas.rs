//! The replica side of strong sync: registering a replica's dump, what it relays, what it
//! acknowledges, and leaving.

use std::net::SocketAddr;
use std::sync::Arc;

use strongsync_proto::gtid::MariaGtid;
use strongsync_proto::position::Position;
use thiserror::Error;
use tokio::time::Instant;

use super::index::Lookup;
use super::{wake, Durability, Inner, WithoutQuorum};

/// A connected replica.
pub(super) struct Replica {
    pub pipe: u64,
    pub address: String,
    pub semisync: bool,
    pub acked: Option<Position>,
    pub last_ack: Option<Instant>,
}

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
            inner.replicas.insert(
                server_id,
                Replica {
                    pipe,
                    address: address.to_string(),
                    semisync,
                    acked: None,
                    last_ack: None,
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
            let inner = self.durability.lock();
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
            let Some(replica) = inner
                .replicas
                .get_mut(&self.server_id)
                .filter(|r| r.pipe == self.pipe)
            else {
                return;
            };
            replica.acked = Some(replica.acked.map_or(position, |a| a.max(position)));
            replica.last_ack = Some(Instant::now());
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
            if inner
                .replicas
                .get(&self.server_id)
                .is_some_and(|r| r.pipe == self.pipe)
            {
                inner.replicas.remove(&self.server_id);
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
