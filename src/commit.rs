//! What a response reported about commits, in the words sessions and the flavours use to tell
//! strong sync what to wait for.

use std::fmt;

use std::sync::Arc;

use strongsync_proto::gtid::Gtid;
use strongsync_proto::ProtoError;

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
    /// The primary would not say what the session committed last.
    BoundUnreadable(Unsaid),
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
        error: Cause,
    },
}

/// Why the primary would not say what a session committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsaid {
    /// strongsync's query got an ERR.
    #[error("{err}")]
    Refused {
        /// The ERR as the primary sent it (`code message`).
        err: String,
    },
    /// `@@last_gtid` held what is no GTID.
    #[error("@@last_gtid {value:?}: {source}")]
    NotAGtid {
        /// What it held.
        value: String,
        /// Why it does not parse.
        source: ProtoError,
    },
}

/// An error kept as it was raised, shared by everything it answered (one probe reading
/// serves many sessions); two are the same cause only if they are the same error.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

// === impl Cause ===

impl Cause {
    /// The cause `error`.
    pub fn new(error: Arc<dyn std::error::Error + Send + Sync>) -> Self {
        Cause(error)
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Cause {}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
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
            Unresolved::BoundUnreadable(error) => {
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
