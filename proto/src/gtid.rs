//! GTIDs as strong sync follows them, whatever the primary's flavour, and [`GtidPosition`],
//! what a set of them adds up to.

mod position;
mod seqs;
mod set;
mod source;

use std::fmt;
use std::str::FromStr;

use crate::ok::{OkPacket, LAST_GTID, SESSION_TRACK_GTIDS};
use crate::wire::Reader;
use crate::ProtoError;

pub use position::GtidPosition;
pub use seqs::SeqSet;
pub use set::GtidSet;
pub use source::{Source, SourceId, MAX_PEER_SOURCES, MAX_SOURCES, MAX_TAG_LEN};

/// Where a GTID's sequence number counts: a primary hands numbers out in binlog order within
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Domain {
    /// A MariaDB replication domain.
    Maria(u32),
    /// A MySQL source: server UUID and tag.
    MySql(SourceId),
    /// Not a GTID's domain: a place in the primary's binlog file of this sequence number, the
    /// GTID's "number" its offset. A bound that cannot name GTIDs (on MySQL a transaction's
    /// rows are visible to other sessions before its GTID is in `gtid_executed`, never before
    /// it is in the binlog) is waited for as such an end; it is held by replicas that
    /// ACKed that far, and never held by a GTID set.
    Binlog(u64),
}

/// A transaction's GTID: MariaDB's `domain-server-seq` (from the `last_gtid` session variable
/// and GTID events) or MySQL's `uuid:n` and `uuid:tag:n` (from `session_track_gtids` and GTID
/// events), each a sequence number in a [`Domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gtid {
    /// Where its sequence number counts.
    pub domain: Domain,
    /// MariaDB: the server id of the server that committed it. MySQL: 0 (the UUID says it).
    pub server_id: u32,
    /// Sequence number within the domain (MySQL's `gno`).
    pub seq_no: u64,
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

// === impl Gtid ===

impl Gtid {
    /// A MariaDB GTID.
    pub fn maria(domain: u32, server_id: u32, seq_no: u64) -> Self {
        Gtid {
            domain: Domain::Maria(domain),
            server_id,
            seq_no,
        }
    }

    /// A MySQL GTID: `gno` of `source`.
    pub fn mysql(source: SourceId, gno: u64) -> Self {
        Gtid {
            domain: Domain::MySql(source),
            server_id: 0,
            seq_no: gno,
        }
    }

    /// The end of what the primary's binlog holds at `position`, as a bound to wait for.
    pub fn binlog_end(position: crate::position::Position) -> Self {
        Gtid {
            domain: Domain::Binlog(position.file_seq),
            server_id: 0,
            seq_no: position.offset,
        }
    }

    /// The binlog position this stands for, if it is a [`binlog_end`](Self::binlog_end).
    pub fn binlog_position(&self) -> Option<crate::position::Position> {
        match self.domain {
            Domain::Binlog(file_seq) => Some(crate::position::Position {
                file_seq,
                offset: self.seq_no,
            }),
            _ => None,
        }
    }

    /// Parses MariaDB's `domain-server-seq` from bytes.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] unless the text is three decimal numbers joined by `-`.
    pub fn parse(text: &[u8]) -> Result<Self, ProtoError> {
        std::str::from_utf8(text)
            .ok()
            .and_then(|s| parse_maria(s).ok())
            .ok_or(ProtoError::Malformed {
                what: "MariaDB GTID",
            })
    }

    /// Parses one MySQL GTID, `uuid:n` or `uuid:tag:n`.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] if it is not one; [`ProtoError::Unsupported`] if its source
    /// is new and the table of sources is full.
    pub fn parse_mysql(text: &str) -> Result<Self, ProtoError> {
        let bad = ProtoError::Malformed { what: "MySQL GTID" };
        let (uuid, rest) = text.trim_ascii().split_once(':').ok_or(bad.clone())?;
        let (tag, gno) = match rest.rsplit_once(':') {
            Some((tag, gno)) => (Some(tag), gno),
            None => (None, rest),
        };
        let uuid = Source::parse_uuid(uuid).ok_or(bad.clone())?;
        let gno = number(gno).filter(|&n| n > 0).ok_or(bad)?;
        Ok(Gtid::mysql(intern(uuid, tag)?, gno))
    }
}

impl FromStr for Gtid {
    type Err = ProtoError;

