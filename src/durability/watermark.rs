//! The watermark: every transaction the quorum has held, as a position and as an exact set.

use std::sync::Arc;

use strongsync_proto::gtid::{Domain, Gtid, GtidPosition, GtidSet};
use tracing::warn;

/// The watermark: the commits acknowledged to their clients, and every transaction relayed
/// before the quorum position (a heartbeat writer's, the event scheduler's, a DBA's direct
/// write), so that it has no gaps where strongsync's clients did not commit. Kept two ways: as a
/// position, which a new primary must cover (compared by identity), and as an exact set, which
/// the commit outcome reads. Bounded per source by `limits.max_gtid_intervals`: past it the
/// watermark can no longer be kept exact, holds more than the quorum held (never less), and
/// says so; follow and promote then refuse, and the outcome of a GTID it does not know exactly
/// is unknown.
#[derive(Debug)]
pub(super) struct Watermark {
    position: Arc<GtidPosition>,
    exact: GtidSet,
    /// Intervals one source (or MariaDB domain and server) keeps exactly.
    max_intervals: usize,
    /// It passed its bound: it holds more than the quorum held.
    inexact: bool,
}

// === impl Watermark ===

impl Watermark {
    pub(super) fn new(max_intervals: usize) -> Self {
        Watermark {
            position: Arc::default(),
            exact: GtidSet::default(),
            max_intervals,
            inexact: false,
        }
    }

    /// The watermark as a position (shared with status snapshots, copied on write).
    pub(super) fn position(&self) -> &Arc<GtidPosition> {
        &self.position
    }

    /// The watermark as an exact set of GTIDs.
    pub(super) fn exact(&self) -> &GtidSet {
        &self.exact
    }

    /// It passed its bound and holds more than the quorum held.
    pub(super) fn inexact(&self) -> bool {
        self.inexact
    }

    /// The quorum holds `gtid`.
    pub(super) fn take(&mut self, gtid: Gtid) {
        self.take_range(gtid.domain, gtid.server_id, gtid.seq_no, gtid.seq_no);
    }

    /// The quorum holds every GTID of `domain` (and MariaDB `server_id`) numbered `start` to
    /// `end`.
    pub(super) fn take_range(&mut self, domain: Domain, server_id: u32, start: u64, end: u64) {
        let max = self.max_intervals;
        let position =
            Arc::make_mut(&mut self.position).add_range_within(domain, server_id, start, end, max);
        let exact = self
            .exact
            .insert_range_within(domain, server_id, start, end, max);
        let exact = position && exact;
        if !exact && !self.inexact {
            self.inexact = true;
            warn!(
                max_intervals = max,
                "the watermark has more gaps than limits.max_gtid_intervals: it holds more than the quorum held from now on, and follow and promote refuse until strongsync restarts with a higher bound"
            );
        }
    }

    /// Takes in what a previous run kept.
    pub(super) fn restore(&mut self, position: &GtidPosition, exact: &GtidSet, inexact: bool) {
        Arc::make_mut(&mut self.position).extend(position);
        self.exact.extend(exact);
        self.inexact |= inexact;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(text: &str) -> Gtid {
        text.parse().unwrap()
    }

    /// 100,000 gaps, as a MySQL source gets them from GTIDs no client of strongsync committed
    /// and the quorum never passed: the last GTID the quorum held is in the position and the exact
    /// set, and the cost is measured (docs/failover.md gives the figure).
    #[test]
    fn a_hundred_thousand_gaps_keep_the_last_held_gtid() {
        const GAPS: u64 = 100_000;
        const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mut w = Watermark::new(1_000_000);
        for n in 1..=GAPS {
            w.take(g(&format!("{UUID}:{}", n * 2)));
        }
        let last = g(&format!("{UUID}:{}", 2 * GAPS));
        assert!(!w.inexact());
        assert!(w.position().holds(&last) && w.exact().contains(&last));
        assert!(!w.exact().contains(&g(&format!("{UUID}:{}", 2 * GAPS - 1))));
        let lacking = GtidPosition::of(&[g(&format!("{UUID}:{}", 2 * GAPS - 2))]);
        assert!(
            !lacking.covers(w.position()),
            "a server lacking it is told apart"
        );
        let bytes = w.position().heap_bytes() + w.exact().heap_bytes();
        eprintln!("{GAPS} gaps: {bytes} heap bytes (position and exact set)");
        assert!(bytes <= 8 << 20, "{bytes}");
    }

    #[test]
    fn past_its_bound_it_holds_more_and_says_so() {
        let mut w = Watermark::new(2);
        for text in ["0-1-1", "0-1-3", "0-1-5"] {
            w.take(g(text));
        }
        assert!(w.inexact());
        assert!(["0-1-1", "0-1-3", "0-1-5"]
            .iter()
            .all(|t| w.exact().contains(&g(t))));
    }
}
