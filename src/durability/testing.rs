//! Helpers for strong sync's unit tests.

use strongsync_proto::position::Position;

/// `offset` in binlog file 1.
pub(super) fn at(offset: u64) -> Position {
    Position {
        file_seq: 1,
        offset,
    }
}
