//! Quorum math: whether a set of replicas meets a quorum rule (how many, across how many zones,
//! one outside the primary's zone), and the highest binlog position a set of replicas meeting
//! it has ACKed. Pure: no time, no locks, no I/O.

use std::fmt;

use smallvec::SmallVec;
use strongsync_proto::position::Position;

/// What a transaction needs before its commit is acknowledged: `count` replicas holding it,
/// spanning at least `zones` zones, with one outside the primary's zone if `cross_zone`. A
/// replica without a zone counts towards `count` only: it is not known to be in any zone, so
/// it is neither another zone nor outside the primary's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuorumRule {
    /// Replicas that must hold the transaction; 0: none (nothing waits).
    pub count: usize,
    /// Distinct zones they must span (0 and 1 both mean no zone rule).
    pub zones: usize,
    /// One of them must be in a zone other than the primary's.
    pub cross_zone: bool,
}

/// What a set of replicas adds up to under a rule: how many, which zones, whether one is
/// outside the primary's zone.
#[derive(Debug, Clone, Default)]
pub struct Tally<'a> {
    count: usize,
    /// Distinct zones seen (replicas are few: on the stack).
    zones: SmallVec<[&'a str; 8]>,
    outside: bool,
}

/// The part of a rule a set of replicas does not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmet {
    /// Fewer replicas than the rule's count.
    Count {
        /// How many there are.
        have: usize,
        /// How many the rule needs.
        need: usize,
    },
    /// They span fewer zones than the rule needs.
    Zones {
        /// The zones they span.
        have: Vec<String>,
        /// How many the rule needs.
        need: usize,
    },
    /// None is outside the primary's zone.
    CrossZone {
        /// The primary's zone (`None`: not configured, so no replica is known to be outside it).
        primary_zone: Option<String>,
    },
}

// === impl QuorumRule ===

impl QuorumRule {
    /// A rule of `count` replicas and nothing else (the quorum as it was before zones).
    pub fn count(count: usize) -> Self {
        QuorumRule {
            count,
            zones: 0,
            cross_zone: false,
        }
    }

    /// The rule for a session that asked for `count` replicas: the zone parts stay, scaled
    /// down so that `count` replicas can meet them (a session that asked for none waits for
    /// nothing).
    pub fn with_count(self, count: usize) -> Self {
        QuorumRule {
            count,
            zones: self.zones.min(count),
            cross_zone: self.cross_zone && count > 0,
        }
    }

    /// Whether nothing is needed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The fewest replicas that can meet it.
    pub fn replicas_needed(&self) -> usize {
        self.count.max(self.zones).max(usize::from(self.cross_zone))
    }

    /// The highest position that replicas meeting the rule have all ACKed: every
    /// replica at or past it together meet it. Replicas are given with their zone and what
    /// they ACKed (`None`: nothing yet). `None` if no set of them meets the rule, and
    /// for an empty rule.
    pub fn position<'a>(
        &self,
        replicas: impl IntoIterator<Item = (Option<&'a str>, Option<Position>)>,
        primary_zone: Option<&str>,
    ) -> Option<Position> {
        if self.is_empty() {
            return None;
        }
        // Replicas are few: on the stack, so an ACK allocates nothing.
        let mut acked: SmallVec<[(Position, Option<&'a str>); 8]> = replicas
            .into_iter()
            .filter_map(|(zone, position)| Some((position?, zone)))
            .collect();
        if acked.len() < self.replicas_needed() {
            return None;
        }
        if self.zones <= 1 && !self.cross_zone {
            // Only the k-th largest is needed: a partial sort keeps this linear.
            let at = acked.len() - self.count;
            let (_, kth, _) = acked.select_nth_unstable_by_key(at, |(p, _)| *p);
            return Some(kth.0);
        }
        // The replicas from the most advanced down: the first prefix that meets the rule ends
        // at the position sought (any set meeting it can only gain by adding more advanced
        // replicas).
        acked.sort_unstable_by_key(|(position, _)| std::cmp::Reverse(*position));
        let mut tally = Tally::default();
        for (position, zone) in acked {
            tally.add(zone, primary_zone);
            if tally.meets(self) {
                return Some(position);
            }
        }
        None
    }
}

impl Default for QuorumRule {
    fn default() -> Self {
        QuorumRule::count(1)
    }
}

impl fmt::Display for QuorumRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} replica(s)", self.count)?;
        if self.zones > 1 {
            write!(f, " in at least {} zones", self.zones)?;
        }
        if self.cross_zone {
            f.write_str(", one outside the primary's zone")?;
        }
        Ok(())
    }
}

