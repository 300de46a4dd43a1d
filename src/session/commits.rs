//! What one response reported about commits, and which part of it the session holds back
//! until strong sync lets it go.

use std::sync::Arc;

use strongsync_proto::gtid::{Gtid, GtidPosition};
use strongsync_proto::ok::OkPacket;

use crate::barrier::snapshot;
use crate::commit::{Commit, Unresolved, WaitKind};
use crate::flavour::CheckReason;

// The held part starts at the packet that brought news, at the packet after which the session
// must be checked (see `crate::flavour::Tracker`), or, under the read barrier (`visibility =
// "quorum"`), at the first packet not yet released.

/// What one response reported about commits, and which part of it is held for them.
#[derive(Debug, Default)]
pub(super) struct ResponseCommits {
    gtids: Vec<Gtid>,
    unresolved: Option<Unresolved>,
    /// The response is checked once it is over (see [`crate::flavour::Tracker`]).
    check: Option<CheckReason>,
    /// Until that check, nothing more is released.
    holding: bool,
    /// The read barrier: every release waits for a bound read after what it releases.
    barrier: bool,
    /// Something of the session's own commits is among the news (else the news is a bound).
    own: bool,
    /// How many of `gtids`, from the first, are the session's own.
    own_gtids: usize,
    /// The packet the held part starts with (the first that reported news).
    hold: Option<Mark>,
    /// The last packet queued for the client.
    last: Option<Mark>,
    /// The client was told the commit failed: the rest of the response is not relayed.
    discard: bool,
    /// The bound of the snapshot the response reads from, if it is a single `SELECT` in a
    /// transaction covered by one (see [`crate::barrier`]).
    snapshot: Option<Arc<GtidPosition>>,
    /// Something in the response says its transaction may not read only its snapshot (or
    /// cannot say): an error, a state with other flags, an insert id, a check.
    leaves_snapshot: bool,
    /// An OK said a transaction started with a consistent snapshot and nothing else.
    took_snapshot: bool,
    /// The last bound the barrier read for what was released.
    last_bound: Option<Arc<GtidPosition>>,
}

/// Where a packet starts in the client's write queue, and its sequence id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    offset: usize,
    seq: u8,
}

// === impl Mark ===

impl Mark {
    pub(super) fn new(offset: usize, seq: u8) -> Self {
        Mark { offset, seq }
    }

    pub(super) fn offset(self) -> usize {
        self.offset
    }

    pub(super) fn seq(self) -> u8 {
        self.seq
    }
}

// === impl ResponseCommits ===

impl ResponseCommits {
    /// Nothing reported yet; `barrier`: every release waits for a bound read after it;
    /// `snapshot`: the bound of the snapshot the response reads from, if it reads only that.
    pub(super) fn new(barrier: bool, snapshot: Option<Arc<GtidPosition>>) -> Self {
        ResponseCommits {
            barrier,
            snapshot,
            ..ResponseCommits::default()
        }
    }

    /// The reason the response is to be checked, if it is: taken once, and from then on
    /// nothing is held for the check.
    pub(super) fn take_check(&mut self) -> Option<CheckReason> {
        self.holding = false;
        self.check.take()
    }

    /// Whether the response is held until its check.
    pub(super) fn holding(&self) -> bool {
        self.holding
    }

    /// Whether every release waits for a bound read after what it releases.
    pub(super) fn barrier(&self) -> bool {
        self.barrier
    }

    /// Whether the rest of the response is dropped: the client was told the commit failed.
    pub(super) fn discarded(&self) -> bool {
        self.discard
    }

    /// The client has its error: the rest of the response is not relayed.
    pub(super) fn discard(&mut self) {
        self.discard = true;
    }

    /// What is released now is not the whole response: it cannot go by its snapshot's bound.
    pub(super) fn not_whole(&mut self) {
        self.snapshot = None;
    }

    /// The bound of the snapshot the response reads from, if it read nothing else.
    pub(super) fn snapshot(&self) -> Option<&GtidPosition> {
        self.snapshot.as_deref().filter(|_| self.reads_snapshot())
    }

    /// Something said the transaction may not read only its snapshot any more.
    pub(super) fn leave_snapshot(&mut self) {
        self.leaves_snapshot = true;
    }

    /// Whether something in the response left the snapshot.
    pub(super) fn leaves_snapshot(&self) -> bool {
        self.leaves_snapshot
    }

    /// The response must be checked once it is over; from now on it is held until then.
    pub(super) fn need_check(&mut self, reason: CheckReason) {
        self.check.get_or_insert(reason);
        self.holding = true;
        self.leaves_snapshot = true;
    }

    /// Takes in what an OK says about the session's transaction.
    pub(super) fn transaction_reported(&mut self, ok: &OkPacket<'_>) {
        if ok.last_insert_id != 0 {
            self.leaves_snapshot = true;
        }
        if let Some(state) = ok.transaction_state() {
            if !snapshot::state_reads_snapshot_only(state) {
                self.leaves_snapshot = true;
            }
            self.took_snapshot = state == snapshot::SNAPSHOT_TAKEN
                && ok.transaction_characteristics() == Some(snapshot::SNAPSHOT_CHARACTERISTICS);
        }
    }

    /// Whether the response, once over, may go without a bound of its own if the quorum holds
    /// its snapshot's: nothing in it said otherwise, and it brought no news to wait for.
    fn reads_snapshot(&self) -> bool {
        self.snapshot.is_some() && !self.leaves_snapshot && self.check.is_none() && !self.has_news()
    }

    /// The bound of the snapshot the response started, if it started one: it said so, and the
    /// read barrier bounded it.
    pub(super) fn snapshot_taken(&self) -> Option<&Arc<GtidPosition>> {
        self.last_bound
            .as_ref()
            .filter(|_| self.barrier && self.took_snapshot && !self.leaves_snapshot)
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
        self.last_bound = None;
    }

    /// What is held goes, bounded by the primary's binlog position read after it arrived: every
    /// GTID of it is waited for.
    pub(super) fn bounded(&mut self, bound: &GtidPosition) {
        self.holding = false;
        self.own = true;
        self.gtids.extend(bound.newest_gtids());
        self.own_gtids = self.gtids.len();
    }

    /// Under the read barrier, what is queued may reveal every transaction `bound` holds.
    pub(super) fn bounded_read(&mut self, bound: &Arc<GtidPosition>) {
        self.gtids.extend(bound.newest_gtids());
        self.last_bound = Some(Arc::clone(bound));
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

    /// Takes what has been reported so far, with the packet the held part starts at; `quorum`
    /// is what the session asked for, if it did, and `epoch` that of its primary connection.
    pub(super) fn take(
        &mut self,
        connection_id: u32,
        quorum: Option<usize>,
        epoch: u64,
    ) -> (Commit, Option<Mark>) {
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
            quorum,
            epoch,
        };
        (commit, self.hold.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_reads_only_its_snapshot_until_something_says_otherwise() {
        let bound = Arc::new(GtidPosition::default());
        let reads = ResponseCommits::new(true, Some(Arc::clone(&bound)));
        assert_eq!(reads.snapshot(), Some(&*bound));
        let mut left = ResponseCommits::new(true, Some(Arc::clone(&bound)));
        left.leave_snapshot();
        assert_eq!(
            left.snapshot(),
            None,
            "an error, another state, an insert id"
        );
        let mut news = ResponseCommits::new(true, Some(bound));
        news.reported(Gtid::parse(b"0-1-8").unwrap());
        assert_eq!(news.snapshot(), None, "news to wait for");
        assert_eq!(ResponseCommits::new(true, None).snapshot(), None);
    }
}
