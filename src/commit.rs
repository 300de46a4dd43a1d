//! What a session reports when the primary tells it that it committed, and the hook that
//! decides when (and how) the response carrying that news may go to the client.

use futures::future::BoxFuture;
use strongsync_proto::gtid::Gtid;

use crate::durability::NotAcknowledged;

/// Transactions a response reported as committed by this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The primary's id for the connection (`CONNECTION_ID()`).
    pub connection_id: u32,
    /// The GTIDs, in the order the response reported them.
    pub gtids: Vec<Gtid>,
    /// True if the response may have committed something whose GTID the proxy could not
    /// learn (see `README.md`, "Known limits"); `gtids` then holds only what was learnt.
    pub unresolved: bool,
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

/// Decides when a response that reported a commit may be released to the client.
pub trait CommitHook: Send + Sync + 'static {
    /// Called before the first packet that reported `commit` (and anything after it in the
    /// same response) is released; the packets are held until the future completes. Dropping
    /// the future (client gone, shutdown) must clean up after it.
    fn on_commit(&self, commit: Commit) -> BoxFuture<'static, Release>;
}
