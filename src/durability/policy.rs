//! Strong sync's settings and the words for what happens to a commit: the timeout policy, the
//! STRONG/DEGRADED state, how a parked commit was released, and the error a client gets when
//! its commit did not reach its quorum.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::quorum::QuorumRule;

/// Settings of strong sync. All but `gtid_index_capacity` can change while the proxy runs
/// ([`Durability::reconfigure`](super::Durability::reconfigure)); parked commits follow a
/// change at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurabilityConfig {
    /// Replicas that must hold a transaction before its commit is acknowledged to the client.
    /// Default 1.
    pub quorum: usize,
    /// Relay only: commits never wait (the proxy's own cost, in benchmarks; a migration step).
    /// Default false.
    pub passthrough: bool,
    /// How long a commit waits for its quorum before `on_timeout` applies. Default 10 s.
    pub ack_timeout: Duration,
    /// What happens to a commit whose quorum does not come in time. Default `degrade`.
    pub on_timeout: OnTimeout,
    /// What a commit does while fewer than `quorum` semisync replicas are connected.
    /// Default `wait` (for `ack_timeout`).
    pub without_quorum: WithoutQuorum,
    /// A replica that has not acknowledged a transaction end this long after it was sent is
    /// asked again (lost ACKs must not leave commits waiting). Default 1 s.
    pub ack_nudge_after: Duration,
    /// Most transactions whose end position is remembered exactly (older ones are remembered
    /// as a bound per replication domain). Default 100,000.
    pub gtid_index_capacity: usize,
    /// What other sessions may see of a transaction before its quorum holds it. Default
    /// `commit`.
    pub visibility: Visibility,
    /// Zones the replicas holding a transaction must span (0 or 1: no zone rule). Default 0.
    pub quorum_zones: usize,
    /// One of the replicas holding a transaction must be outside the primary's zone. Default
    /// false.
    pub cross_zone: bool,
    /// The lowest quorum a session may ask for (`SET @strongsync_quorum = n`); `None`: the
    /// configured `quorum` (sessions may raise it, not lower it). Default `None`.
    pub session_quorum_floor: Option<usize>,
    /// The highest quorum a session may ask for. Default 64.
    pub session_quorum_max: usize,
    /// When a replica without semisync receives a transaction. Default `after_quorum`.
    pub async_replicas: AsyncReplicas,
}

/// When a replica without semisync (one that never acknowledges) receives a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncReplicas {
    /// Once the quorum holds it: an async replica is never ahead of the replicas a failover
    /// promotes, so it never holds a transaction the new primary lacks.
    AfterQuorum,
    /// As soon as the primary sends it (as a MariaDB primary does).
    Immediate,
}

/// How a session's own quorum stands against the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionQuorum {
    /// It asked for this, within the bounds.
    Taken(usize),
    /// It asked for less than the floor: the floor applies.
    BelowFloor(usize),
    /// It asked for more than the maximum: the maximum applies.
    AboveMax(usize),
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
    /// (see README "Visibility"): trusts that the views and stored functions sessions read
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

/// Whether commits currently wait for their quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Every commit waits for its quorum.
    Strong,
    /// Commits are released without waiting, until the quorum holds every one of them.
    Degraded,
}

/// How a parked commit was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The quorum holds it.
    Quorum,
    /// It waited `ack_timeout` (or found no quorum with `without_quorum = immediate`) and the
    /// timeout policy released it (with OK for `degrade`, with an error for `error`).
    Timeout,
    /// The proxy was DEGRADED: released without waiting.
    Degraded,
    /// What it committed could not be learnt, nor bounded: released without its quorum.
    Unresolved,
    /// The client went away while it waited.
    ClientGone,
    /// The proxy shut down while it waited.
    Shutdown,
    /// Its session asked for no quorum (`@strongsync_quorum = 0`, where the floor allows it):
    /// released at once.
    NoneAsked,
}

/// Every outcome, in the order of the counters.
pub const OUTCOMES: [Outcome; 7] = [
    Outcome::Quorum,
    Outcome::Timeout,
    Outcome::Degraded,
    Outcome::Unresolved,
    Outcome::ClientGone,
    Outcome::Shutdown,
    Outcome::NoneAsked,
];

/// A commit released without its quorum, with an error for its client: `on_timeout = error`,
/// or the proxy shutting down with the commit still parked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct NotAcknowledged {
    /// The GTIDs, comma-separated.
    pub gtids: String,
    /// The quorum it needed.
    pub quorum: usize,
    /// How long it waited.
    pub waited: Duration,
    /// Released because the proxy is shutting down (not by the timeout policy).
    pub shutdown: bool,
    /// A response held by the read barrier, not a commit of the client's.
    pub read: bool,
}

impl fmt::Display for NotAcknowledged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let NotAcknowledged {
            gtids,
            quorum,
            waited,
            shutdown,
            read,
        } = self;
        if *shutdown {
            f.write_str("proxy shutting down: ")?;
        }
        if *read {
            write!(f, "response withheld: it may reveal transaction(s) {gtids}, which {quorum} replica(s) did not acknowledge within {waited:?}; the statement itself ran on the primary (roll back a transaction it is part of)")
        } else {
            write!(f, "transaction {gtids} committed on the primary but was not acknowledged by {quorum} replica(s) within {waited:?}; it may be lost if the primary fails")
        }
    }
}

