//! Who the replicas are, as the config file says (`[[replica]]`): each one's zone and labels by
//! the `server_id` its dump sends, and the primary's zone (`durability.primary_zone`). Replicas
//! the file does not name are served as before, without a zone.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::define::{settings, Field, Item, Layer, Meta, Section, SettingInfo};
use super::ConfigError;

settings! {
    /// One replica the operator names (`[[replica]]`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ReplicaConfig in "replica" {
        /// The `server_id` the replica replicates with (1 to 4294967295); a replica the file
        /// does not name counts towards `quorum` but is in no zone.
        #[setting(Meta::FILE.live().required())]
        pub server_id: u32 = 0,
        /// Its zone: a rack, an availability zone, a data centre — whatever fails together.
        #[setting(Meta::FILE.live())]
        pub zone: Option<Arc<str>> = None,
        /// Anything else to show in `/status` (role, host, …), as a table of strings.
        #[setting(Meta::FILE.live())]
        pub labels: BTreeMap<String, String> = BTreeMap::new(),
        /// Its SQL port, `HOST:PORT` (or a Unix socket's path), for `strongsync promote`,
        /// which logs in there with the `[failover]` account. Restart to change.
        #[setting(Meta::FILE)]
        pub address: Option<String> = None,
    }
}

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
    /// The topology of the replicas `named` in the file, the primary in `primary_zone`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a `server_id` that is 0 or named twice.
    pub fn of(
        named: &[ReplicaConfig],
        primary_zone: Option<Arc<str>>,
    ) -> Result<Topology, ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid {
            key: "replica",
            problem,
        };
        let mut topology = Topology {
            primary_zone,
            ..Topology::default()
        };
        for r in named {
            if r.server_id == 0 {
                return Err(invalid(
                    "server_id 0 is not between 1 and 4294967295".into(),
                ));
            }
            let labels = ReplicaLabels {
                zone: r.zone.clone(),
                labels: r.labels.clone(),
            };
            if topology.replicas.insert(r.server_id, labels).is_some() {
                return Err(invalid(format!("server_id {} is named twice", r.server_id)));
            }
        }
        Ok(topology)
    }

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

// === impl Field for the replicas named ===

/// `[[replica]]`: an array of tables, each one replica's settings.
impl Field for Vec<ReplicaConfig> {
    fn describe(
        &self,
        _key: &'static str,
        _doc: &'static str,
        _meta: Meta,
        out: &mut Vec<SettingInfo>,
    ) {
        ReplicaConfig::default().describe_all(out);
    }

    fn take(&mut self, key: &'static str, item: Item, _meta: &Meta) -> Result<(), ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid { key, problem };
        let Item::File(toml::Value::Array(tables)) = item else {
            return Err(invalid(
                "replicas are named in the config file, each in a [[replica]] table".into(),
            ));
        };
        *self = tables
            .into_iter()
            .map(|value| {
                let toml::Value::Table(table) = value else {
                    return Err(invalid("expected [[replica]] tables".into()));
                };
                let mut replica = ReplicaConfig::default();
                replica.take_all(Layer::from_file(table))?;
                Ok(replica)
            })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    fn check(&self, _key: &'static str, _meta: &Meta) -> Result<(), ConfigError> {
        self.iter().try_for_each(Section::check_all)
    }

    /// The replicas' zones and labels are all live.
    fn restarts(
        &self,
        _new: &Self,
        _key: &'static str,
        _meta: &Meta,
        _out: &mut Vec<&'static str>,
    ) {
    }

    fn take_live(&mut self, new: &Self, _meta: &Meta) {
        self.clone_from(new);
    }

    fn write(&self, _meta: &Meta) -> Option<toml::Value> {
        (!self.is_empty()).then(|| {
            toml::Value::Array(
                self.iter()
                    .map(|r| toml::Value::Table(r.write_all()))
                    .collect(),
            )
        })
    }
}
