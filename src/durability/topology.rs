//! Who the replicas are, as the config file says: each one's zone and labels by `server_id`,
//! and the primary's zone. Replicas the file does not name are served as before, without a
//! zone.

use std::collections::BTreeMap;
use std::sync::Arc;

/// The replicas' zones and labels, and the primary's zone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// The primary's zone, for `cross_zone`.
    pub primary_zone: Option<Arc<str>>,
    /// Replicas the config file names, by `server_id`.
    pub replicas: BTreeMap<u32, ReplicaLabels>,
}

/// What the config file says of one replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaLabels {
    /// Its zone (rack, availability zone, data centre: whatever fails together).
    pub zone: Option<Arc<str>>,
    /// Anything else operators want to see in `/status` (role, host, …).
    pub labels: BTreeMap<String, String>,
}

// === impl Topology ===

impl Topology {
    /// The zone of replica `server_id`, if the config file gives it one.
    pub fn zone_of(&self, server_id: u32) -> Option<Arc<str>> {
        self.replicas.get(&server_id)?.zone.clone()
    }

    /// The distinct zones of the replicas the config file names.
    pub fn zones(&self) -> Vec<&str> {
        let mut zones: Vec<&str> = self
            .replicas
            .values()
            .filter_map(|r| r.zone.as_deref())
            .collect();
        zones.sort_unstable();
        zones.dedup();
        zones
    }
}