// === impl DurabilityConfig ===

impl DurabilityConfig {
    /// The rule every commit waits for unless its session asked otherwise.
    pub fn rule(&self) -> QuorumRule {
        QuorumRule {
            count: self.quorum,
            zones: self.quorum_zones,
            cross_zone: self.cross_zone,
        }
    }

    /// The lowest quorum a session may ask for.
    pub fn session_floor(&self) -> usize {
        self.session_quorum_floor.unwrap_or(self.quorum)
    }

    /// The quorum a session that asked for `asked` gets (`None`: it did not ask).
    pub fn session_quorum(&self, asked: Option<usize>) -> SessionQuorum {
        match asked {
            None => SessionQuorum::Taken(self.quorum),
            Some(n) if n < self.session_floor() => SessionQuorum::BelowFloor(self.session_floor()),
            Some(n) if n > self.session_quorum_max => {
                SessionQuorum::AboveMax(self.session_quorum_max)
            }
            Some(n) => SessionQuorum::Taken(n),
        }
    }

    /// Whether responses wait for the quorum to hold what they may reveal.
    pub fn reads_wait(&self) -> bool {
        self.visibility != Visibility::Commit && !self.passthrough
    }

    /// Whether replicas without semisync get a transaction only once the quorum holds it.
    pub fn async_held_back(&self) -> bool {
        self.async_replicas == AsyncReplicas::AfterQuorum && !self.passthrough
    }

    /// Whether a transaction's reads from its snapshot may be bounded once, by the snapshot.
    pub fn snapshot_reads(&self) -> bool {
        self.visibility == Visibility::Snapshot && !self.passthrough
    }
}

// === impl Outcome ===

impl Outcome {
    /// Label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Quorum => "quorum",
            Outcome::Timeout => "timeout",
            Outcome::Degraded => "degraded",
            Outcome::Unresolved => "unresolved",
            Outcome::ClientGone => "client_gone",
            Outcome::Shutdown => "shutdown",
            Outcome::NoneAsked => "none_asked",
        }
    }

    /// Its place in [`OUTCOMES`].
    pub fn index(self) -> usize {
        OUTCOMES.iter().position(|o| *o == self).unwrap_or(0)
    }
}

// === impl State ===

impl State {
    /// Label for logs, metrics and `/status`.
    pub fn label(&self) -> &'static str {
        match self {
            State::Strong => "strong",
            State::Degraded => "degraded",
        }
    }
}

// === impl OnTimeout / WithoutQuorum ===

impl fmt::Display for OnTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnTimeout::Degrade => "degrade",
            OnTimeout::Block => "block",
            OnTimeout::Error => "error",
        })
    }
}

impl fmt::Display for WithoutQuorum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WithoutQuorum::Wait => "wait",
            WithoutQuorum::Immediate => "immediate",
        })
    }
}

impl fmt::Display for Visibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Visibility::Commit => "commit",
            Visibility::Quorum => "quorum",
            Visibility::Snapshot => "snapshot",
        })
    }
}

impl FromStr for Visibility {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "commit" => Ok(Visibility::Commit),
            "quorum" => Ok(Visibility::Quorum),
            "snapshot" => Ok(Visibility::Snapshot),
            other => Err(format!(
                "expected commit, quorum or snapshot, got {other:?}"
            )),
        }
    }
}

impl fmt::Display for AsyncReplicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AsyncReplicas::AfterQuorum => "after_quorum",
            AsyncReplicas::Immediate => "immediate",
        })
    }
}

impl FromStr for AsyncReplicas {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "after_quorum" => Ok(AsyncReplicas::AfterQuorum),
            "immediate" => Ok(AsyncReplicas::Immediate),
            other => Err(format!("expected after_quorum or immediate, got {other:?}")),
        }
    }
}

// === impl SessionQuorum ===

impl SessionQuorum {
    /// The quorum that applies.
    pub fn get(self) -> usize {
        match self {
            SessionQuorum::Taken(n) | SessionQuorum::BelowFloor(n) | SessionQuorum::AboveMax(n) => {
                n
            }
        }
    }
}

impl FromStr for OnTimeout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "degrade" => Ok(OnTimeout::Degrade),
            "block" => Ok(OnTimeout::Block),
            "error" => Ok(OnTimeout::Error),
            other => Err(format!("expected degrade, block or error, got {other:?}")),
        }
    }
}

impl FromStr for WithoutQuorum {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "wait" => Ok(WithoutQuorum::Wait),
            "immediate" => Ok(WithoutQuorum::Immediate),
            other => Err(format!("expected wait or immediate, got {other:?}")),
        }
    }
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            quorum: 1,
            ack_timeout: Duration::from_secs(10),
            on_timeout: OnTimeout::Degrade,
            without_quorum: WithoutQuorum::Wait,
            ack_nudge_after: Duration::from_secs(1),
            gtid_index_capacity: 100_000,
            passthrough: false,
            visibility: Visibility::Commit,
            quorum_zones: 0,
            cross_zone: false,
            session_quorum_floor: None,
            session_quorum_max: 64,
            async_replicas: AsyncReplicas::AfterQuorum,
        }
    }
}
