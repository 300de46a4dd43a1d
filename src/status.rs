//! What `GET /status` answers, defined once: the admin port serves it, `strongsync status`
//! reads and renders it, and the tests read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::Member;

/// `/status`.
///
/// A field missing from an answer reads as its default: `strongsync status` still renders
/// what a proxy of another version serves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// `strong` or `degraded`.
    pub state: String,
    /// True while strongsync has fenced its primary (nothing relayed or acknowledged).
    pub fenced: bool,
    /// Raised by every follow of a new primary.
    pub epoch: u64,
    /// Committed on a fenced primary, known to strongsync, never acknowledged: errant on any
    /// replica that has it once another primary takes over (every fence so far).
    pub unacknowledged_tail: String,
    /// The configured quorum.
    pub quorum: usize,
    /// The whole rule, in words (the quorum and its zone parts).
    pub quorum_rule: String,
    /// Zones the replicas holding a transaction must span (0 or 1: none).
    pub quorum_zones: usize,
    /// One replica holding a transaction must be outside the primary's zone.
    pub cross_zone: bool,
    /// The primary's zone, as configured.
    pub primary_zone: Option<String>,
    /// What of the rule the connected semisync replicas cannot meet (null when they can).
    pub quorum_unmet: Option<String>,
    /// The lowest quorum a session may ask for with `@strongsync_quorum`.
    pub session_quorum_floor: usize,
    /// The highest quorum a session may ask for with `@strongsync_quorum`.
    pub session_quorum_max: usize,
    /// When replicas without semisync receive a transaction.
    pub async_replicas: String,
    /// `durability.ack_timeout`, as humans write it (`250ms`).
    pub ack_timeout: String,
    /// `durability.on_timeout`.
    pub on_timeout: String,
    /// `durability.without_quorum`.
    pub without_quorum: String,
    /// Commits do not wait (relay only).
    pub passthrough: bool,
    /// The highest position held by the quorum, `file:offset`.
    pub quorum_position: Option<String>,
    /// The end of the last transaction relayed to any replica, `file:offset`.
    pub head: Option<String>,
    /// The watermark: every transaction the quorum has held (newest per domain, as
    /// `gtid_slave_pos` shows it on MariaDB; the whole set on MySQL): what a new primary must
    /// hold.
    pub watermark_gtid_position: String,
    /// The same, every MariaDB server's newest (as `gtid_binlog_state` lists them).
    pub watermark_gtid_state: String,
    /// The watermark passed `durability.max_gtid_intervals`: it holds more than the quorum
    /// held, and follow and promote refuse.
    pub watermark_inexact: bool,
    /// `watermark_gtid_position` under its old name, kept for one release.
    pub acknowledged_gtid_position: String,
    /// `watermark_gtid_state` under its old name, kept for one release.
    pub acknowledged_gtid_state: String,
    /// `watermark_inexact` under its old name, kept for one release.
    pub acknowledged_inexact: bool,
    /// Why commits cannot be named by GTID now (every response is then bounded by the
    /// primary's binlog position), if so.
    pub commits_untracked: Option<String>,
    /// Whether new sessions get no statement of strongsync's: `configured` when the primary's
    /// session-tracking defaults hold what strongsync needs; otherwise what they lack.
    pub session_tracking: String,
    /// Whether the fence, the epoch and the retired primaries are written to a state file.
    pub persisted: bool,
    /// The primaries strongsync followed before: never followed or promoted again until
    /// reinstated.
    pub retired_primaries: Vec<RetiredPrimary>,
    /// Replicas holding every transaction in `watermark_gtid_position` whose promotion
    /// leaves replicas that can meet the rule's zone parts.
    pub failover_candidates: Vec<u32>,
    /// Every other replica, with why it is not a candidate.
    pub not_failover_candidates: Vec<NotCandidate>,
    /// Commits waiting for their quorum right now.
    pub parked_sessions: usize,
    /// Parked commits past their `ack_timeout` that `on_timeout = block` keeps waiting.
    pub parked_overdue: usize,
    /// Time spent DEGRADED so far (the current spell included).
    pub degraded_seconds_total: f64,
    /// Per replication domain, the commits acknowledged to clients without their quorum since
    /// strong sync was last STRONG: what a failover now may lose.
    pub released_without_quorum: Vec<DomainReleases>,
    /// The most recent commits released although what they committed could not be learnt.
    pub unresolved_releases: Vec<UnresolvedRelease>,
    /// Commits released so far, by how.
    pub released: BTreeMap<String, u64>,
    /// `commit` or `quorum` (the read barrier).
    pub visibility: String,
    /// Responses the read barrier holds right now, until the quorum holds what they may reveal.
    pub reads_held: usize,
    /// Responses the read barrier held and released, by how.
    pub reads_released: BTreeMap<String, u64>,
    /// Of those, the ones that had to wait for the quorum (the rest went at once).
    pub reads_waited: u64,
    /// Responses that went without a bound of their own: their transaction read only a
    /// snapshot the quorum held.
    pub reads_in_snapshot: u64,
    /// TLS on each leg.
    pub tls: TlsStatus,
    /// This instance in its cluster (absent alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStatus>,
    /// The shared connections to the primary (absent with `[sharing]` off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sharing: Option<SharingStatus>,
    /// The primary followed.
    pub primary: PrimaryStatus,
    /// The connected replicas, then the departed ones as last known, each by `server_id`.
    pub replicas: Vec<Replica>,
}

