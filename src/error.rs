//! Errors of a client session, whose fault each one is, and the one place where an error
//! becomes the MySQL ERR packet a client sees.

use std::io;
use std::time::Duration;

use strongsync_proto::ProtoError;
use thiserror::Error;

use crate::conn::ConnError;
use crate::durability::Cutoff;

/// The kinds of malformed input [`Error::malformed_kind`] names.
pub const MALFORMED_KINDS: [&str; 7] = [
    "client_packet_too_large",
    "client_out_of_sequence",
    "client_malformed_packet",
    "replica_malformed_ack",
    "replica_ack_beyond_relayed",
    "replica_unexpected_packet",
    "primary_malformed_packet",
];

/// Why a session ended abnormally (or a connection could not be served).
#[derive(Debug, Error)]
pub enum Error {
    /// The client closed its connection.
    #[error("client closed the connection")]
    ClientClosed,
    /// The client's socket failed (or closed in the middle of a packet).
    #[error("client connection failed: {0}")]
    ClientIo(#[source] io::Error),
    /// The client sent bytes that are not valid protocol here.
    #[error("client sent a malformed packet: {0}")]
    ClientProtocol(#[source] ProtoError),
    /// The client asked for TLS and the handshake failed.
    #[error("TLS handshake with the client failed: {0}")]
    ClientTls(#[source] io::Error),
    /// The client did not finish logging in in time.
    #[error("client did not complete the handshake within {0:?}")]
    HandshakeTimeout(Duration),
    /// The client began a packet (or owed one mid-command) and did not finish it in time:
    /// a slow-loris client, or one that stopped half-way.
    #[error("client did not send a complete packet within {0:?} (timeouts.client_read)")]
    ClientReadTimeout(Duration),
    /// The client stopped reading: a write to it made no progress for this long.
    #[error("client stopped reading its results: nothing could be written for {0:?} (timeouts.client_write)")]
    ClientWriteTimeout(Duration),
    /// The primary could not be reached.
    #[error("cannot connect to primary {addr}: {source}")]
    PrimaryConnect {
        /// The primary's configured address.
        addr: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The primary did not answer in time.
    #[error("cannot connect to primary {addr}: no greeting within {after:?}")]
    PrimaryConnectTimeout {
        /// The primary's configured address.
        addr: String,
        /// The timeout.
        after: Duration,
    },
    /// `primary_tls` asks for TLS and the primary does not offer it.
    #[error("the primary at {addr} offers no TLS, and primary_tls = \"{mode}\" requires it: configure TLS on the primary (ssl_cert and ssl_key) or set primary_tls = \"preferred\"")]
    PrimaryTlsUnavailable {
        /// The primary's address.
        addr: String,
        /// The mode in force.
        mode: crate::config::PrimaryTls,
    },
    /// The TLS handshake with the primary failed: its certificate refused, most often.
    #[error("TLS to the primary at {addr} failed (primary_tls = \"{mode}\"): {source}")]
    PrimaryTls {
        /// The primary's address.
        addr: String,
        /// The mode in force.
        mode: crate::config::PrimaryTls,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// strongsync did not pass the client's password on (see [`PasswordRefused`]).
    #[error("{0}")]
    Password(PasswordRefused),
    /// strongsync's RSA key for passwords could not be made.
    #[error("{0}")]
    PasswordKey(#[source] crate::tls::PasswordKeyError),
    /// The primary closed the connection.
    #[error("primary closed the connection")]
    PrimaryClosed,
    /// The primary's socket failed.
    #[error("primary connection failed: {0}")]
    PrimaryIo(#[source] io::Error),
    /// The primary sent bytes the proxy cannot frame.
    #[error("primary sent a packet the proxy cannot frame: {0}")]
    PrimaryProtocol(#[source] ProtoError),
    /// Every connection slot is taken.
    #[error("too many connections (limit {limit})")]
    TooManyConnections {
        /// The configured limit.
        limit: usize,
    },
    /// No connection of the session's pool came free within `sharing.max_wait`; the session
    /// goes on (the statement was not sent).
    #[error("no connection to the primary came free within {waited:?} (sharing.pool_size = {pool_size}); try again")]
    PoolExhausted {
        /// `sharing.max_wait`.
        waited: std::time::Duration,
        /// `sharing.pool_size`.
        pool_size: usize,
    },
    /// Every connection the session's pool had is closed (the primary ended them while they
    /// were free, or restarted): the session ends, as a direct connection would, and the
    /// client's next login fills the pool again.
    #[error("every connection to the primary shared by this account's clients is closed (the primary ended them while they were free); reconnect")]
    PoolGone,
    /// A statement command named an id the session never gave a statement, or gave one it
    /// has closed since (ids are the session's own under `[sharing]`).
    #[error("Unknown prepared statement handler ({id}) given to {command}")]
    UnknownStatement {
        /// The id the client sent.
        id: u32,
        /// The command that named it.
        command: &'static str,
    },
    /// An execute of 16 MiB or more left its parameter types out, on a shared connection that
    /// last ran the statement with other types: they cannot be added to a packet of the
    /// largest size.
    #[error("this execute of statement {id} leaves its parameter types out, and the shared connection it runs on last ran the statement with other types; send them with it (new_params_bound_flag = 1)")]
    TypesLeftOut {
        /// The id the client sent.
        id: u32,
    },
    /// A session that shares connections prepared `sharing.statements_per_session`
    /// statements and closed none of them.
    #[error("Can't create more than {limit} prepared statements in one session (sharing.statements_per_session); close some")]
    TooManyStatements {
        /// `sharing.statements_per_session`.
        limit: usize,
    },
    /// A commit did not reach its quorum in time (`on_timeout = error`); the session goes on.
    #[error("{0}")]
    NotAcknowledged(#[from] crate::durability::NotAcknowledged),
    /// A replica broke the replication protocol.
    #[error("replica misbehaved: {0}")]
    Replica(#[from] ReplicaError),
    /// The proxy refused a client's binlog dump request; the client session goes on.
    #[error("binlog dump refused: {0}")]
    ReplicaSetup(#[from] ReplicaSetupError),
    /// The proxy is shutting down.
    #[error("proxy is shutting down")]
    Shutdown,
    /// strongsync fenced its primary: nothing is relayed to it or from it until strongsync
    /// follows a new one.
    #[error("primary fenced (epoch {epoch}): strongsync refuses statements until it follows a new primary")]
    Fenced {
        /// The fenced primary's epoch.
        epoch: u64,
    },
    /// This instance does not lead its cluster (it lost its lease, or never held it): it
    /// serves nothing, and the connection is closed so that the client reaches the leader.
    #[error("this strongsync instance does not lead its cluster now{}: reconnect through the cluster's address to reach the leader", leader.as_deref().map(|l| format!(" (the leader is {l})")).unwrap_or_default())]
    NotLeading {
        /// The leader, as it advertises itself, if one is known.
        leader: Option<String>,
    },
    /// The connection's epoch is over: strongsync follows another primary now, and a
    /// connection opened to the old one never reaches it again.
    #[error("this connection belongs to epoch {epoch}, whose primary strongsync no longer follows (it follows the primary of epoch {now}); reconnect")]
    Retired {
        /// The connection's epoch.
        epoch: u64,
        /// The epoch in force.
        now: u64,
    },
}

impl From<crate::gate::Refused> for Error {
    fn from(refused: crate::gate::Refused) -> Self {
        match refused {
            crate::gate::Refused::Fenced { epoch } => Error::Fenced { epoch },
            crate::gate::Refused::Retired { epoch, now } => Error::Retired { epoch, now },
            crate::gate::Refused::NotLeading { .. } => Error::NotLeading { leader: None },
        }
    }
}

/// Why strongsync did not pass a client's password on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordRefused {
    /// The client sent it in clear over plain TCP to strongsync.
    FromClient,
    /// The client sent it in clear over TLS, and strongsync's connection to the primary is
    /// plain.
    ToPrimary,
    /// The client encrypted it with a server key it had already, which strongsync cannot
    /// read, while the primary wants it in clear over strongsync's secure connection.
    ForeignKey,
    /// What the client encrypted for strongsync's key does not decrypt.
    Undecryptable,
}

impl PasswordRefused {
    /// Why, as the metric labels it.
    pub fn label(self) -> &'static str {
        match self {
            PasswordRefused::FromClient => "clear_from_client",
            PasswordRefused::ToPrimary => "clear_to_primary",
            PasswordRefused::ForeignKey => "foreign_key",
            PasswordRefused::Undecryptable => "undecryptable",
        }
    }
}

impl std::fmt::Display for PasswordRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PasswordRefused::FromClient => "the client sent its password in clear over a connection without TLS, and strongsync does not pass a clear password on: connect with TLS (strongsync offers it unless tls.disabled), or let the client ask for the server's RSA key (mysql --get-server-public-key)",
            PasswordRefused::ToPrimary => "the client sent its password in clear, and strongsync's connection to the primary has no TLS, so strongsync does not pass it on: configure TLS on the primary and leave primary_tls at \"preferred\" or stronger, or connect strongsync to the primary's Unix socket",
            PasswordRefused::ForeignKey => "the client encrypted its password with a server RSA key it already had, which strongsync cannot read, and the primary wants the password itself over strongsync's TLS: let the client ask for the key (drop --server-public-key-path), or connect with TLS",
            PasswordRefused::Undecryptable => "the client's password does not decrypt with the RSA key strongsync sent it",
        })
    }
}

/// What a replica did wrong on its dump connection.
#[derive(Debug, Error)]
pub enum ReplicaError {
    /// Its ACK does not parse.
    #[error("malformed semisync ACK: {0}")]
    MalformedAck(#[source] ProtoError),
    /// Its ACK is for a position it cannot have.
    #[error("semisync ACK refused: {0}")]
    Ack(#[from] crate::durability::AckError),
    /// It sent something other than an ACK during the dump.
    #[error("unexpected packet starting with 0x{first:02x} during the binlog dump")]
    Unexpected {
        /// First payload byte.
        first: u8,
    },
}

/// Why the proxy refuses a dump request before the primary sees it.
#[derive(Debug, Error)]
pub enum ReplicaSetupError {
    /// Reading what the dump would start from failed: the primary answered strongsync's query
    /// on the replica's connection with an ERR.
    #[error("could not read the connection's replication settings: {error}")]
    Probe {
        /// The ERR's code, if it had one.
        code: Option<u16>,
        /// The ERR as the primary sent it (`code message`).
        error: String,
    },
    /// The client set `@rpl_semi_sync_slave` in a way that reached the primary: the primary
    /// would add semisync headers the proxy does not expect.
    #[error("@rpl_semi_sync_slave reached the primary; strongsync is the replica's semisync master and answers only `SET @rpl_semi_sync_slave = 1` itself")]
    SemisyncOnPrimary,
}

/// Whose fault an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client (application) connection.
    Client,
    /// The primary.
    Primary,
    /// A replica on its dump connection.
    Replica,
    /// The proxy's own limits or lifecycle.
    Proxy,
}

/// An ERR packet to send a client: code, SQLSTATE and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    /// MySQL error code.
    pub code: u16,
    /// SQLSTATE.
    pub sql_state: &'static [u8; 5],
    /// Message.
    pub message: String,
}

// === impl Error ===

impl Error {
    /// Maps a read/write failure on the client connection.
    pub fn from_client(err: ConnError) -> Self {
        match err {
            ConnError::Closed => Error::ClientClosed,
            ConnError::ClosedMidPacket => Error::ClientIo(closed_mid_packet()),
            ConnError::Io(e) => Error::ClientIo(e),
            ConnError::Protocol(e) => Error::ClientProtocol(e),
            ConnError::ReadTimedOut(limit) => Error::ClientReadTimeout(limit),
            ConnError::WriteStalled(limit) => Error::ClientWriteTimeout(limit),
        }
    }

    /// Maps a read/write failure on the primary connection.
    pub fn from_primary(err: ConnError) -> Self {
        match err {
            ConnError::Closed => Error::PrimaryClosed,
            ConnError::ClosedMidPacket => Error::PrimaryIo(closed_mid_packet()),
            ConnError::Io(e) => Error::PrimaryIo(e),
            ConnError::Protocol(e) => Error::PrimaryProtocol(e),
            // The proxy sets no read or write limits on the primary leg (the primary has its
            // own); mapped for completeness.
            timed_out @ (ConnError::ReadTimedOut(_) | ConnError::WriteStalled(_)) => {
                Error::PrimaryIo(io::Error::new(
                    io::ErrorKind::TimedOut,
                    timed_out.to_string(),
                ))
            }
        }
    }

    /// Whose fault it is.
    pub fn side(&self) -> Side {
        match self {
            Error::ClientClosed
            | Error::ClientIo(_)
            | Error::ClientProtocol(_)
            | Error::ClientTls(_)
            | Error::HandshakeTimeout(_)
            | Error::ClientReadTimeout(_)
            | Error::ClientWriteTimeout(_)
            | Error::Password(
                PasswordRefused::FromClient
                | PasswordRefused::ForeignKey
                | PasswordRefused::Undecryptable,
            ) => Side::Client,
            Error::PrimaryConnect { .. }
            | Error::PrimaryTlsUnavailable { .. }
            | Error::PrimaryTls { .. }
            | Error::Password(PasswordRefused::ToPrimary)
            | Error::PrimaryConnectTimeout { .. }
            | Error::PrimaryClosed
            | Error::PrimaryIo(_)
            | Error::PrimaryProtocol(_) => Side::Primary,
            Error::Replica(_) | Error::ReplicaSetup(_) => Side::Replica,
            Error::TooManyConnections { .. }
            | Error::PoolExhausted { .. }
            | Error::PoolGone
            | Error::UnknownStatement { .. }
            | Error::TypesLeftOut { .. }
            | Error::TooManyStatements { .. }
            | Error::NotAcknowledged(_)
            | Error::Shutdown
            | Error::Fenced { .. }
            | Error::Retired { .. }
            | Error::NotLeading { .. }
            | Error::PasswordKey(_) => Side::Proxy,
        }
    }

    /// For input rejected as malformed, its kind (one of [`MALFORMED_KINDS`], a label of the
    /// malformed-input metric).
    pub fn malformed_kind(&self) -> Option<&'static str> {
        Some(match self {
            Error::ClientProtocol(ProtoError::TooLarge { .. }) => "client_packet_too_large",
            Error::ClientProtocol(ProtoError::OutOfSequence { .. }) => "client_out_of_sequence",
            Error::ClientProtocol(_) => "client_malformed_packet",
            Error::Replica(ReplicaError::MalformedAck(_)) => "replica_malformed_ack",
            Error::Replica(ReplicaError::Ack(_)) => "replica_ack_beyond_relayed",
            Error::Replica(ReplicaError::Unexpected { .. }) => "replica_unexpected_packet",
            Error::PrimaryProtocol(_) => "primary_malformed_packet",
            _ => return None,
        })
    }

    /// True for the ordinary ways a session ends, which are not worth more than a debug line.
    pub fn is_routine(&self) -> bool {
        matches!(
            self,
            Error::ClientClosed
                | Error::Shutdown
                | Error::Fenced { .. }
                | Error::Retired { .. }
                | Error::NotLeading { .. }
        )
    }

    /// The ERR packet the client should get before its connection is closed, if any. This is
    /// the only place errors become MySQL error codes.
    pub fn client_error(&self) -> Option<ClientError> {
        let (code, sql_state) = match self {
            Error::ClientProtocol(ProtoError::OutOfSequence { .. }) => (1156, b"08S01"), // ER_NET_PACKETS_OUT_OF_ORDER
            Error::ClientProtocol(ProtoError::TooLarge { .. }) => (1153, b"08S01"), // ER_NET_PACKET_TOO_LARGE
            Error::ClientProtocol(_) => (1835, b"HY000"), // ER_MALFORMED_PACKET
            Error::HandshakeTimeout(_) => (1043, b"08S01"), // ER_HANDSHAKE_ERROR
            Error::ClientReadTimeout(_) => (1159, b"08S01"), // ER_NET_READ_INTERRUPTED
            // ER_UNKNOWN_ERROR: Connector/C (3.3.9+) rejects client-range codes (2000-2999)
            // from a server as forged, so CR_CONN_HOST_ERROR cannot be used; the message
            // names the primary.
            Error::PrimaryConnect { .. }
            | Error::PrimaryConnectTimeout { .. }
            | Error::PrimaryTlsUnavailable { .. }
            | Error::PrimaryTls { .. } => (1105, b"HY000"),
            // ER_ACCESS_DENIED_ERROR, as the server refuses a login: the client's tools know it.
            Error::Password(_) => (1045, b"28000"),
            Error::PasswordKey(_) => (1105, b"HY000"),
            Error::PrimaryProtocol(_) => (1158, b"08S01"), // ER_NET_READ_ERROR
            // ER_MASTER_FATAL_ERROR_READING_BINLOG: what a primary answers a dump it refuses.
            Error::ReplicaSetup(_) => (1236, b"HY000"),
            Error::TooManyConnections { .. } | Error::PoolExhausted { .. } => (1040, b"08004"), // ER_CON_COUNT_ERROR
            Error::UnknownStatement { .. } => (1243, b"HY000"), // ER_UNKNOWN_STMT_HANDLER
            Error::TypesLeftOut { .. } => (1210, b"HY000"),     // ER_WRONG_ARGUMENTS
            // ER_MAX_PREPARED_STMT_COUNT_REACHED, as the server refuses one statement too many.
            Error::TooManyStatements { .. } => (1461, b"42000"),
            // ER_ERROR_DURING_COMMIT: the commit happened on the fenced primary and its fate
            // is not known, which no other cut-off shares.
            Error::NotAcknowledged(e)
                if matches!(e.cause, Cutoff::Fenced { .. } | Cutoff::NotLeading { .. }) =>
            {
                (1180, b"HY000")
            }
            Error::NotAcknowledged(_) => (1105, b"HY000"), // ER_UNKNOWN_ERROR
            // ER_OPTION_PREVENTS_STATEMENT, as a read-only server refuses a write.
            Error::Fenced { .. } => (1290, b"HY000"),
            // ER_CONNECTION_KILLED: the connection is closed after it, as after a KILL, and
            // connection pools open a new one (which reaches the new primary, or fills an
            // emptied pool again).
            Error::Retired { .. } | Error::NotLeading { .. } | Error::PoolGone => (1927, b"70100"),
            Error::Shutdown => (1053, b"08S01"), // ER_SERVER_SHUTDOWN
            // The peer is gone, its socket is broken or it reads nothing: nobody to tell. A
            // replica in the middle of a dump is only disconnected: it reconnects by itself,
            // where an error would stop its I/O thread for good.
            Error::Replica(_)
            | Error::ClientClosed
            | Error::ClientIo(_)
            | Error::ClientWriteTimeout(_)
            | Error::ClientTls(_)
            | Error::PrimaryClosed
            | Error::PrimaryIo(_) => return None,
        };
        Some(ClientError {
            code,
            sql_state,
            message: format!("strongsync: {self}"),
        })
    }
}

fn closed_mid_packet() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "closed in the middle of a packet",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_malformed_kind_is_listed() {
        let truncated = || ProtoError::Truncated { what: "x" };
        let errors = [
            Error::ClientProtocol(ProtoError::TooLarge { len: 2, max: 1 }),
            Error::ClientProtocol(ProtoError::OutOfSequence {
                expected: 1,
                got: 2,
            }),
            Error::ClientProtocol(truncated()),
            Error::Replica(ReplicaError::MalformedAck(truncated())),
            Error::Replica(ReplicaError::Ack(
                crate::durability::AckError::BeyondRelayed {
                    acked: strongsync_proto::position::Position {
                        file_seq: 1,
                        offset: 4,
                    },
                    relayed: None,
                },
            )),
            Error::Replica(ReplicaError::Unexpected { first: 0 }),
            Error::PrimaryProtocol(truncated()),
        ];
        let kinds: Vec<_> = errors.iter().filter_map(Error::malformed_kind).collect();
        assert_eq!(kinds, MALFORMED_KINDS);
        assert_eq!(Error::ClientClosed.malformed_kind(), None);
    }

    #[test]
    fn client_errors_name_the_problem_and_use_the_servers_codes() {
        let table = [
            (
                Error::ClientProtocol(ProtoError::OutOfSequence {
                    expected: 1,
                    got: 7,
                }),
                Some(1156),
                "expected sequence id 1, got 7",
            ),
            (
                Error::ClientProtocol(ProtoError::TooLarge { len: 99, max: 10 }),
                Some(1153),
                "99 bytes exceeds the limit of 10",
            ),
            (
                Error::PrimaryConnect {
                    addr: "db1:3306".into(),
                    source: io::ErrorKind::ConnectionRefused.into(),
                },
                Some(1105),
                "cannot connect to primary db1:3306",
            ),
            (
                Error::TooManyConnections { limit: 5 },
                Some(1040),
                "limit 5",
            ),
            (
                Error::PoolExhausted {
                    waited: Duration::from_secs(10),
                    pool_size: 32,
                },
                Some(1040),
                "sharing.pool_size = 32",
            ),
            (
                Error::ClientReadTimeout(Duration::from_secs(30)),
                Some(1159),
                "within 30s (timeouts.client_read)",
            ),
            (
                Error::Retired { epoch: 1, now: 2 },
                Some(1927),
                "belongs to epoch 1",
            ),
            (Error::PoolGone, Some(1927), "reconnect"),
            (
                Error::Password(PasswordRefused::ToPrimary),
                Some(1045),
                "primary_tls",
            ),
            (
                Error::PrimaryTlsUnavailable {
                    addr: "db1:3306".into(),
                    mode: crate::config::PrimaryTls::Required,
                },
                Some(1105),
                "primary_tls = \"required\"",
            ),
            (Error::ClientWriteTimeout(Duration::from_secs(60)), None, ""),
            (Error::ClientClosed, None, ""),
            (Error::PrimaryClosed, None, ""),
        ];
        for (error, code, text) in table {
            let got = error.client_error();
            assert_eq!(got.as_ref().map(|e| e.code), code, "{error}");
            if let Some(e) = got {
                assert!(e.message.starts_with("strongsync: "), "{}", e.message);
                assert!(e.message.contains(text), "{} lacks {text}", e.message);
            }
        }
    }
}