    /// Either flavour's form: MySQL's has a `:`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(':') {
            Gtid::parse_mysql(s)
        } else {
            parse_maria(s)
        }
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.domain {
            Domain::Maria(domain) => write!(f, "{domain}-{}-{}", self.server_id, self.seq_no),
            Domain::MySql(source) => write!(f, "{source}:{}", self.seq_no),
            Domain::Binlog(file_seq) => write!(f, "binlog {file_seq}:{}", self.seq_no),
        }
    }
}

impl fmt::Display for Domain {
    /// A MariaDB domain's number, a MySQL source's `uuid` or `uuid:tag`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Domain::Maria(domain) => domain.fmt(f),
            Domain::MySql(source) => source.fmt(f),
            Domain::Binlog(file_seq) => write!(f, "binlog {file_seq}"),
        }
    }
}

/// `domain-server-seq`.
fn parse_maria(s: &str) -> Result<Gtid, ProtoError> {
    let bad = || ProtoError::Malformed {
        what: "MariaDB GTID",
    };
    let mut parts = s.split('-');
    let mut next = || parts.next().and_then(number).ok_or_else(bad);
    let domain = u32::try_from(next()?).map_err(|_| bad())?;
    let server_id = u32::try_from(next()?).map_err(|_| bad())?;
    let seq_no = next()?;
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(Gtid::maria(domain, server_id, seq_no))
}

/// A decimal number with nothing else (no sign, no blank).
fn number(text: &str) -> Option<u64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// The number of a source, or why it has none.
fn intern(uuid: [u8; 16], tag: Option<&str>) -> Result<SourceId, ProtoError> {
    SourceId::intern(uuid, tag).ok_or(match tag {
        Some(_) if SourceId::intern(uuid, None).is_some() => ProtoError::Malformed {
            what: "MySQL GTID tag",
        },
        _ => ProtoError::Unsupported {
            what: "more MySQL GTID sources than strongsync follows",
        },
    })
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
            let got = Gtid::parse(text.as_bytes())
                .ok()
                .map(|g| (g.domain, g.server_id, g.seq_no));
            let want = want.map(|(d, s, n)| (Domain::Maria(d), s, n));
            assert_eq!(got, want, "{text:?}");
            if want.is_some() {
                assert_eq!(Gtid::parse(text.as_bytes()).unwrap().to_string(), text);
            }
        }
    }

    #[test]
    fn parses_and_prints_mysql_gtids() {
        const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let table = [
            (format!("{UUID}:23"), Some(format!("{UUID}:23"))),
            (format!(" {UUID}:1\n"), Some(format!("{UUID}:1"))),
            (format!("{UUID}:Batch:7"), Some(format!("{UUID}:batch:7"))),
            (
                format!("{}:5", UUID.to_uppercase()),
                Some(format!("{UUID}:5")),
            ),
            (format!("{UUID}:0"), None),
            (format!("{UUID}:1-5"), None),
            (format!("{UUID}:"), None),
            (format!("{UUID}:9tag:5"), None),
            (format!("{UUID}:a:b:5"), None),
            (UUID.to_string(), None),
            ("0-1-5".to_string(), None),
        ];
        for (text, want) in table {
            let got = Gtid::parse_mysql(&text).ok().map(|g| g.to_string());
            assert_eq!(got, want, "{text:?}");
        }
        let plain = Gtid::parse_mysql(&format!("{UUID}:5")).unwrap();
        let tagged = Gtid::parse_mysql(&format!("{UUID}:t:5")).unwrap();
        assert_ne!(plain.domain, tagged.domain, "a tag is a domain of its own");
        assert_eq!(format!("{UUID}:5").parse::<Gtid>(), Ok(plain));
    }

    proptest! {
        #[test]
        fn display_round_trips(domain: u32, server_id: u32, seq_no: u64) {
            let g = Gtid::maria(domain, server_id, seq_no);
            prop_assert_eq!(g.to_string().parse::<Gtid>(), Ok(g));
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(s in ".{0,40}") {
            let _ = s.parse::<Gtid>();
        }

        #[test]
        fn mysql_gtids_round_trip(uuid: [u8; 16], tag in proptest::option::of("[a-z_][a-z0-9_]{0,31}"), gno in 1u64..) {
            let source = SourceId::intern(uuid, tag.as_deref()).unwrap();
            let g = Gtid::mysql(source, gno);
            prop_assert_eq!(Gtid::parse_mysql(&g.to_string()), Ok(g));
        }
    }
}