// === impl Tally ===

impl<'a> Tally<'a> {
    /// Counts one more replica, in `zone`.
    pub fn add(&mut self, zone: Option<&'a str>, primary_zone: Option<&str>) {
        self.count += 1;
        if let Some(zone) = zone {
            if !self.zones.contains(&zone) {
                self.zones.push(zone);
            }
            // Without a configured primary zone no replica is known to be outside it.
            self.outside |= primary_zone.is_some_and(|p| p != zone);
        }
    }

    /// Replicas counted.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether the replicas counted meet `rule`.
    pub fn meets(&self, rule: &QuorumRule) -> bool {
        self.count >= rule.count
            && (rule.zones <= 1 || self.zones.len() >= rule.zones)
            && (self.outside || !rule.cross_zone)
    }

    /// The first part of `rule` the replicas counted do not meet, if any.
    pub fn unmet(&self, rule: &QuorumRule, primary_zone: Option<&str>) -> Option<Unmet> {
        if self.count < rule.count {
            Some(Unmet::Count {
                have: self.count,
                need: rule.count,
            })
        } else if rule.zones > 1 && self.zones.len() < rule.zones {
            let mut have: Vec<String> = self.zones.iter().map(|z| (*z).to_owned()).collect();
            have.sort_unstable();
            Some(Unmet::Zones {
                have,
                need: rule.zones,
            })
        } else if rule.cross_zone && !self.outside {
            Some(Unmet::CrossZone {
                primary_zone: primary_zone.map(str::to_owned),
            })
        } else {
            None
        }
    }
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::Count { have, need } => {
                write!(f, "{have} semisync replica(s) connected, the quorum needs {need}")
            }
            Unmet::Zones { have, need } if have.is_empty() => write!(
                f,
                "no replica with a zone, the quorum needs {need} zones (give replicas a zone in [[replica]])"
            ),
            Unmet::Zones { have, need } => write!(
                f,
                "replicas in {} zone(s) ({}), the quorum needs {need}",
                have.len(),
                have.join(", ")
            ),
            Unmet::CrossZone {
                primary_zone: Some(zone),
            } => write!(
                f,
                "no replica outside the primary's zone {zone:?}, the quorum needs one"
            ),
            Unmet::CrossZone { primary_zone: None } => f.write_str(
                "the quorum needs a replica outside the primary's zone, and durability.primary_zone is not set",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn p(file_seq: u64, offset: u64) -> Option<Position> {
        Some(Position { file_seq, offset })
    }

    fn count_only(acked: &[Option<Position>], k: usize) -> Option<Position> {
        QuorumRule::count(k).position(acked.iter().map(|a| (None, *a)), None)
    }

    #[test]
    fn a_count_is_the_kth_highest() {
        // (ACKed positions, k, quorum position)
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
            assert_eq!(count_only(&acked, k), want, "{acked:?} k={k}");
        }
    }

