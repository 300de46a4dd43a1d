//! What strong sync keeps across its own restart (the state file holds it; see
//! [`crate::failover`]): the acknowledged watermark, what each replica was last known to hold,
//! the commits released without their quorum, and the fence with its tail. Read back at
//! start, it keeps the failover candidates and the follow check right before any replica has
//! reconnected.

use std::sync::atomic::Ordering;

use strongsync_proto::gtid::{GtidPosition, GtidSet};
use tokio::time::Instant;

use super::registry::{Departed, Replica};
use super::{Durability, Fence};

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

// === impl Durability (persisted) ===

impl Durability {
    /// A number that changes whenever something [`persisted`](Self::persisted) returns may
    /// have (cheap: the state file's writer polls it).
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// What to keep, with the [`version`](Self::version) it is of.
    pub fn persisted(&self) -> (u64, Persisted) {
        let inner = self.lock();
        let known = inner
            .registry
            .connected()
            .chain(inner.registry.departed().map(|(id, d)| (id, &d.replica)));
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
            acknowledged: GtidPosition::clone(inner.watermark.position()),
            acknowledged_set: inner.watermark.exact().clone(),
            acknowledged_inexact: inner.watermark.inexact(),
            released_without_quorum: inner.released_without_quorum.clone(),
            replicas,
            fence: inner.fence,
            tail: inner.tail.clone(),
        };
        (inner.version, persisted)
    }

    /// Takes back what a previous run kept, before any replica connects: its replicas as
    /// departed ones, its watermark, its releases, and its fence.
    pub fn restore(&self, kept: Persisted) {
        let mut inner = self.lock();
        inner.watermark.restore(
            &kept.acknowledged,
            &kept.acknowledged_set,
            kept.acknowledged_inexact,
        );
        inner
            .released_without_quorum
            .extend(&kept.released_without_quorum);
        for replica in kept.replicas {
            let zone = inner.topology.zone_of(replica.server_id);
            inner.registry.remember(
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
        inner.tail.extend(&kept.tail);
        if let Some(fence) = kept.fence {
            inner.fence = Some(fence);
            self.fenced.store(true, Ordering::SeqCst);
            inner.epoch.mark_fenced();
        }
        inner.changed();
    }
}
