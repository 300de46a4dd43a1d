//! Sans-IO MySQL/MariaDB wire formats for strongsync: bytes in, typed views out (each module
//! says which format it knows).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// Nothing here touches a socket, a clock or a runtime. Decoders answer `Ok(None)` when they need
// more bytes; parsers borrow from the packet they read, so that the proxy's hot path forwards the
// original bytes and rebuilds only the rare packet it edits.

pub mod auth;
pub mod binlog;
pub mod capabilities;
pub mod command;
pub mod compress;
pub mod dump_gtid;
pub mod error;
pub mod gtid;
pub mod handshake;
pub mod ok;
pub mod packet;
pub mod position;
pub mod response;
pub mod resultset;
pub mod semisync;
pub mod stmt;
pub mod wire;

#[cfg(test)]
mod testing;

pub use error::ProtoError;
/// The collations a handshake names by id, and their character sets.
pub use mysql_common::collations;
pub use packet::{Packet, PacketDecoder};