/// TLS on each leg.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsStatus {
    /// The client leg's certificate (`configured (…)`, `self-signed (…)`), or `off`.
    pub clients: String,
    /// SHA-256 of that certificate, in hex: what a client pins.
    pub clients_sha256: Option<String>,
    /// `primary_tls`.
    pub primary: String,
}

/// A replica that is not a failover candidate, and why: strong sync's own, served as it is.
pub use crate::durability::NotCandidate;

/// The commits of one replication domain acknowledged without their quorum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainReleases {
    /// The domain.
    pub domain: DomainName,
    /// The first such GTID.
    pub first: String,
    /// The last such GTID.
    pub last: String,
    /// How many.
    pub count: u64,
}

/// A MariaDB domain as its number, a MySQL source as its `uuid[:tag]`, a bound by binlog
/// position as `binlog <file>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DomainName {
    /// A MariaDB domain.
    Maria(u32),
    /// A MySQL source, or a binlog file.
    Named(String),
}

/// A commit released to its client although what it committed could not be learnt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnresolvedRelease {
    /// The primary's id for the client's connection.
    pub connection_id: u32,
    /// Why it could not be learnt.
    pub reason: String,
    /// GTIDs learnt (and waited for), if any.
    pub gtids: String,
    /// How long ago.
    pub seconds_ago: f64,
}

/// The shared connections to the primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharingStatus {
    /// `sharing.pool_size`: free connections kept per account and schema.
    pub pool_size: usize,
    /// Free connections in all pools now.
    pub free_connections: usize,
    /// Pools kept: one per account, schema, character set and capabilities in use.
    pub pools: usize,
    /// Sessions that keep their own connection, by why.
    pub pinned_sessions: BTreeMap<String, i64>,
    /// The collation `SET NAMES` gives each character set sessions named, as the watch of the
    /// primary last found (a `SET NAMES` that restates a login's own pins nothing).
    pub set_names: BTreeMap<String, String>,
}

/// This instance in its cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterStatus {
    /// This instance's name.
    pub name: String,
    /// Every instance present in etcd now (each keeps a key on a lease of its own).
    pub members: Vec<Member>,
    /// Why the members could not be read.
    pub members_problem: Option<String>,
    /// `leading`, `following` or `unreachable` (etcd does not answer).
    pub standing: String,
    /// The leader as it advertises itself, if one is known.
    pub leader: Option<Member>,
    /// The lease, while this instance leads.
    pub lease: Option<LeaseStatus>,
    /// Why etcd is unreachable.
    pub problem: Option<String>,
}

/// The leader's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    /// Its id in etcd, in hex as `etcdctl` shows it.
    pub id: String,
    /// Its time to live.
    pub ttl_seconds: u64,
    /// Whether the instance may act now (its deadline, on its own clock, is ahead).
    pub acting: bool,
}

/// The primary followed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrimaryStatus {
    /// `HOST:PORT`.
    pub address: String,
    /// Who it is, once strongsync has asked it.
    pub identity: Option<String>,
    /// Whether it answers now.
    pub reachable: bool,
    /// Why it does not.
    pub problem: Option<String>,
}

/// A primary followed before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredPrimary {
    /// `HOST:PORT`.
    pub address: String,
    /// Who it was, if known.
    pub identity: Option<String>,
}

/// A replica, connected or as last known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Replica {
    /// Its `server_id`.
    pub server_id: u32,
    /// Where it connected from.
    pub address: String,
    /// Its zone, from the config file.
    pub zone: Option<String>,
    /// Its labels, from the config file.
    pub labels: BTreeMap<String, String>,
    /// False for a replica that has disconnected, shown as it was last known.
    pub connected: bool,
    /// Time since it disconnected.
    pub disconnected_seconds: Option<f64>,
    /// It asked for semisync (and so counts towards the quorum).
    pub semisync: bool,
    /// Its stream goes in compressed frames (`slave_compressed_protocol`).
    pub compressed: bool,
    /// The GTIDs it holds (newest per domain, like `gtid_slave_pos`): what it had when it
    /// connected, then every transaction it ACKed. What a failover tool compares.
    pub acked_gtid_position: String,
    /// `file:offset`, the file given by its numeric suffix.
    pub acked_position: Option<String>,
    /// `file:offset` through which it holds every transaction: what it ACKed, or what
    /// its stream shows the primary skipped because it had it.
    pub holds_through: Option<String>,
    /// The numeric suffix of the file of `acked_position`.
    pub acked_file: Option<u64>,
    /// The offset of `acked_position`.
    pub acked_offset: Option<u64>,
    /// Binlog bytes between `holds_through` and the newest transaction relayed (when known).
    pub lag_bytes: Option<u64>,
    /// Transactions relayed that it does not hold yet (when known).
    pub lag_transactions: Option<u64>,
    /// Time since its last ACK.
    pub last_ack_age_seconds: Option<f64>,
}
