//! What DEGRADED owes: per replication domain, the GTIDs acknowledged to clients without their
//! quorum since strong sync was last STRONG — what a failover right now may lose. DEGRADED
//! ends once the quorum holds the newest of each domain (sequence numbers grow in binlog order
//! within a domain, so it then holds every earlier one too).

use std::collections::BTreeMap;
use std::fmt;

use strongsync_proto::gtid::{Domain, Gtid};

/// The GTIDs of one domain released without quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainRange {
    /// The oldest (lowest sequence number).
    pub first: Gtid,
    /// The newest.
    pub last: Gtid,
    /// How many transactions.
    pub count: u64,
}

/// Releases without quorum, by domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleasedWithoutQuorum {
    domains: BTreeMap<Domain, DomainRange>,
}

// === impl ReleasedWithoutQuorum ===

impl ReleasedWithoutQuorum {
    /// Records transactions released without their quorum.
    pub fn record(&mut self, gtids: &[Gtid]) {
        // A bound by binlog position is kept as a domain of its own: DEGRADED ends once the
        // quorum holds that far.
        for gtid in gtids {
            self.domains
                .entry(gtid.domain)
                .and_modify(|range| {
                    if gtid.seq_no < range.first.seq_no {
                        range.first = *gtid;
                    }
                    if gtid.seq_no > range.last.seq_no {
                        range.last = *gtid;
                    }
                    range.count += 1;
                })
                .or_insert(DomainRange {
                    first: *gtid,
                    last: *gtid,
                    count: 1,
                });
        }
    }

    /// The newest GTID of each domain: holding these holds them all.
    pub fn newest(&self) -> impl Iterator<Item = &Gtid> {
        self.domains.values().map(|range| &range.last)
    }

    /// Each domain's range, by domain.
    pub fn ranges(&self) -> impl Iterator<Item = &DomainRange> {
        self.domains.values()
    }

    /// Transactions released without quorum, all domains together.
    pub fn count(&self) -> u64 {
        self.domains.values().map(|range| range.count).sum()
    }

    /// Nothing released without quorum.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }
}

impl fmt::Display for ReleasedWithoutQuorum {
    /// `0-1-5..0-1-90 (12), 1-1-3 (1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

impl fmt::Display for DomainRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{} ({})", self.last, self.count)
        } else {
            write!(f, "{}..{} ({})", self.first, self.last, self.count)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(text: &str) -> Gtid {
        text.parse().unwrap()
    }

    #[test]
    fn keeps_each_domains_range_and_count() {
        let mut owed = ReleasedWithoutQuorum::default();
        assert!(owed.is_empty());
        owed.record(&[g("0-1-7")]);
        owed.record(&[g("1-1-3"), g("0-1-5")]);
        owed.record(&[g("0-1-9")]);
        assert_eq!(owed.to_string(), "0-1-5..0-1-9 (3), 1-1-3 (1)");
        assert_eq!(owed.count(), 4);
        let newest: Vec<String> = owed.newest().map(ToString::to_string).collect();
        assert_eq!(newest, ["0-1-9", "1-1-3"]);
    }
}
