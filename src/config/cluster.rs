//! Several strongsync instances with one leader (`[cluster]`): the etcd that holds the lease
//! and the failover state, and how this instance takes part.

use std::path::PathBuf;
use std::time::Duration;

use super::define::{settings, Meta};
use super::values::Secret;

settings! {
    /// Several instances, one leader by an etcd lease (see docs/failover.md). Without
    /// `endpoints`, strongsync runs alone on its state file. Read at start.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClusterConfig in "cluster" {
        /// etcd's client URLs (`http://host:2379`, `https://…`); with them, this instance is one
        /// of a cluster and acts only while it holds the leader's lease.
        #[setting(Meta::FLAG)]
        pub endpoints: Vec<String> = Vec::new(),
        /// The cluster's keys in etcd live under this prefix: one per cluster (a primary and its
        /// replicas).
        #[setting(Meta::FLAG.value_name("PREFIX"))]
        pub prefix: String = "/strongsync/default".into(),
        /// This instance's name in the cluster, unique in it. An instance of a cluster must have
        /// one (`init-state` needs none).
        #[setting(Meta::FLAG.value_name("NAME"))]
        pub name: Option<String> = None,
        /// The address clients and replicas reach this instance's SQL port by (`HOST:PORT`),
        /// named to those that reach another instance. An instance of a cluster must say it:
        /// `listen` is often `0.0.0.0:3307`, the same on every instance.
        #[setting(Meta::FLAG.value_name("HOST:PORT"))]
        pub advertise: Option<String> = None,
        /// The leader's lease in etcd: another instance may lead once it has expired unrenewed.
        #[setting(Meta::FLAG.nonzero())]
        pub lease_ttl: Duration = Duration::from_secs(10),
        /// How long before its lease could expire, on its own clock, the leader stops relaying
        /// and releasing if it has not renewed it: room for clocks that run apart and for the
        /// last write in flight. Less than half of `lease_ttl`.
        #[setting(Meta::FLAG.nonzero())]
        pub lease_margin: Duration = Duration::from_secs(3),
        /// PEM file of the authorities etcd's certificate is checked against (`https://`).
        #[setting(Meta::FILE)]
        pub ca: Option<PathBuf> = None,
        /// PEM certificate this instance presents to etcd (client-certificate authentication),
        /// with `cluster.key`.
        #[setting(Meta::FILE)]
        pub cert: Option<PathBuf> = None,
        /// PEM private key for `cluster.cert`.
        #[setting(Meta::FILE)]
        pub key: Option<PathBuf> = None,
        /// etcd user, when etcd has authentication on.
        #[setting(Meta::FILE.value_name("USER"))]
        pub user: Option<String> = None,
        /// A file holding that user's password; a trailing newline is ignored.
        #[setting(Meta::FILE)]
        pub password_file: Option<PathBuf> = None,
        /// That user's password, instead of a file.
        #[setting(Meta::FILE.secret())]
        pub password: Option<Secret> = None,
    }
}

impl ClusterConfig {
    /// Whether this instance is one of a cluster.
    pub fn enabled(&self) -> bool {
        !self.endpoints.is_empty()
    }
}
