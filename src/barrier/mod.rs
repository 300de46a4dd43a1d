//! The read barrier (`durability.visibility`): what a response may reveal is bounded by the
//! primary's binlog position and held until the quorum has it, one bound per snapshot where
//! a transaction reads only its snapshot.

mod bound;
mod cover;
pub(crate) mod reveals_nothing;
pub(crate) mod snapshot;

pub(crate) use bound::Bounds;
pub(crate) use cover::{Replacement, SnapshotCover};
