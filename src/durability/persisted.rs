//! What strong sync keeps across its own restart (the state file holds it; see
//! [`crate::failover`]): the acknowledged watermark, what each replica was last known to hold,
//! the commits released without their quorum, and the fence with its tail. Read back at
//! start, it keeps the failover candidates and the follow check right before any replica has
//! reconnected.

use strongsync_proto::gtid::{GtidPosition, GtidSet};
use tokio::time::Instant;

use super::inner::Inner;
use super::registry::{Departed, Replica};
use super::Fence;

/// Strong sync's state worth keeping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persisted {
    /// Every transaction the quorum held, as a position.
    pub acknowledged: GtidPosition,
    /// The same, as an exact set (what the commit outcome reads).
    pub acknowledged_set: GtidSet,
    /// The watermark passed its bound and holds more than was acknowledged.
    pub acknowledged_inexact: bool,
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
    /// It acknowledged (semisync).
    pub semisync: bool,
    /// What it holds: its connect state and every transaction it acknowledged since.
    pub held: GtidPosition,
}

// === impl Inner (persisted) ===

impl Inner {
    /// See [`Durability::persisted`](super::Durability::persisted).
    pub(super) fn persisted(&self) -> (u64, Persisted) {
        let known = self
            .registry
            .connected()
            .chain(self.registry.departed().map(|(id, d)| (id, &d.replica)));
        let mut replicas: Vec<PersistedReplica> = known
            .map(|(server_id, r)| PersistedReplica {
                server_id,
                address: r.address.to_string(),
                semisync: r.semisync,
                held: GtidPosition::clone(&r.held),
            })
            .collect();
        replicas.sort_by_key(|r| r.server_id);
        let persisted = Persisted {
            acknowledged: GtidPosition::clone(self.watermark.position()),
            acknowledged_set: self.watermark.exact().clone(),
            acknowledged_inexact: self.watermark.inexact(),
            released_without_quorum: self.released_without_quorum.clone(),
            replicas,
            fence: self.fence,
            tail: self.tail.clone(),
        };
        (self.version, persisted)
    }

    /// See [`Durability::restore`](super::Durability::restore). Returns whether it raised the
    /// fence (which the gate must then mirror).
    pub(super) fn restore(&mut self, kept: Persisted) -> bool {
        self.watermark.restore(
            &kept.acknowledged,
            &kept.acknowledged_set,
            kept.acknowledged_inexact,
        );
        self.released_without_quorum
            .extend(&kept.released_without_quorum);
        for replica in kept.replicas {
            let zone = self.topology.zone_of(replica.server_id);
            self.registry.remember(
                replica.server_id,
                Departed {
                    replica: Replica::remembered(
                        replica.address,
                        zone,
                        replica.semisync,
                        replica.held,
                    ),
                    left: Instant::now(),
                },
            );
        }
        self.tail.extend(&kept.tail);
        let fenced = kept.fence.is_some();
        if fenced {
            self.fence = kept.fence;
            self.epoch.mark_fenced();
        }
        self.changed();
        fenced
    }
}
