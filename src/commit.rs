//! What a session reports when the primary tells it that it committed, the hook that decides
//! when (and how) the response carrying that news may go to the client, and the error a client
//! gets when its commit did not reach its quorum.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use strongsync_proto::gtid::Gtid;

/// Transactions a response reported (or may have) committed for this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The primary's id for the connection (`CONNECTION_ID()`).
    pub connection_id: u32,
    /// The GTIDs, in the order the response reported them (or the bound read after it).
    pub gtids: Vec<Gtid>,
    /// Set if the response may have committed something that neither its GTIDs nor a bound
    /// read after it cover; `gtids` then holds only what was learnt.
    pub unresolved: Option<Unresolved>,
    /// What waits: a commit's OK, or (`visibility = "quorum"`) a response that only reads.
    pub kind: WaitKind,
    /// How many of `gtids`, from the first, are the session's own (reported, or bounding what
    /// it may have committed); the rest bound what the response may reveal of others'.
    pub own: usize,
    /// The quorum the session asked for (`@strongsync_quorum`), if it did; bounded by the
    /// settings when the commit waits. Reads always wait for the configured quorum.
    pub quorum: Option<usize>,
    /// The epoch of the session's connection to the primary: a commit of an epoch that is over
    /// happened on a retired primary and is never acknowledged.
    pub epoch: u64,
}

/// What a wait holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// A response that reported (or may have reported) a commit of its session.
    Commit,
    /// A response that reported none, held until the quorum holds every transaction it could
    /// reveal (`gtids` is the primary's binlog position read after it arrived).
    Read,
}

/// Why what a response committed could not be learnt before it had to be released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// A legacy EOF flagged a change and, in the same response, a `LOAD DATA LOCAL INFILE`
    /// request followed: the client had to see everything before it, and nothing can be asked
    /// on the connection until the response is over.
    HiddenBeforeInfile,
    /// A legacy EOF flagged a change and more than this many bytes followed in the same
    /// response (`limits.max_held_response_bytes`).
    HeldPastLimit {
        /// The limit.
        limit: usize,
    },
    /// The primary would not say what the session committed last (the bound query failed).
    BoundUnreadable {
        /// What it answered.
        error: String,
    },
    /// The primary did not report what the response committed, and cannot be asked (MySQL
    /// has no `@@last_gtid`), for this reason.
    Unreported {
        /// Why it went unreported.
        why: &'static str,
    },
    /// `visibility = "quorum"`: the probe could not read the primary's binlog position within
    /// `ack_timeout`, so what the response may reveal is not known.
    ReadUnbounded {
        /// The probe's last error.
        error: String,
    },
}

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

/// Decides when a response that reported a commit may be released to the client.
pub trait CommitHook: Send + Sync + 'static {
    /// Called before the first packet that reported `commit` (and anything after it in the
    /// same response) is released; the packets are held until the future completes. Dropping
    /// the future (client gone, shutdown) must clean up after it.
    fn on_commit(&self, commit: Commit) -> BoxFuture<'static, Release>;
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unresolved::HiddenBeforeInfile => f.write_str(
                "a legacy EOF hid what a statement committed and a LOCAL INFILE request followed in the same response",
            ),
            Unresolved::HeldPastLimit { limit } => write!(
                f,
                "a legacy EOF hid what a statement committed and more than {limit} bytes followed (limits.max_held_response_bytes)"
            ),
            Unresolved::BoundUnreadable { error } => {
                write!(f, "the primary would not say what the session committed: {error}")
            }
            Unresolved::Unreported { why } => write!(
                f,
                "the primary did not report what the session committed ({why}) and cannot be asked"
            ),
            Unresolved::ReadUnbounded { error } => write!(
                f,
                "the probe could not read the primary's binlog position to bound the response: {error}"
            ),
        }
    }
}
