//! One client session: a state machine over [`Phase`]s, driven by [`Session::run`]. Each phase
//! is a method that runs until the next phase is known.

use std::net::SocketAddr;

use bytes::BufMut;
use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::capabilities::{CapabilityFlags, MariadbCapabilities, StatusFlags};
use strongsync_proto::command::{self, *};
use strongsync_proto::ok;
use strongsync_proto::packet::{Packet, Sequence};
use strongsync_proto::response::ResponseReader;
use strongsync_proto::reveals_nothing;
use strongsync_proto::snapshot;
use strongsync_proto::ProtoError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::pipe::ReplicaPipe;
use super::replica::{AcceptedDump, ReplicaSetup};
use super::snapshot::{Replacement, Snapshot};
use super::tracking::Tracking;
use super::Shared;
use crate::app::InFlightGuard;
use crate::conn::{Conn, ReadDeadline};
use crate::error::Error;
use crate::primary::PrimaryStream;
use crate::stream::ClientStream;

/// Unread client bytes the proxy buffers while a response is in flight (pipelined commands);
/// past this it stops reading the client until the response is done.
pub(super) const CLIENT_READ_AHEAD: usize = 256 * 1024;

/// Queued response bytes that trigger a write to the client even if more packets are
/// already buffered from the primary.
pub(super) const FLUSH_AT: usize = 64 * 1024;

/// Under the read barrier, response bytes gathered before a part of an unfinished response is
/// bounded and released (at most `limits.max_held_response_bytes`): a large result set streams
/// in parts of this size, one probe reading each.
pub(super) const READ_HOLD_CHUNK: usize = 1024 * 1024;

/// One client and its connection to the primary.
pub(crate) struct Session {
    pub(super) shared: Arc<Shared>,
    pub(super) client: Conn<ClientStream>,
    pub(super) primary: Conn<PrimaryStream>,
    pub(super) cancel: CancellationToken,
    /// The primary's id for this connection.
    pub(super) connection_id: u32,
    /// The primary is MariaDB (not MySQL).
    pub(super) mariadb: bool,
    /// Capabilities the client negotiated (offered in the greeting and asked for).
    pub(super) client_caps: CapabilityFlags,
    /// MariaDB extended capabilities the client negotiated, if it is a MariaDB client.
    pub(super) client_ext_caps: Option<MariadbCapabilities>,
    /// The primary leg negotiated session tracking (the proxy asks; old servers may lack it).
    pub(super) primary_tracks: bool,
    /// Sequence ids of the current exchange, as each leg sees them.
    pub(super) client_seq: Sequence,
    pub(super) primary_seq: Sequence,
    /// The client has sent a protocol-4.1 login, so ERR packets may carry a SQLSTATE.
    pub(super) logged_in: bool,
    pub(super) tracking: Tracking,
    /// Whether the transaction in progress reads only a snapshot the read barrier bounded.
    pub(super) snapshot: Snapshot,
    /// Status flags of the last OK or EOF the primary sent (for answers the proxy makes up).
    pub(super) last_status: StatusFlags,
    /// What a replica said before asking for the binlog.
    pub(super) replica: ReplicaSetup,
    /// Every statement so far was one a replica sends before its dump, which reveals no data
    /// (see [`strongsync_proto::reveals_nothing`]).
    pub(super) setup_only: bool,
    /// The response in flight is to such a statement, to a plain `BEGIN`, `COMMIT` or
    /// `ROLLBACK`, or to `COM_PING` or `COM_RESET_CONNECTION`: the read barrier lets it through.
    pub(super) reveals_nothing: bool,
    /// Counts this session as a client session in flight until it ends or becomes a dump.
    pub(super) in_flight: Option<InFlightGuard>,
}

/// Where a session is.
#[derive(Debug)]
pub(super) enum Phase {
    /// Show the client the primary's greeting and relay the login.
    Login(Packet),
    /// Make the primary report GTIDs on this connection, before the next command.
    TrackingSetup,
    /// Waiting for the client's next command.
    Idle,
    /// Relaying the response to a command.
    Responding(ResponseReader),
    /// Relaying a `COM_CHANGE_USER` authentication exchange.
    ChangingUser,
    /// The primary accepted a binlog dump: the connection becomes a replica pipe.
    Dumping(AcceptedDump),
    /// Done; close both connections.
    Closed,
}

// === impl Session ===

impl Session {
    pub(super) fn new(
        shared: Arc<Shared>,
        client: Conn<ClientStream>,
        primary: Conn<PrimaryStream>,
        cancel: CancellationToken,
        in_flight: InFlightGuard,
    ) -> Self {
        Session {
            shared,
            client,
            primary,
            cancel,
            connection_id: 0,
            mariadb: true,
            client_caps: CapabilityFlags::empty(),
            client_ext_caps: None,
            primary_tracks: false,
            client_seq: Sequence::expecting(0),
            primary_seq: Sequence::expecting(0),
            logged_in: false,
            tracking: Tracking::default(),
            snapshot: Snapshot::default(),
            last_status: StatusFlags::SERVER_STATUS_AUTOCOMMIT,
            replica: ReplicaSetup::default(),
            setup_only: true,
            reveals_nothing: false,
            in_flight: Some(in_flight),
        }
    }

