//! How a commit's wait ended: released with its OK, or cut off without its quorum and why.

use std::fmt;
use std::time::Duration;

/// What to do with the held part of a response once the hook is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Send it as the primary wrote it.
    Proceed,
    /// Replace it with an error saying the commit did not reach its quorum (the rest of the
    /// response is dropped).
    Fail(NotAcknowledged),
}

/// A commit released without its quorum, with an error for its client: `on_timeout = error`,
/// the proxy shutting down with the commit still parked, or the fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct NotAcknowledged {
    /// The GTIDs, comma-separated.
    pub gtids: String,
    /// The quorum it needed.
    pub quorum: usize,
    /// How long it waited.
    pub waited: Duration,
    /// Why it was released.
    pub cause: Cutoff,
    /// A response held by the read barrier, not a commit of the client's.
    pub read: bool,
}

/// What ended a wait without its quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cutoff {
    /// The timeout policy (`on_timeout = error`).
    Timeout,
    /// The proxy is shutting down.
    Shutdown,
    /// strongsync fenced the primary of this epoch: the commit happened there and will never
    /// be acknowledged; whether it survives the failover is not known.
    Fenced {
        /// The fenced primary's epoch.
        epoch: u64,
    },
    /// This instance lost its cluster's lease while the commit waited: it releases nothing;
    /// the leader knows what became of it.
    NotLeading {
        /// The commit's epoch.
        epoch: u64,
    },
}

impl fmt::Display for NotAcknowledged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let NotAcknowledged {
            gtids,
            quorum,
            waited,
            cause,
            read,
        } = self;
        match cause {
            Cutoff::NotLeading { epoch } => {
                return write!(f, "this strongsync instance lost its cluster's lease (epoch {epoch}) while transaction(s) {gtids} waited: not acknowledged here, though the replicas may hold them (ask the leader: strongsync outcome {gtids})");
            }
            Cutoff::Timeout => {}
            Cutoff::Shutdown => f.write_str("proxy shutting down: ")?,
            Cutoff::Fenced { epoch } => {
                return if *read {
                    write!(f, "primary fenced (epoch {epoch}): response withheld, it may reveal transaction(s) {gtids}, which were never acknowledged")
                } else {
                    write!(f, "primary fenced (epoch {epoch}): transaction {gtids} committed on the fenced primary but was not acknowledged: {quorum} replica(s) did not hold it; its outcome is unknown (ask: strongsync outcome {gtids})")
                };
            }
        }
        if *read {
            write!(f, "response withheld: it may reveal transaction(s) {gtids}, which {quorum} replica(s) did not hold within {waited:?}; the statement itself ran on the primary (roll back a transaction it is part of)")
        } else {
            write!(f, "transaction {gtids} committed on the primary but was not acknowledged: {quorum} replica(s) did not hold it within {waited:?}; it may be lost if the primary fails")
        }
    }
}
