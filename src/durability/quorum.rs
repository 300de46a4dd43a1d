//! Quorum math: the highest binlog position at least `k` replicas have acknowledged. Pure: no
//! time, no locks, no I/O.

use smallvec::SmallVec;
use strongsync_proto::position::Position;

/// The k-th highest of the replicas' acknowledged positions: every replica counted has the
/// binlog at least up to it, and at least `k` of them do. `None` while fewer than `k`
/// replicas have acknowledged anything (a replica that has not is passed as `None`), and for
/// `k == 0`.
pub fn quorum_position(
    acked: impl IntoIterator<Item = Option<Position>>,
    k: usize,
) -> Option<Position> {
    if k == 0 {
        return None;
    }
    // Replicas are few: their positions fit on the stack, so an ACK allocates nothing.
    let mut positions: SmallVec<[Position; 8]> = acked.into_iter().flatten().collect();
    if positions.len() < k {
        return None;
    }
    // Only the k-th largest is needed: a partial sort keeps this linear.
    let at = positions.len() - k;
    let (_, kth, _) = positions.select_nth_unstable(at);
    Some(*kth)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn p(file_seq: u64, offset: u64) -> Option<Position> {
        Some(Position { file_seq, offset })
    }

    #[test]
    fn table() {
        // (acknowledged positions, k, quorum position)
        let table: Vec<(Vec<Option<Position>>, usize, Option<Position>)> = vec![
            (vec![], 1, None),
            (vec![None, None], 1, None),
            (vec![p(1, 100)], 1, p(1, 100)),
            (vec![p(1, 100)], 2, None),
            (vec![p(1, 100), None], 2, None),
            (vec![p(1, 100), p(1, 300)], 1, p(1, 300)),
            (vec![p(1, 100), p(1, 300)], 2, p(1, 100)),
            (vec![p(1, 900), p(2, 4)], 1, p(2, 4)), // a later file beats a larger offset
            (vec![p(2, 4), p(1, 900)], 2, p(1, 900)),
            (vec![p(1, 5), p(1, 5), p(1, 7)], 2, p(1, 5)),
            (vec![p(1, 5), None, p(1, 7)], 2, p(1, 5)),
            (vec![p(1, 5), p(1, 6), p(1, 7)], 0, None),
            (
                vec![p(3, 1), p(1, 1), p(2, 1), p(4, 1), p(5, 1)],
                3,
                p(3, 1),
            ),
        ];
        for (acked, k, want) in table {
            assert_eq!(quorum_position(acked.clone(), k), want, "{acked:?} k={k}");
        }
    }

    fn arb_position() -> impl Strategy<Value = Option<Position>> {
        prop::option::of(
            (1u64..4, 0u64..1000).prop_map(|(file_seq, offset)| Position { file_seq, offset }),
        )
    }

    proptest! {
        #[test]
        fn equals_the_kth_highest(acked in prop::collection::vec(arb_position(), 0..8), k in 1usize..5) {
            let mut sorted: Vec<Position> = acked.iter().flatten().copied().collect();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let want = sorted.get(k - 1).copied();
            prop_assert_eq!(quorum_position(acked.clone(), k), want);
            if let Some(q) = want {
                prop_assert!(acked.iter().flatten().filter(|a| **a >= q).count() >= k);
            }
        }

        #[test]
        fn never_decreases_as_acks_arrive(
            replicas in 1usize..5,
            k in 1usize..4,
            acks in prop::collection::vec((0usize..5, 1u64..4, 0u64..1000), 0..40),
        ) {
            // Each replica keeps its highest acknowledgement (ACKs are cumulative).
            let mut acked: Vec<Option<Position>> = vec![None; replicas];
            let mut last = quorum_position(acked.clone(), k);
            for (r, file_seq, offset) in acks {
                let slot = &mut acked[r % replicas];
                let ack = Position { file_seq, offset };
                *slot = Some(slot.map_or(ack, |held| held.max(ack)));
                let now = quorum_position(acked.clone(), k);
                prop_assert!(now >= last, "{last:?} -> {now:?}");
                last = now;
            }
        }
    }
}
