//! The read barrier (`durability.visibility`): what a response may reveal waits until the
//! quorum holds it.

mod bound;
mod cover;
pub(crate) mod reveals_nothing;
pub(crate) mod snapshot;

pub(crate) use bound::Bounds;
pub(crate) use cover::{Replacement, SnapshotCover};

// What a response may reveal is bounded by the primary's binlog position, read by the probe,
// and held until the quorum has it; one bound serves a transaction that reads only its
// snapshot.
