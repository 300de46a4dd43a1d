//! Positions in the primary's binlog, ordered by (file sequence number, offset): the
//! coordinates semisync ACKs carry and strong sync waits on. GTIDs are not an order (they are
//! only ordered within a replication domain); positions are.

use std::fmt;

use crate::ProtoError;

/// A point in the primary's binlog: the end of an event (`log_pos`) in the file whose name
/// ends in `.<file_seq>`. Ordered by file, then offset, which is binlog order as long as all
/// positions come from one primary's files (one base name, growing suffix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// Numeric suffix of the binlog file name (`mysql-bin.000042` → 42).
    pub file_seq: u64,
    /// Offset in that file.
    pub offset: u64,
}

// === impl Position ===

impl Position {
    /// The position `offset` in the binlog file called `file`.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] if the name does not end in `.<digits>`.
    pub fn in_file(file: &[u8], offset: u64) -> Result<Self, ProtoError> {
        Ok(Position {
            file_seq: file_seq(file)?,
            offset,
        })
    }
}

/// The numeric suffix of a binlog file name.
///
/// # Errors
/// [`ProtoError::Malformed`] if the name does not end in `.<digits>` (at most 19 of them).
pub fn file_seq(file: &[u8]) -> Result<u64, ProtoError> {
    let bad = ProtoError::Malformed {
        what: "binlog file name",
    };
    let dot = file.iter().rposition(|&b| b == b'.').ok_or(bad.clone())?;
    let digits = &file[dot + 1..];
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad);
    }
    Ok(digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file_seq, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn file_names_give_their_sequence() {
        let table: [(&[u8], Option<u64>); 7] = [
            (b"mysql-bin.000002", Some(2)),
            (b"/var/lib/mysql/binlog.123456", Some(123_456)),
            (b"a.b.7", Some(7)),
            (b"mysql-bin", None),
            (b"mysql-bin.", None),
            (b"mysql-bin.00x1", None),
            (b"x.99999999999999999999", None),
        ];
        for (name, want) in table {
            assert_eq!(
                file_seq(name).ok(),
                want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn order_is_file_then_offset() {
        let p = |f, o| Position {
            file_seq: f,
            offset: o,
        };
        assert!(p(1, 9999) < p(2, 4));
        assert!(p(2, 4) < p(2, 5));
        assert_eq!(
            Position::in_file(b"mysql-bin.000010", 256).unwrap(),
            p(10, 256)
        );
        // A string compare would put .000010 before .000009 only if widths differ; numbers never do.
        assert!(Position::in_file(b"b.9", 1).unwrap() < Position::in_file(b"b.10", 1).unwrap());
    }

    proptest! {
        #[test]
        fn names_round_trip(seq in 0u64..10_000_000_000, width in 6usize..12) {
            let name = format!("mysql-bin.{seq:0width$}");
            prop_assert_eq!(file_seq(name.as_bytes()), Ok(seq));
        }
    }
}
