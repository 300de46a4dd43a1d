//! How far a replica holds the binlog, read off the stream the primary sends it.

use std::collections::VecDeque;

use strongsync_proto::position::Position;

// A primary reads its binlog for each replica's dump and sends it every transaction it lacks,
// skipping the ones its connect state says it has. So once every transaction sent has been
// ACKed, the replica holds everything up to where the stream shows the primary has read (the
// end of the last event sent, a heartbeat's position, the artificial GTID_LIST a MariaDB
// primary sends when it reaches the replica's own position); while one is not ACKed,
// everything before it. This is exact across replication domains, where a connect state
// turned into a single position would not be. Pure: no time, no locks.

/// Transactions sent and not ACKed that are followed one by one; past this the stream
/// only counts what is ACKed until the replica has caught up.
const OUTSTANDING_KEPT: usize = 4096;

/// One replica's coverage.
#[derive(Debug, Clone, Default)]
pub struct StreamCoverage {
    /// Transactions sent and not ACKed, oldest first: where each starts (when known)
    /// and where it ends (once its last event was sent).
    outstanding: VecDeque<(Option<Position>, Option<Position>)>,
    /// Set when too many were outstanding to follow: the end of the last transaction sent.
    overflowed: Option<Position>,
    /// The furthest position the stream has shown.
    read_through: Option<Position>,
    /// The highest ACK.
    acked: Option<Position>,
    /// The coverage last reported.
    reported: Option<Position>,
}

// === impl StreamCoverage ===

impl StreamCoverage {
    /// Coverage of a stream that has not started.
    pub fn new() -> Self {
        Self::default()
    }

    /// A transaction starting at `start` (its GTID event) was sent.
    pub fn transaction_started(&mut self, start: Position) -> Option<Position> {
        self.push(Some(start), None);
        self.report()
    }

    /// The event ending a transaction was sent; it ends at `end`.
    pub fn transaction_ended(&mut self, end: Position) -> Option<Position> {
        match self.outstanding.back_mut() {
            Some((_, open @ None)) => *open = Some(end),
            _ => self.push(None, Some(end)),
        }
        if let Some(overflowed) = &mut self.overflowed {
            *overflowed = (*overflowed).max(end);
        }
        self.read_through(end)
    }

    /// The stream showed that the primary has read its binlog through `position`: an event
    /// sent ended there, or a heartbeat or artificial event said so.
    pub fn read_through(&mut self, position: Position) -> Option<Position> {
        self.read_through = self.read_through.max(Some(position));
        self.report()
    }

    /// The replica ACKed everything up to `position`.
    pub fn acked(&mut self, position: Position) -> Option<Position> {
        self.acked = self.acked.max(Some(position));
        while self
            .outstanding
            .front()
            .is_some_and(|(_, end)| end.is_some_and(|end| end <= position))
        {
            self.outstanding.pop_front();
        }
        if self.overflowed.is_some_and(|last| last <= position) {
            self.overflowed = None;
        }
        self.report()
    }

    /// The position through which the replica holds every transaction.
    pub fn covered(&self) -> Option<Position> {
        let base = if self.overflowed.is_some() {
            None
        } else {
            match self.outstanding.front() {
                Some((start, _)) => *start,
                None => self.read_through,
            }
        };
        base.max(self.acked)
    }

    fn push(&mut self, start: Option<Position>, end: Option<Position>) {
        if self.overflowed.is_some() {
            return;
        }
        if self.outstanding.len() == OUTSTANDING_KEPT {
            // Which of them the next ACKs cover can no longer be told exactly:
            // from here only ACKs count, until the replica has everything sent.
            let last = self.outstanding.iter().filter_map(|(_, end)| *end).max();
            self.outstanding.clear();
            self.overflowed = Some(last.max(end).max(self.read_through).unwrap_or_default());
            return;
        }
        self.outstanding.push_back((start, end));
    }

