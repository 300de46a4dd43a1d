//! The outcome of one commit, by its GTID, for a client whose commit was cut off (the fence,
//! the primary lost, a shutdown) and for a failover manager checking after the fact.

use strongsync_proto::gtid::Gtid;

use super::inner::{Inner, Plan};

/// What became of a transaction, as far as strongsync knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GtidOutcome {
    /// Parked now, waiting for its quorum.
    Waiting,
    /// Committed on a fenced primary and not held by the quorum: errant on any replica that
    /// has it once another primary takes over.
    Tail,
    /// Acknowledged to its client without its quorum; `held` if the quorum holds it now.
    ReleasedWithoutQuorum {
        /// The acknowledged watermark has since passed it.
        held: bool,
    },
    /// Acknowledged to its client with its quorum, or (committed past strongsync's clients)
    /// held by the quorum of the replicas strongsync knows.
    Acknowledged,
    /// strongsync has no record of it (it may predate strongsync's records, have been
    /// committed past it, or have been cut off before its GTID was known).
    Unknown,
}

impl GtidOutcome {
    /// Label for `/outcome` and the command line.
    pub fn label(&self) -> &'static str {
        match self {
            GtidOutcome::Waiting => "waiting",
            GtidOutcome::Tail => "unacknowledged_tail",
            GtidOutcome::ReleasedWithoutQuorum { .. } => "released_without_quorum",
            GtidOutcome::Acknowledged => "acknowledged",
            GtidOutcome::Unknown => "unknown",
        }
    }
}

// === impl Inner (outcome) ===

impl Inner {
    /// See [`Durability::outcome`](super::Durability::outcome).
    pub(super) fn outcome(&self, gtid: &Gtid) -> GtidOutcome {
        let inner = self;
        let exactly = !inner.watermark.inexact() && inner.watermark.exact().contains(gtid);
        if inner.waiters.all_gtids().any(|g| g == gtid) {
            GtidOutcome::Waiting
        } else if inner.tail.contains(gtid) {
            GtidOutcome::Tail
        } else if inner.released_without_quorum.contains(gtid) {
            GtidOutcome::ReleasedWithoutQuorum { held: exactly }
        } else if exactly
            || matches!(
                inner.plan(std::slice::from_ref(gtid), &inner.config.rule()),
                Plan::Held
            )
        {
            GtidOutcome::Acknowledged
        } else {
            GtidOutcome::Unknown
        }
    }
}
