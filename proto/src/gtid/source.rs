//! MySQL GTID sources (a server UUID, and from 8.4 a tag), each named by a small number in one
//! table for the process.

use std::collections::HashMap;
use std::fmt;
use std::sync::{OnceLock, RwLock};

// A source is named by a number so that a GTID stays `Copy` and as cheap to compare as a
// MariaDB one. Server UUIDs are universal, so one table serves the process whatever primary it
// follows. The table only grows, up to `MAX_SOURCES`: past it a GTID of a new source cannot be
// read, and strong sync treats the commit as one whose GTID it could not learn (it fails
// closed).

/// Most sources the table holds.
pub const MAX_SOURCES: usize = 65_536;
/// Most sources a peer's word may add (a GTID set in a replica's dump request, which any
/// logged-in account can send): the rest of the table stays for what the primary itself says,
/// so a flood of made-up sources cannot keep the primary's GTIDs from being read.
pub const MAX_PEER_SOURCES: usize = MAX_SOURCES / 2;
/// Longest tag MySQL allows.
pub const MAX_TAG_LEN: usize = 32;

/// A MySQL GTID source, by its number in the process's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(u32);

/// What a source is: the UUID of the server that first committed its transactions, and the
/// tag they were given (none for plain `uuid:n` GTIDs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    /// Server UUID.
    pub uuid: [u8; 16],
    /// Tag, lower case (`[a-z_][a-z0-9_]{0,31}`), if any.
    pub tag: Option<Box<str>>,
}

#[derive(Default)]
struct Table {
    sources: Vec<Source>,
    ids: HashMap<Source, SourceId>,
}

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(RwLock::default)
}

// === impl SourceId ===

impl SourceId {
    /// The number of `uuid` with `tag`, given one if it has none yet; `None` once the table is
    /// full (or for a tag MySQL would refuse).
    pub fn intern(uuid: [u8; 16], tag: Option<&str>) -> Option<SourceId> {
        Self::intern_within(uuid, tag, MAX_SOURCES)
    }

    /// Like [`intern`](Self::intern), for a source a peer names (see [`MAX_PEER_SOURCES`]):
    /// a new one is given a number only while the table holds fewer than that.
    pub fn intern_from_peer(uuid: [u8; 16], tag: Option<&str>) -> Option<SourceId> {
        Self::intern_within(uuid, tag, MAX_PEER_SOURCES)
    }

    fn intern_within(uuid: [u8; 16], tag: Option<&str>, limit: usize) -> Option<SourceId> {
        let tag = match tag {
            Some(tag) => Some(normal_tag(tag)?),
            None => None,
        };
        let source = Source { uuid, tag };
        if let Some(id) = table()
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .ids
            .get(&source)
        {
            return Some(*id);
        }
        let mut table = table().write().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = table.ids.get(&source) {
            return Some(*id);
        }
        if table.sources.len() >= limit {
            return None;
        }
        let id = SourceId(u32::try_from(table.sources.len()).ok()?);
        table.sources.push(source.clone());
        table.ids.insert(source, id);
        Some(id)
    }

    /// What the source is.
    pub fn source(self) -> Source {
        table().read().unwrap_or_else(|p| p.into_inner()).sources[self.0 as usize].clone()
    }
}

impl fmt::Display for SourceId {
    /// `uuid` or `uuid:tag`, as MySQL writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source().fmt(f)
    }
}

// === impl Source ===

impl Source {
    /// Reads a UUID as MySQL writes one (`3e11fa47-71ca-11e1-9e33-c80aa9429562`, either case).
    pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
        let bytes = text.as_bytes();
        if bytes.len() != 36 {
            return None;
        }
        let mut uuid = [0u8; 16];
        let mut hex = bytes
            .iter()
            .enumerate()
            .filter(|&(i, b)| !(matches!(i, 8 | 13 | 18 | 23) && *b == b'-'));
        for byte in &mut uuid {
            let high = char::from(*hex.next()?.1).to_digit(16)?;
            let low = char::from(*hex.next()?.1).to_digit(16)?;
            *byte = (high * 16 + low) as u8;
        }
        hex.next().is_none().then_some(uuid)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.uuid.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        Ok(())
    }
}

/// A tag as MySQL stores it (it compares tags without case and prints them in lower case), if
/// MySQL would take it.
fn normal_tag(tag: &str) -> Option<Box<str>> {
    let tag = tag.to_ascii_lowercase();
    let mut bytes = tag.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    (first_ok && rest_ok && tag.len() <= MAX_TAG_LEN).then(|| tag.into_boxed_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn reads_and_prints_uuids() {
        let uuid = Source::parse_uuid(UUID).unwrap();
        assert_eq!(uuid[0], 0x3e);
        assert_eq!(uuid[15], 0x62);
        let upper = Source::parse_uuid(&UUID.to_uppercase()).unwrap();
        assert_eq!(uuid, upper);
        let shown = Source { uuid, tag: None }.to_string();
        assert_eq!(shown, UUID);
        for bad in [
            "",
            "3e11fa47-71ca-11e1-9e33-c80aa942956",
            "3e11fa47-71ca-11e1-9e33-c80aa94295621",
            "3e11fa47x71ca-11e1-9e33-c80aa9429562",
            "3e11fa47-71ca-11e1-9e33-c80aa942956g",
        ] {
            assert_eq!(Source::parse_uuid(bad), None, "{bad:?}");
        }
    }

    /// A peer fills at most its share of the table; what the primary says still fits.
    #[test]
    fn a_peer_cannot_fill_the_table() {
        let mut n = 0u64;
        while SourceId::intern_from_peer(uuid_of(n), None).is_some() {
            n += 1;
            assert!(n <= MAX_PEER_SOURCES as u64, "the peer's share has a bound");
        }
        let known = SourceId::intern(uuid_of(0), None);
        assert_eq!(
            SourceId::intern_from_peer(uuid_of(0), None),
            known,
            "known ones still read"
        );
        assert!(
            SourceId::intern(uuid_of(u64::MAX), None).is_some(),
            "room for the primary's"
        );
    }

    fn uuid_of(n: u64) -> [u8; 16] {
        let mut uuid = [0xEE; 16];
        uuid[..8].copy_from_slice(&n.to_le_bytes());
        uuid
    }

    #[test]
    fn one_number_per_source_and_tags_without_case() {
        let uuid = Source::parse_uuid(UUID).unwrap();
        let plain = SourceId::intern(uuid, None).unwrap();
        assert_eq!(SourceId::intern(uuid, None), Some(plain));
        let tagged = SourceId::intern(uuid, Some("Batch_1")).unwrap();
        assert_ne!(plain, tagged);
        assert_eq!(SourceId::intern(uuid, Some("batch_1")), Some(tagged));
        assert_eq!(tagged.to_string(), format!("{UUID}:batch_1"));
        for bad in ["", "1abc", "a-b", &"a".repeat(33)] {
            assert_eq!(SourceId::intern(uuid, Some(bad)), None, "{bad:?}");
        }
    }
}