    /// Runs the session from the primary's greeting to the end, or until it becomes a
    /// replica pipe.
    pub(super) async fn run(mut self, greeting: Packet, peer: SocketAddr) {
        let limits = self.shared.config.timeouts.clone();
        let handshake = limits.client_handshake;
        let mut phase = Phase::Login(greeting);
        let result = loop {
            let next = match phase {
                Phase::Login(greeting) => within(handshake, self.login(greeting)).await,
                Phase::TrackingSetup => self.setup_tracking().await,
                Phase::Idle => self.await_command().await,
                Phase::Responding(reader) => self.relay_response(reader).await,
                // A re-authentication is a login: the same limit keeps a client from stalling
                // in the middle of one.
                Phase::ChangingUser => within(handshake, self.change_user()).await,
                Phase::Dumping(dump) => break Ok(Some(dump)),
                Phase::Closed => break Ok(None),
            };
            if matches!(next, Ok(Phase::Idle)) {
                self.count_relayed_bytes();
            }
            match next {
                Ok(next) => phase = next,
                Err(error) => break Err(error),
            }
        };
        if let Ok(Some(dump)) = result {
            self.count_relayed_bytes();
            // A dump is not a client session in flight: shutdown does not wait for it, it ends
            // it (the hard stop) once the parked commits it may be acknowledging are done.
            self.in_flight = None;
            let (pipe, first) = ReplicaPipe::admit(self, dump, peer);
            return pipe.run(first).await;
        }
        if let Err(error) = &result {
            self.report(error, peer).await;
        }
        // A client that stopped reading would stall the goodbye as well: it gets none, and
        // any other client gets no longer than a write may take.
        if !matches!(result, Err(Error::ClientWriteTimeout(_))) {
            let _ = tokio::time::timeout(limits.client_write, self.client.shutdown()).await;
        }
        self.primary.shutdown().await;
        self.count_relayed_bytes();
    }

    /// Adds what was written on both legs to the relayed-bytes counters.
    pub(super) fn count_relayed_bytes(&mut self) {
        let m = &self.shared.metrics;
        m.relayed_to_primary.inc_by(self.primary.take_written());
        m.relayed_to_client.inc_by(self.client.take_written());
    }

    /// Logs why the session ended and tells the client, if there is anything to tell.
    async fn report(&mut self, error: &Error, peer: SocketAddr) {
        if let Some(kind) = error.malformed_kind() {
            self.shared.metrics.malformed(kind);
        }
        if error.is_routine() {
            debug!(%error, "session ended");
        } else {
            warn!(%error, client = %peer, side = ?error.side(), "closing client connection");
        }
        let seq = self.client_seq.advance();
        queue_client_error(&mut self.client, seq, self.logged_in, error);
    }

