//! What strong sync's settings mean for a commit (the rule it waits for, the bounds of a
//! session's own quorum, which waits are on), and the words for what happens to a commit: the
//! STRONG/DEGRADED state and how a parked commit was released.

use super::quorum::QuorumRule;
use crate::config::{AsyncReplicas, DurabilityConfig, Visibility};

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
    /// strongsync fenced the primary while it waited (or before it came): released with the
    /// fence's error.
    Fenced,
    /// This instance did not hold its cluster's lease when it would have released it:
    /// answered with an error naming what it committed.
    NotLeading,
}

/// Every outcome, in the order of the counters.
pub const OUTCOMES: [Outcome; 9] = [
    Outcome::Quorum,
    Outcome::Timeout,
    Outcome::Degraded,
    Outcome::Unresolved,
    Outcome::ClientGone,
    Outcome::Shutdown,
    Outcome::NoneAsked,
    Outcome::Fenced,
    Outcome::NotLeading,
];

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
            Outcome::Fenced => "fenced",
            Outcome::NotLeading => "not_leading",
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
