//! Strong sync's settings (`[durability]`) and the words of its policies. What they mean for a
//! commit is strong sync's own business ([`crate::durability`]); here is what an operator sets.

use std::sync::Arc;
use std::time::Duration;

use super::define::{settings, Meta};

settings! {
    /// Strong sync: the quorum, how long a commit waits for it and what happens when it does not
    /// come, what responses may reveal, and the rules over zones. All but
    /// `gtid_index_capacity` change live ([`Durability::reconfigure`]), and parked commits
    /// follow a change at once.
    ///
    /// [`Durability::reconfigure`]: crate::durability::Durability::reconfigure
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DurabilityConfig in "durability" {
        /// Semisync replicas that must hold a transaction (by their ACKs) before its commit is
        /// acknowledged to the client, 1 to 64.
        #[setting(Meta::FLAG.formerly("quorum").live().range(1, 64).hint("to relay without waiting, set durability.passthrough"))]
        pub quorum: usize = 1,
        /// How long a commit waits for its quorum before `on_timeout` applies.
        #[setting(Meta::FLAG.formerly("ack-timeout").live().nonzero())]
        pub ack_timeout: Duration = Duration::from_secs(10),
        /// What happens to a commit that waited `ack_timeout` without its quorum: `degrade`
        /// (release it, and stop waiting — state DEGRADED — until the replicas hold every commit
        /// released so), `block` (keep waiting) or `error` (answer error 1105: it committed on
        /// the primary without its quorum; the message names its GTID).
        #[setting(Meta::FLAG.formerly("on-timeout").live())]
        pub on_timeout: OnTimeout = OnTimeout::Degrade,
        /// What a commit does while fewer than `quorum` semisync replicas are connected: `wait`
        /// (for `ack_timeout`) or `immediate` (apply `on_timeout` at once; with `block` it still
        /// waits).
        #[setting(Meta::FLAG.formerly("without-quorum").live())]
        pub without_quorum: WithoutQuorum = WithoutQuorum::Wait,
        /// A replica that has not ACKed a transaction end this long after it was sent is
        /// asked again (a flagged heartbeat), so a lost ACK never leaves commits waiting.
        #[setting(Meta::FLAG.formerly("ack-nudge-after").live().nonzero())]
        pub ack_nudge_after: Duration = Duration::from_secs(1),
        /// Transactions whose binlog end position is remembered exactly (older ones are
        /// remembered as a bound per replication domain).
        #[setting(Meta::FILE.at_least(1))]
        pub gtid_index_capacity: usize = 100_000,
        /// Intervals the watermark keeps exactly per MySQL source (or MariaDB
        /// domain and server), read at start: gaps in it come from GTIDs the quorum never
        /// passed (numbers given by hand). Past it the watermark holds more than the quorum
        /// held and follow and promote refuse, saying so. An interval costs about 32 bytes.
        #[setting(Meta::FILE.at_least(1))]
        pub max_gtid_intervals: usize = 1_000_000,
        /// Relay only: commits never wait for replicas (measuring the proxy's own cost, or a
        /// migration step).
        #[setting(Meta::FLAG.formerly("passthrough").live())]
        pub passthrough: bool = false,
        /// What other sessions may see of a transaction before its quorum holds it: `commit`
        /// (whatever the primary committed, like semisync `AFTER_COMMIT`), `quorum` (nothing:
        /// every response waits until the quorum holds every transaction it could reveal, like
        /// `AFTER_SYNC`; needs the `[probe]` account) or `snapshot` (as `quorum`, and a
        /// transaction under `innodb_snapshot_isolation` is bounded once for its reads).
        /// Live once a probe account is configured.
        #[setting(Meta::FLAG.formerly("visibility").live())]
        pub visibility: Visibility = Visibility::Commit,
        /// Zones the replicas holding a transaction must span (0 or 1: no zone rule; at most `quorum`).
        #[setting(Meta::FILE.live())]
        pub quorum_zones: usize = 0,
        /// One replica holding a transaction must be outside `primary_zone`.
        #[setting(Meta::FILE.live())]
        pub cross_zone: bool = false,
        /// The primary's zone, for `cross_zone` and for which replicas may be promoted.
        #[setting(Meta::FILE.live())]
        pub primary_zone: Option<Arc<str>> = None,
        /// The lowest quorum a session may ask for with `SET @strongsync_quorum = n` (at most
        /// `quorum`): sessions may raise the quorum, and lower it down to this.
        #[setting(Meta::FILE.live().default_text("quorum"))]
        pub session_quorum_floor: Option<usize> = None,
        /// The highest quorum a session may ask for.
        #[setting(Meta::FILE.live().at_most(64))]
        pub session_quorum_max: usize = 64,
        /// When a replica without semisync gets a transaction: `after_quorum` (once the quorum
        /// holds it, so it is never ahead of a promoted replica) or `immediate` (as the primary
        /// sends it).
        #[setting(Meta::FLAG.formerly("async-replicas").live())]
        pub async_replicas: AsyncReplicas = AsyncReplicas::AfterQuorum,
    }
}

/// When a replica without semisync (one that never ACKs) receives a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncReplicas {
    /// Once the quorum holds it: an async replica is never ahead of the replicas a failover
    /// promotes, so it never holds a transaction the new primary lacks.
    AfterQuorum,
    /// As soon as the primary sends it (as a MariaDB primary does).
    Immediate,
}

/// What a response may reveal of transactions the quorum does not hold yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Anything the primary committed (like semisync `AFTER_COMMIT`): only the committing
    /// client waits.
    Commit,
    /// Nothing: every response is held until the quorum holds every transaction it could
    /// reveal (like semisync `AFTER_SYNC`, without holding locks or server threads).
    Quorum,
    /// As `Quorum`, with one bound per snapshot for sessions under `innodb_snapshot_isolation`
    /// (see docs/visibility.md): trusts that the views and stored functions sessions read
    /// through take no locking reads, which MariaDB's snapshot isolation does not check
    /// through secondary indexes.
    Snapshot,
}

/// What happens to a commit that waited `ack_timeout` without its quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// Release it, and stop waiting for quorum (DEGRADED) until the replicas have caught up.
    Degrade,
    /// Keep waiting: never acknowledge a commit without its quorum.
    Block,
    /// Answer the client with an error saying the transaction committed on the primary
    /// without reaching quorum.
    Error,
}

/// What a commit does while fewer than `quorum` semisync replicas are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithoutQuorum {
    /// Wait as usual; `on_timeout` applies after `ack_timeout`.
    Wait,
    /// Apply `on_timeout` at once (with `block`, this still waits).
    Immediate,
}

words!(OnTimeout { Degrade = "degrade", Block = "block", Error = "error" });
words!(WithoutQuorum { Wait = "wait", Immediate = "immediate" });
words!(Visibility { Commit = "commit", Quorum = "quorum", Snapshot = "snapshot" });
words!(AsyncReplicas { AfterQuorum = "after_quorum", Immediate = "immediate" });
