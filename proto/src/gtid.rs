//! GTIDs as the primary reports them after a commit: MariaDB's `domain-server-seq` (from the
//! `last_gtid` session variable) and MySQL's `uuid:n` text (from `session_track_gtids`); and
//! [`GtidPosition`], what a set of them adds up to.

mod position;

use std::fmt;
use std::str::FromStr;

use crate::ok::{OkPacket, LAST_GTID, SESSION_TRACK_GTIDS};
use crate::wire::Reader;
use crate::ProtoError;

pub use position::GtidPosition;

/// A MariaDB GTID: replication domain, originating server id, sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MariaGtid {
    /// Replication domain id.
    pub domain: u32,
    /// Server id of the server that committed the transaction.
    pub server_id: u32,
    /// Sequence number within the domain.
    pub seq_no: u64,
}

/// A GTID a response reported for a commit of this session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Gtid {
    /// MariaDB `domain-server-seq`.
    Maria(MariaGtid),
    /// MySQL GTID text as tracked by `session_track_gtids=OWN_GTID` (e.g. `uuid:23`).
    MySql(Box<str>),
}

/// What one OK packet says about the session's last commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackedGtid<'a> {
    /// MariaDB `last_gtid` changed to this value (possibly empty: nothing committed yet).
    LastGtid(&'a [u8]),
    /// MySQL `SESSION_TRACK_GTIDS` reported this GTID set text.
    OwnGtids(&'a [u8]),
}

/// Every GTID report in an OK packet's session state, in order. Broken items are skipped:
/// tracking data never makes a response fail.
pub fn tracked_gtids<'a>(ok: &OkPacket<'a>) -> impl Iterator<Item = TrackedGtid<'a>> {
    ok.state_items().flatten().flat_map(|item| {
        let own = (item.kind == SESSION_TRACK_GTIDS)
            .then(|| mysql_gtids_text(item.data).ok().map(TrackedGtid::OwnGtids))
            .flatten();
        let vars = item
            .variables()
            .flatten()
            .filter(|(name, _)| name.eq_ignore_ascii_case(LAST_GTID))
            .map(|(_, value)| TrackedGtid::LastGtid(value));
        own.into_iter().chain(vars)
    })
}

/// The GTID text inside a `SESSION_TRACK_GTIDS` item: `u8 encoding (0) | lenenc-str text`.
fn mysql_gtids_text(data: &[u8]) -> Result<&[u8], ProtoError> {
    let mut r = Reader::new(data);
    if r.u8("GTIDs encoding")? != 0 {
        return Err(ProtoError::Unsupported {
            what: "session_track_gtids encoding other than 0",
        });
    }
    r.lenenc_str("GTIDs text")
}

// === impl MariaGtid ===

impl MariaGtid {
    /// Parses `domain-server-seq` from bytes.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] unless the text is three decimal numbers joined by `-`.
    pub fn parse(text: &[u8]) -> Result<Self, ProtoError> {
        std::str::from_utf8(text)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(ProtoError::Malformed {
                what: "MariaDB GTID",
            })
    }
}

impl FromStr for MariaGtid {
    type Err = ProtoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ProtoError::Malformed {
            what: "MariaDB GTID",
        };
        let mut parts = s.split('-');
        let mut next = || {
            parts
                .next()
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        let gtid = MariaGtid {
            domain: next().and_then(|p| p.parse().ok()).ok_or_else(bad)?,
            server_id: next().and_then(|p| p.parse().ok()).ok_or_else(bad)?,
            seq_no: next().and_then(|p| p.parse().ok()).ok_or_else(bad)?,
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(gtid)
    }
}

impl fmt::Display for MariaGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server_id, self.seq_no)
    }
}

// === impl Gtid ===

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gtid::Maria(g) => g.fmt(f),
            Gtid::MySql(text) => f.write_str(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_and_prints_mariadb_gtids() {
        let table = [
            ("0-1-11", Some((0, 1, 11))),
            ("1-1-1000", Some((1, 1, 1000))),
            (
                "4294967295-4294967295-18446744073709551615",
                Some((u32::MAX, u32::MAX, u64::MAX)),
            ),
            ("", None),
            ("0-1", None),
            ("0-1-2-3", None),
            ("0--2", None),
            ("a-1-2", None),
            ("-1-1-2", None),
            ("0-1-+2", None),
            ("4294967296-1-1", None),
        ];
        for (text, want) in table {
            let got = MariaGtid::parse(text.as_bytes())
                .ok()
                .map(|g| (g.domain, g.server_id, g.seq_no));
            assert_eq!(got, want, "{text:?}");
            if want.is_some() {
                assert_eq!(MariaGtid::parse(text.as_bytes()).unwrap().to_string(), text);
            }
        }
    }

    proptest! {
        #[test]
        fn display_round_trips(domain: u32, server_id: u32, seq_no: u64) {
            let g = MariaGtid { domain, server_id, seq_no };
            prop_assert_eq!(g.to_string().parse::<MariaGtid>(), Ok(g));
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(s in ".{0,40}") {
            let _ = s.parse::<MariaGtid>();
        }
    }
}