    /// Waits for the next command, watching the primary connection and shutdown meanwhile.
    async fn await_command(&mut self) -> Result<Phase, Error> {
        self.client_seq = Sequence::expecting(0);
        self.primary_seq = Sequence::expecting(0);
        // Idling between commands is not limited; a command begun must be finished in time.
        let read_limit = self.shared.config.timeouts.client_read;
        let packet = loop {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(Error::Shutdown),
                packet = self.client.read_packet_within(read_limit, ReadDeadline::FromFirstByte) => {
                    break packet.map_err(Error::from_client)?
                }
                filled = self.primary.fill() => {
                    // The primary has nothing to say between commands; it is closing (KILL,
                    // wait_timeout, shutdown). What it sent stays buffered for the next
                    // response, as it would on a direct connection.
                    if filled.map_err(Error::from_primary)? == 0 {
                        return Err(Error::PrimaryClosed);
                    }
                }
            }
        };
        self.dispatch(packet).await
    }

    /// Forwards a command to the primary and decides what follows it.
    async fn dispatch(&mut self, packet: Packet) -> Result<Phase, Error> {
        self.take_client_seq(&packet)?;
        let Some(&cmd) = packet.payload().first() else {
            return Err(Error::ClientProtocol(ProtoError::Malformed {
                what: "empty command packet",
            }));
        };
        debug!(
            command = command::name(cmd),
            len = packet.payload().len(),
            "command"
        );
        if let Some(negotiation) = self.replica.negotiation(packet.payload()) {
            return self.answer_negotiation(negotiation).await;
        }
        if matches!(cmd, COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID) {
            return self.request_dump(&packet).await;
        }
        self.tracking.note_command(packet.payload());
        let sql = (cmd == COM_QUERY).then(|| &packet.payload()[1..]);
        self.setup_only = self.setup_only
            && (cmd == COM_REGISTER_SLAVE || sql.is_some_and(reveals_nothing::replica_setup));
        // The OK of a ping or a reset carries nothing but status flags (and the reset
        // trackers' state). Only the read barrier asks; without it nothing is looked at.
        self.reveals_nothing = self.setup_only
            || (self.shared.durability.reads_wait()
                && (matches!(cmd, COM_PING | COM_RESET_CONNECTION)
                    || sql.is_some_and(reveals_nothing::transaction_control)));
        match self.note_for_snapshot(packet.payload(), !packet.continues()) {
            Replacement::None => self.forward_command(&packet).await?,
            Replacement::StartWithSnapshot => {
                // Its OK is bounded: that bound covers every read of the snapshot.
                self.reveals_nothing = false;
                self.primary
                    .write_packet_with(self.primary_seq.advance(), |buf| {
                        buf.put_u8(COM_QUERY);
                        buf.put_slice(snapshot::START_WITH_SNAPSHOT);
                    });
                self.flush_primary().await?;
            }
        }
        Ok(match cmd {
            COM_QUIT => Phase::Closed,
            COM_CHANGE_USER => Phase::ChangingUser,
            _ => match ResponseReader::for_command(packet.payload(), self.deprecate_eof()) {
                Some(reader) => Phase::Responding(reader),
                None => Phase::Idle,
            },
        })
    }

    /// Sends the command's packets (all of them, for a payload of 16 MiB or more) to the
    /// primary.
    async fn forward_command(&mut self, first: &Packet) -> Result<(), Error> {
        self.primary.forward_as(first, self.primary_seq.advance());
        let mut continues = first.continues();
        while continues {
            if !self.client.has_buffered_packet() {
                self.flush_primary().await?;
            }
            let packet = self.read_client_packet().await?;
            self.primary.forward_as(&packet, self.primary_seq.advance());
            continues = packet.continues();
        }
        self.flush_primary().await
    }

    /// Reads the client's next packet of the current exchange. Once the client has logged in
    /// it owes the packet, so it must arrive within `timeouts.client_read`; before, the login
    /// as a whole has `timeouts.client_handshake` instead.
    pub(super) async fn read_client_packet(&mut self) -> Result<Packet, Error> {
        let read = if self.logged_in {
            let limit = self.shared.config.timeouts.client_read;
            self.client
                .read_packet_within(limit, ReadDeadline::FromNow)
                .await
        } else {
            self.client.read_packet().await
        };
        let packet = read.map_err(Error::from_client)?;
        self.take_client_seq(&packet)?;
        Ok(packet)
    }

    /// Checks a client packet's sequence id. Under the compressed protocol the frames carry
    /// the sequence and a packet's own id follows its client's count of frames (servers do not
    /// check it there either): it is taken as it comes, and the connection numbers what goes
    /// back by its frames.
    pub(super) fn take_client_seq(&mut self, packet: &Packet) -> Result<(), Error> {
        if self.client.is_compressed() {
            self.client_seq = Sequence::expecting(packet.seq().wrapping_add(1));
            return Ok(());
        }
        self.client_seq
            .check(packet.seq())
            .map_err(Error::ClientProtocol)
    }

    /// The client negotiated `CLIENT_DEPRECATE_EOF` (so did the primary leg: the proxy
    /// passes the client's choice on).
    pub(super) fn deprecate_eof(&self) -> bool {
        self.client_caps
            .contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
    }

    pub(super) async fn flush_primary(&mut self) -> Result<(), Error> {
        self.primary.flush().await.map_err(Error::PrimaryIo)
    }

    /// Writes what is queued for the client. While the client does not read, nothing more is
    /// read from the primary either (the session is here, not reading), so a client that stops
    /// reading holds at most what is queued; after `timeouts.client_write` without progress
    /// the session ends.
    pub(super) async fn flush_client(&mut self) -> Result<(), Error> {
        let limit = self.shared.config.timeouts.client_write;
        self.client
            .flush_within(limit)
            .await
            .map_err(Error::from_client)
    }
}

/// Runs a login (or re-authentication) that must be over within `limit`.
async fn within(
    limit: Duration,
    login: impl std::future::Future<Output = Result<Phase, Error>>,
) -> Result<Phase, Error> {
    tokio::time::timeout(limit, login)
        .await
        .unwrap_or(Err(Error::HandshakeTimeout(limit)))
}

/// Queues the ERR packet that tells the client about `error`, if it has one. The SQLSTATE
/// marker is only understood once the client has logged in with protocol 4.1; before the
/// greeting nothing has been negotiated.
pub(super) fn queue_client_error(
    client: &mut Conn<ClientStream>,
    seq: u8,
    logged_in: bool,
    error: &Error,
) {
    if let Some(err) = error.client_error() {
        let sql_state = logged_in.then_some(err.sql_state);
        client.write_packet_with(seq, |buf| {
            ok::put_err(buf, err.code, sql_state, &err.message)
        });
    }
}