    /// The coverage, if it grew since last reported.
    fn report(&mut self) -> Option<Position> {
        let covered = self.covered();
        (covered > self.reported).then(|| {
            self.reported = covered;
            covered.expect("greater than something")
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::durability::testing::at as p;

    #[test]
    fn skipped_transactions_are_held_sent_ones_once_acked() {
        let mut c = StreamCoverage::new();
        // Preamble: the FORMAT_DESCRIPTION_EVENT of the first file read.
        assert_eq!(c.read_through(p(256)), Some(p(256)));
        // The primary skipped what the replica had and sends a transaction at 1000..1200.
        assert_eq!(c.transaction_started(p(1000)), Some(p(1000)));
        assert_eq!(c.read_through(p(1100)), None, "inside the transaction");
        assert_eq!(c.transaction_ended(p(1200)), None);
        // A second one, 1200..1400, before the first is ACKed.
        assert_eq!(c.transaction_started(p(1200)), None);
        assert_eq!(c.transaction_ended(p(1400)), None);
        assert_eq!(c.covered(), Some(p(1000)));
        assert_eq!(c.acked(p(1200)), Some(p(1200)));
        // A heartbeat: the primary read through 1900 (it skipped 1400..1900).
        assert_eq!(c.read_through(p(1900)), None, "1200..1400 not ACKed yet");
        assert_eq!(c.acked(p(1400)), Some(p(1900)));
        assert_eq!(c.acked(p(1400)), None, "reported once");
    }

    #[test]
    fn an_ack_inside_an_open_transaction_covers_only_what_it_says() {
        let mut c = StreamCoverage::new();
        c.transaction_started(p(100));
        c.read_through(p(150));
        assert_eq!(c.acked(p(150)), Some(p(150)));
        c.transaction_ended(p(200));
        c.read_through(p(250));
        assert_eq!(c.acked(p(200)), Some(p(250)));
    }

    #[test]
    fn past_what_it_follows_only_acks_count_until_it_caught_up() {
        let mut c = StreamCoverage::new();
        for i in 0..=OUTSTANDING_KEPT as u64 {
            c.transaction_started(p(100 + i * 10));
            c.transaction_ended(p(105 + i * 10));
        }
        let last = p(105 + OUTSTANDING_KEPT as u64 * 10);
        assert_eq!(c.covered(), None, "only ACKs count now");
        assert_eq!(c.read_through(p(1_000_000)), None);
        assert_eq!(c.acked(p(205)), Some(p(205)));
        assert_eq!(c.acked(last), Some(p(1_000_000)), "caught up");
    }

    proptest! {
        /// Whatever the stream, coverage never reaches the end of a transaction sent and not
        /// ACKed, and never goes back.
        #[test]
        fn never_covers_a_transaction_not_acked(
            steps in prop::collection::vec((0u8..4, 1u64..50), 1..300),
        ) {
            let mut c = StreamCoverage::new();
            let mut at = 4u64;
            let mut open: Option<u64> = None;
            let mut unacked: Vec<(u64, u64)> = Vec::new();
            let mut last = None;
            for (kind, len) in steps {
                match kind {
                    0 if open.is_none() => {
                        open = Some(at);
                        c.transaction_started(p(at));
                    }
                    1 => {
                        at += len;
                        if let Some(start) = open.take() {
                            unacked.push((start, at));
                            c.transaction_ended(p(at));
                        } else {
                            c.read_through(p(at));
                        }
                    }
                    2 => {
                        at += len;
                        c.read_through(p(at));
                    }
                    _ => {
                        let sent = unacked.iter().map(|(_, e)| *e).max().unwrap_or(4);
                        let ack = sent.saturating_sub(len % 3 * 10).max(4);
                        unacked.retain(|(_, end)| *end > ack);
                        c.acked(p(ack));
                    }
                }
                let covered = c.covered();
                if let Some(covered) = covered {
                    for (_, end) in &unacked {
                        prop_assert!(p(*end) > covered, "{covered} covers one ending at {end}");
                    }
                }
                prop_assert!(covered >= last);
                last = covered;
            }
        }
    }
}
