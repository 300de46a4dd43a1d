//! What one response reported about commits, and which part of it the session holds back
//! until strong sync lets it go: from the packet that brought news, from the packet after
//! which the session must be checked (see [`super::tracking`]), or — under the read barrier
//! (`visibility = "quorum"`) — from the first packet not yet released.

use strongsync_proto::gtid::Gtid;

use super::tracking::CheckReason;
use crate::commit::{Commit, Unresolved, WaitKind};
use crate::durability::GtidPosition;

/// What one response reported about commits, and which part of it is held for them.
#[derive(Debug, Default)]
pub(super) struct ResponseCommits {
    gtids: Vec<Gtid>,
    unresolved: Option<Unresolved>,
    /// The response is checked once it is over (see [`super::tracking`]).
    pub check: Option<CheckReason>,
    /// Until that check, nothing more is released.
    pub holding: bool,
    /// The read barrier: every release waits for a bound read after what it releases.
    pub barrier: bool,
    /// Something of the session's own commits is among the news (else the news is a bound).
    own: bool,
    /// How many of `gtids`, from the first, are the session's own.
    own_gtids: usize,
    /// The packet the held part starts with (the first that reported news).
    hold: Option<Mark>,
    /// The last packet queued for the client.
    last: Option<Mark>,
    /// The client was told the commit failed: the rest of the response is not relayed.
    pub discard: bool,
}

/// Where a packet starts in the client's write queue, and its sequence id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    pub offset: usize,
    pub seq: u8,
}

// === impl ResponseCommits ===

impl ResponseCommits {
    /// Nothing reported yet; `barrier`: every release waits for a bound read after it.
    pub(super) fn new(barrier: bool) -> Self {
        ResponseCommits {
            barrier,
            ..ResponseCommits::default()
        }
    }

    /// The response must be checked once it is over; from now on it is held until then.
    pub(super) fn need_check(&mut self, reason: CheckReason) {
        self.check.get_or_insert(reason);
        self.holding = true;
    }

    /// What is held goes without a check: whatever it may have committed and was not learnt
    /// is released as unresolved.
    pub(super) fn give_up(&mut self, reason: Unresolved) {
        self.holding = false;
        self.own = true;
        self.unresolved.get_or_insert(reason);
    }

    /// The read barrier could not bound what is held: it goes as unresolved.
    pub(super) fn unbounded(&mut self, reason: Unresolved) {
        self.unresolved.get_or_insert(reason);
    }

    /// What is held goes, bounded by the primary's binlog position read after it arrived: every
    /// GTID of it is waited for.
    pub(super) fn bounded(&mut self, bound: &GtidPosition) {
        self.holding = false;
        self.own = true;
        self.gtids.extend(bound.gtids().map(|g| Gtid::Maria(*g)));
        self.own_gtids = self.gtids.len();
    }

    /// Under the read barrier, what is queued may reveal every transaction `bound` holds.
    pub(super) fn bounded_read(&mut self, bound: &GtidPosition) {
        self.gtids.extend(bound.gtids().map(|g| Gtid::Maria(*g)));
    }

    /// The response reported a commit of `gtid`.
    pub(super) fn reported(&mut self, gtid: Gtid) {
        self.own = true;
        self.gtids.push(gtid);
        self.own_gtids = self.gtids.len();
    }

    /// True if something must be reported before the held packets are released.
    pub(super) fn has_news(&self) -> bool {
        !self.gtids.is_empty() || self.unresolved.is_some()
    }

    /// Notes the packet about to be queued.
    pub(super) fn queued(&mut self, mark: Mark) {
        self.last = Some(mark);
    }

    /// If there is news (or the response is held) and nothing is held yet, holds from the
    /// last packet queued: the one that brought it.
    pub(super) fn hold_if_news(&mut self) {
        if self.hold.is_none() && (self.has_news() || self.holding || self.barrier) {
            self.hold = self.last;
        }
    }

    /// What was queued has been written: nothing is held any more.
    pub(super) fn flushed(&mut self) {
        if !self.holding {
            self.hold = None;
        }
    }

    /// Takes what has been reported so far, with the packet the held part starts at.
    pub(super) fn take(&mut self, connection_id: u32) -> (Commit, Option<Mark>) {
        let kind = if std::mem::take(&mut self.own) {
            WaitKind::Commit
        } else {
            WaitKind::Read
        };
        let commit = Commit {
            connection_id,
            gtids: std::mem::take(&mut self.gtids),
            unresolved: self.unresolved.take(),
            kind,
            own: std::mem::take(&mut self.own_gtids),
        };
        (commit, self.hold.take())
    }
}
