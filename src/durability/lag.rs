//! How far behind a replica is: binlog bytes and transactions between its ACKed
//! position and the newest transaction relayed. Learnt from the relayed stream (transaction
//! ends in order, and each file's size from its ROTATE). Bounded like the GTID index.

use std::collections::BTreeMap;

use strongsync_proto::position::Position;

/// Offset of the first event in a binlog file (after its 4-byte magic number).
const FIRST_EVENT: u64 = 4;

/// The book.
#[derive(Debug)]
pub(super) struct LagBook {
    /// Size of each finished binlog file (where its ROTATE ended it).
    file_ends: BTreeMap<u64, u64>,
    /// Transaction ends in binlog order, each with its ordinal.
    ends: BTreeMap<Position, u64>,
    next: u64,
    capacity: usize,
}

// === impl LagBook ===

impl LagBook {
    pub(super) fn new(capacity: usize) -> Self {
        LagBook {
            file_ends: BTreeMap::new(),
            ends: BTreeMap::new(),
            next: 0,
            capacity: capacity.max(1),
        }
    }

    /// A transaction end was relayed. Only a new newest one counts (replicas relay the same
    /// stream, and a lagging one relays old ends again).
    pub(super) fn transaction(&mut self, end: Position) {
        if self
            .ends
            .last_key_value()
            .is_some_and(|(last, _)| end <= *last)
        {
            return;
        }
        self.next += 1;
        self.ends.insert(end, self.next);
        while self.ends.len() > self.capacity {
            self.ends.pop_first();
        }
    }

    /// A binlog file ended at `end` (a ROTATE was relayed).
    pub(super) fn file_ended(&mut self, end: Position) {
        self.file_ends.insert(end.file_seq, end.offset);
        while self.file_ends.len() > self.capacity {
            self.file_ends.pop_first();
        }
    }

    /// Drops what no replica at or after `floor` needs (the entry at or before it stays: it
    /// numbers the transactions after it).
    pub(super) fn forget_before(&mut self, floor: Position) {
        while self.ends.len() > 1 {
            let mut keys = self.ends.keys();
            let (first, second) = (keys.next().copied(), keys.next().copied());
            match (first, second) {
                (Some(_), Some(second)) if second <= floor => {
                    self.ends.pop_first();
                }
                _ => break,
            }
        }
        self.file_ends.retain(|&seq, _| seq >= floor.file_seq);
    }

    /// Bytes of binlog from `acked` to `head`, if the sizes of the files between are known.
    pub(super) fn bytes_behind(&self, acked: Position, head: Position) -> Option<u64> {
        if acked >= head {
            return Some(0);
        }
        if acked.file_seq == head.file_seq {
            return Some(head.offset - acked.offset);
        }
        let mut bytes = self
            .file_ends
            .get(&acked.file_seq)?
            .checked_sub(acked.offset)?;
        for seq in acked.file_seq + 1..head.file_seq {
            bytes += self.file_ends.get(&seq)?.saturating_sub(FIRST_EVENT);
        }
        Some(bytes + head.offset.saturating_sub(FIRST_EVENT))
    }

    /// Transactions relayed after `acked`, if the book still goes back that far.
    pub(super) fn transactions_behind(&self, acked: Position) -> Option<u64> {
        let (_, newest) = self.ends.last_key_value()?;
        match self.ends.range(..=acked).next_back() {
            Some((_, at)) => Some(newest - at),
            // Before everything the book holds: only if nothing was dropped is it exact.
            None => (self.ends.first_key_value()?.1 == &1).then_some(*newest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(file_seq: u64, offset: u64) -> Position {
        Position { file_seq, offset }
    }

    #[test]
    fn counts_bytes_across_files_and_transactions() {
        let mut book = LagBook::new(100);
        for offset in [100, 200, 300] {
            book.transaction(p(1, offset));
        }
        book.file_ended(p(1, 1000));
        book.transaction(p(2, 150));
        book.transaction(p(1, 200)); // a lagging replica relaying an old one: ignored

        assert_eq!(book.bytes_behind(p(2, 150), p(2, 150)), Some(0));
        assert_eq!(book.bytes_behind(p(2, 100), p(2, 150)), Some(50));
        // 1:200 → end of file 1 (800) + file 2 up to 150 (146 past its magic number)
        assert_eq!(book.bytes_behind(p(1, 200), p(2, 150)), Some(800 + 146));
        assert_eq!(
            book.bytes_behind(p(0, 10), p(2, 150)),
            None,
            "file 0's size is unknown"
        );

        assert_eq!(book.transactions_behind(p(2, 150)), Some(0));
        assert_eq!(book.transactions_behind(p(1, 200)), Some(2));
        assert_eq!(book.transactions_behind(p(1, 250)), Some(2));
        assert_eq!(
            book.transactions_behind(p(1, 50)),
            Some(4),
            "before the first: all of them"
        );

        book.forget_before(p(1, 250));
        assert_eq!(
            book.transactions_behind(p(1, 200)),
            Some(2),
            "the entry at the floor stays"
        );
        assert_eq!(book.transactions_behind(p(1, 50)), None, "no longer known");
    }

    #[test]
    fn capacity_bounds_the_book() {
        let mut book = LagBook::new(3);
        for offset in 1..=10 {
            book.transaction(p(1, offset * 10));
        }
        assert_eq!(book.ends.len(), 3);
        assert_eq!(book.transactions_behind(p(1, 80)), Some(2));
    }
}
