//! Sans-IO MySQL/MariaDB wire formats for strongsync: bytes in, typed views out.
//!
//! Nothing here touches a socket, a clock or a runtime. Decoders take bytes and answer
//! `Ok(None)` when they need more; parsers borrow from the packet they read so that the proxy's
//! hot path can forward the original bytes untouched and only rebuild the rare packet it edits.
//!
//! | module | what it knows |
//! |---|---|
//! | [`packet`] | framing (`u24 length, u8 sequence id`), payloads of 16 MiB and more, sequence checks |
//! | [`wire`] | the protocol's integer and string encodings (fixed, length-encoded, NUL-terminated) |
//! | [`capabilities`] | capability flags and which ones the proxy lets each leg negotiate |
//! | [`handshake`] | the server greeting (HandshakeV10), SSLRequest and HandshakeResponse41 |
//! | [`auth`] | which packets of an authentication exchange carry a password in clear |
//! | [`command`] | command bytes of the command phase |
//! | [`ok`] | OK / EOF / ERR packets and the session-state block inside OK |
//! | [`gtid`] | GTIDs as MariaDB (`domain-server-seq`) and MySQL (`uuid:n`) report them |
//! | [`response`] | where each command's response ends, packet by packet |
//! | [`position`] | positions in the primary's binlog and their order |
//! | [`binlog`] | the dump stream: event headers, where transactions end, heartbeats |
//! | [`dump_gtid`] | MySQL's `COM_BINLOG_DUMP_GTID` request and the GTID set it carries |
//! | [`compress`] | the compressed protocol's frames |
//! | [`semisync`] | semisync negotiation statements, the event header, ACKs |
//! | [`stmt`] | statement ids and parameter types of the binary protocol's commands, rewritten |
//! | [`resultset`] | result sets and OKs for the statements the proxy answers itself |
#![forbid(unsafe_code)]
#![deny(missing_docs)]

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
