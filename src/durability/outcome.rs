//! The outcome of one commit, by its GTID, for a client whose commit was cut off (the fence,
//! the primary lost, a shutdown) and for a failover manager checking after the fact.

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
        /// The watermark has since passed it.
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