    #[test]
    fn zone_rules() {
        let rule = |count, zones, cross_zone| QuorumRule {
            count,
            zones,
            cross_zone,
        };
        // (replicas as (zone, ACKed), rule, primary zone, quorum position)
        type Row = (
            Vec<(Option<&'static str>, Option<Position>)>,
            QuorumRule,
            Option<&'static str>,
            Option<Position>,
        );
        let table: Vec<Row> = vec![
            // Two zones: the two most advanced replicas share one, so the third decides.
            (
                vec![
                    (Some("a"), p(1, 900)),
                    (Some("a"), p(1, 800)),
                    (Some("b"), p(1, 100)),
                ],
                rule(2, 2, false),
                None,
                p(1, 100),
            ),
            (
                vec![
                    (Some("a"), p(1, 900)),
                    (Some("b"), p(1, 800)),
                    (Some("b"), p(1, 100)),
                ],
                rule(2, 2, false),
                None,
                p(1, 800),
            ),
            // Zones needed beyond the count: three zones among three replicas.
            (
                vec![
                    (Some("a"), p(1, 900)),
                    (Some("b"), p(1, 800)),
                    (Some("c"), p(1, 100)),
                ],
                rule(2, 3, false),
                None,
                p(1, 100),
            ),
            // One zone only: never.
            (
                vec![(Some("a"), p(1, 900)), (Some("a"), p(1, 800))],
                rule(2, 2, false),
                None,
                None,
            ),
            // A replica without a zone counts, but is no zone.
            (
                vec![(None, p(1, 900)), (Some("a"), p(1, 800))],
                rule(2, 2, false),
                None,
                None,
            ),
            (
                vec![
                    (None, p(1, 900)),
                    (Some("a"), p(1, 800)),
                    (Some("b"), p(1, 50)),
                ],
                rule(2, 2, false),
                None,
                p(1, 50),
            ),
            // Cross zone: the replicas in the primary's zone are ahead, the other decides.
            (
                vec![
                    (Some("a"), p(1, 900)),
                    (Some("a"), p(1, 800)),
                    (Some("b"), p(1, 100)),
                ],
                rule(1, 0, true),
                Some("a"),
                p(1, 100),
            ),
            (
                vec![
                    (Some("a"), p(1, 900)),
                    (Some("a"), p(1, 800)),
                    (Some("b"), p(1, 100)),
                ],
                rule(2, 0, true),
                Some("a"),
                p(1, 100),
            ),
            (
                vec![(Some("b"), p(1, 900)), (Some("a"), p(1, 800))],
                rule(2, 0, true),
                Some("a"),
                p(1, 800),
            ),
            // Without the primary's zone, nobody is known to be outside it.
            (vec![(Some("b"), p(1, 900))], rule(1, 0, true), None, None),
            (vec![(None, p(1, 900))], rule(1, 0, true), Some("a"), None),
            // A replica that ACKed nothing does not count.
            (
                vec![(Some("a"), p(1, 900)), (Some("b"), None)],
                rule(1, 2, false),
                None,
                None,
            ),
            (
                vec![(Some("a"), p(1, 900))],
                rule(0, 2, true),
                Some("b"),
                None,
            ),
        ];
        for (replicas, rule, primary, want) in table {
            assert_eq!(
                rule.position(replicas.clone(), primary),
                want,
                "{replicas:?} {rule:?} primary in {primary:?}"
            );
        }
    }

    #[test]
    fn a_session_count_scales_the_zone_parts() {
        let rule = QuorumRule {
            count: 2,
            zones: 2,
            cross_zone: true,
        };
        assert_eq!(rule.with_count(3), QuorumRule { count: 3, ..rule });
        assert_eq!(
            rule.with_count(1),
            QuorumRule {
                count: 1,
                zones: 1,
                cross_zone: true
            }
        );
        assert!(rule.with_count(0).is_empty());
        assert!(!rule.with_count(0).cross_zone);
    }

    #[test]
    fn unmet_names_the_first_part_missing() {
        let rule = QuorumRule {
            count: 2,
            zones: 2,
            cross_zone: true,
        };
        let tally = |zones: &[Option<&'static str>]| {
            let mut t = Tally::default();
            for z in zones {
                t.add(*z, Some("a"));
            }
            t
        };
        assert_eq!(
            tally(&[Some("a")]).unmet(&rule, Some("a")),
            Some(Unmet::Count { have: 1, need: 2 })
        );
        assert_eq!(
            tally(&[Some("a"), Some("a")]).unmet(&rule, Some("a")),
            Some(Unmet::Zones {
                have: vec!["a".into()],
                need: 2
            })
        );
        let cross = QuorumRule { zones: 0, ..rule };
        assert_eq!(
            tally(&[Some("a"), None]).unmet(&cross, Some("a")),
            Some(Unmet::CrossZone {
                primary_zone: Some("a".into())
            })
        );
        assert_eq!(tally(&[Some("a"), Some("b")]).unmet(&rule, Some("a")), None);
        assert!(tally(&[Some("a"), Some("b")]).meets(&rule));
    }

    fn arb_position() -> impl Strategy<Value = Option<Position>> {
        prop::option::of(
            (1u64..4, 0u64..1000).prop_map(|(file_seq, offset)| Position { file_seq, offset }),
        )
    }

    fn arb_zone() -> impl Strategy<Value = Option<&'static str>> {
        prop::option::of(prop::sample::select(vec!["a", "b", "c"]))
    }

    fn arb_rule() -> impl Strategy<Value = QuorumRule> {
        (1usize..4, 0usize..4, any::<bool>()).prop_map(|(count, zones, cross_zone)| QuorumRule {
            count,
            zones,
            cross_zone,
        })
    }

    proptest! {
        #[test]
        fn a_count_equals_the_kth_highest(acked in prop::collection::vec(arb_position(), 0..8), k in 1usize..5) {
            let mut sorted: Vec<Position> = acked.iter().flatten().copied().collect();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let want = sorted.get(k - 1).copied();
            prop_assert_eq!(count_only(&acked, k), want);
        }

        /// The position is the best any subset meeting the rule can do: the highest, over
        /// every such subset, of the lowest position in it (found by trying every subset).
        #[test]
        fn a_rule_equals_the_best_subset_that_meets_it(
            replicas in prop::collection::vec((arb_zone(), arb_position()), 0..7),
            rule in arb_rule(),
            primary in arb_zone(),
        ) {
            let mut best: Option<Position> = None;
            for mask in 1u32..(1 << replicas.len()) {
                let chosen: Vec<_> = replicas
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, r)| *r)
                    .collect();
                if chosen.iter().any(|(_, p)| p.is_none()) {
                    continue;
                }
                let mut tally = Tally::default();
                for (zone, _) in &chosen {
                    tally.add(*zone, primary);
                }
                if tally.meets(&rule) {
                    let lowest = chosen.iter().filter_map(|(_, p)| *p).min();
                    best = best.max(lowest);
                }
            }
            prop_assert_eq!(rule.position(replicas.clone(), primary), best);
        }

        #[test]
        fn never_decreases_as_acks_arrive(
            zones in prop::collection::vec(arb_zone(), 1..5),
            rule in arb_rule(),
            acks in prop::collection::vec((0usize..5, 1u64..4, 0u64..1000), 0..40),
        ) {
            // Each replica keeps its highest ACK (ACKs are cumulative).
            let mut acked: Vec<Option<Position>> = vec![None; zones.len()];
            let at = |acked: &[Option<Position>]| {
                rule.position(zones.iter().copied().zip(acked.iter().copied()), Some("a"))
            };
            let mut last = at(&acked);
            for (r, file_seq, offset) in acks {
                let slot = &mut acked[r % zones.len()];
                let ack = Position { file_seq, offset };
                *slot = Some(slot.map_or(ack, |held| held.max(ack)));
                let now = at(&acked);
                prop_assert!(now >= last, "{last:?} -> {now:?}");
                last = now;
            }
        }
    }
}
