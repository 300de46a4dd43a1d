//! A logged-in client session: a state machine over [`Phase`]s, driven by [`Session::run`].

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::BufMut;
use strongsync_proto::auth::{FromClient, PasswordWatch};
use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::command::{self, *};
use strongsync_proto::handshake::ChangeUser;
use strongsync_proto::packet::Packet;
use strongsync_proto::response::ResponseReader;
use strongsync_proto::resultset;
use strongsync_proto::ProtoError;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::debug;

use super::dump::ReplicaSetup;
use super::in_flight::InFlightGuard;
use super::login::{relay_auth, Auth, ClientCaps, LoggedIn};
use super::relay::{Command, ResponseRelay, SessionParts};
use super::Shared;
use crate::barrier::{reveals_nothing, snapshot, Bounds, Replacement, SnapshotCover};
use crate::error::Error;
use crate::flavour::{Flavour, ProxyState, Tracker, TrackerContext};
use crate::legs::Legs;
use crate::replica::{AcceptedDump, DumpLegs, ReplicaPipe};
use crate::sharing::{Routed, Share};

// It runs from the tracking set-up to the end, or to the primary accepting the client's binlog
// dump, when the connection becomes a replica pipe. Each phase is a method that runs until
// the next phase is known; a response is relayed by a `ResponseRelay` that borrows the
// session's parts.

/// One logged-in client and its connection to the primary.
pub(super) struct Session {
    shared: Arc<Shared>,
    legs: Legs,
    cancel: CancellationToken,
    /// Resolves once `cancel` fires (made once, polled whenever the session waits for a
    /// command).
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The primary's id for this connection.
    connection_id: u32,
    flavour: Flavour,
    client: ClientCaps,
    /// The primary leg negotiated session tracking.
    primary_tracks: bool,
    /// The connection's scramble, for a `COM_CHANGE_USER`'s password.
    scramble: [u8; strongsync_proto::auth::SCRAMBLE_LEN],
    /// How the primary reports the session's commits.
    tracker: Tracker,
    /// Whether the transaction in progress reads only a snapshot the read barrier bounded.
    cover: SnapshotCover,
    /// What a replica said before asking for the binlog.
    replica: ReplicaSetup,
    /// Status flags of the last OK or EOF the primary sent (for answers the proxy makes up).
    last_status: StatusFlags,
    /// Every statement so far was one a replica sends before its dump, which reveals no data
    /// (see [`strongsync_proto::reveals_nothing`]).
    setup_only: bool,
    /// Counts this session as a client session in flight until it ends or becomes a dump.
    in_flight: Option<InFlightGuard>,
    /// The session's part in `[sharing]`, when it is on.
    share: Option<Share>,
}

/// Where a session is.
#[derive(Debug)]
enum Phase {
    /// Make the primary report GTIDs on this connection, before the next command.
    TrackingSetup,
    /// Waiting for the client's next command.
    Idle,
    /// Relaying the response to a command.
    Responding(Command),
    /// Relaying a `COM_CHANGE_USER` authentication exchange.
    ChangingUser(PasswordWatch),
    /// The primary accepted a binlog dump: the connection becomes a replica pipe.
    Dumping(AcceptedDump),
    /// The session's epoch ended while it was idle: the connection to the retired primary is
    /// closed, and the client's next command gets the error.
    Retired,
    /// Done; close both connections.
    Closed,
}

/// What became of a command sent on.
enum Sent {
    /// Answered on the way (sharing refused or answered it): nothing follows.
    Answered,
    /// Sent to the primary; the response to relay, if it has one.
    Command(Option<Command>),
}

/// How a session's loop ended.
enum End {
    Closed,
    Dump(AcceptedDump),
    Retired,
}

// === impl Session ===

impl Session {
    pub(super) fn new(
        shared: Arc<Shared>,
        mut logged_in: LoggedIn,
        cancel: CancellationToken,
        in_flight: InFlightGuard,
    ) -> Self {
        let client = logged_in.client();
        let tracker = logged_in.flavour().tracker(TrackerContext {
            connection_id: logged_in.connection_id(),
            client_tracks: client.tracks(),
            primary_tracks: logged_in.primary_tracks(),
            // With a probe the read barrier may come on: transactions are tracked so that it
            // can bound one per snapshot.
            snapshot_vars: shared.probe.is_some() && client.deprecate_eof(),
            metrics: Arc::clone(&shared.metrics),
            proxy: Arc::new(shared.door.clone()) as Arc<dyn ProxyState>,
        });
        let pool_key = logged_in.pool_key().filter(|_| shared.pools.enabled());
        let connection_id = logged_in.connection_id();
        let flavour = logged_in.flavour();
        let primary_tracks = logged_in.primary_tracks();
        let scramble = logged_in.scramble();
        let last_status = logged_in.status();
        let legs = logged_in.into_legs();
        let share = pool_key.map(|key| {
            Share::new(
                Arc::clone(&shared.pools),
                key,
                connection_id,
                legs.epoch().number(),
                Arc::clone(&shared.metrics),
            )
        });
        Session {
            share,
            connection_id,
            flavour,
            primary_tracks,
            scramble,
            last_status,
            legs,
            shared,
            shutdown: Box::pin(cancel.clone().cancelled_owned()),
            cancel,
            client,
            tracker,
            cover: SnapshotCover::default(),
            replica: ReplicaSetup::default(),
            setup_only: true,
            in_flight: Some(in_flight),
        }
    }

    /// Runs the session to the end, or until it becomes a replica pipe.
    pub(super) async fn run(mut self, peer: SocketAddr) {
        let mut phase = Phase::TrackingSetup;
        let result = loop {
            let next = match phase {
                Phase::TrackingSetup => self.set_up_tracking().await,
                Phase::Idle => self.await_command().await,
                Phase::Responding(command) => self.relay_response(command).await,
                // A re-authentication is a login: the same limit keeps a client from stalling
                // in the middle of one.
                Phase::ChangingUser(passwords) => {
                    let limit = self.shared.config.timeouts.client_handshake;
                    tokio::time::timeout(limit, self.change_user(passwords))
                        .await
                        .unwrap_or(Err(Error::HandshakeTimeout(limit)))
                }
                Phase::Dumping(dump) => break Ok(End::Dump(dump)),
                Phase::Retired => break Ok(End::Retired),
                Phase::Closed => break Ok(End::Closed),
            };
            if matches!(next, Ok(Phase::Idle)) {
                self.legs.count_relayed_bytes(&self.shared.metrics);
            }
            match next {
                Ok(next) => phase = next,
                Err(error) => break Err(error),
            }
        };
        match result {
            Ok(End::Dump(dump)) => {
                self.legs.count_relayed_bytes(&self.shared.metrics);
                // A dump is not a client session in flight: shutdown does not wait for it, it
                // ends it (the hard stop) once the parked commits it may be acknowledging are
                // done.
                self.in_flight = None;
                // Nor a session that shares: its connection leaves its pool, and the session
                // the pinned-sessions count.
                self.share = None;
                let cx = self.shared.replicas.clone();
                let (replica, seq, backend) = self.legs.into_parts();
                let (primary, epoch) = backend.into_parts();
                let legs = DumpLegs {
                    replica,
                    seq,
                    primary,
                    epoch,
                };
                if let Some((pipe, first)) = ReplicaPipe::admit(cx, legs, dump, peer) {
                    pipe.run(first).await;
                }
            }
            Ok(End::Retired) => {
                self.shared.metrics.sessions_retired.inc();
                self.legs.count_relayed_bytes(&self.shared.metrics);
                super::retired::serve(self.legs, &self.cancel).await;
            }
            Ok(End::Closed) => self.legs.close(None, peer, &self.shared.metrics).await,
            Err(error) => {
                self.legs
                    .close(Some(error), peer, &self.shared.metrics)
                    .await
            }
        }
    }

    async fn set_up_tracking(&mut self) -> Result<Phase, Error> {
        self.tracker.set_up(&mut self.legs).await?;
        self.shared.take_in_quorum(&mut self.tracker);
        if let Some(share) = &mut self.share {
            if !self.tracker.tracks_from_defaults() {
                share.tracked_by_own_settings();
            }
        }
        Ok(Phase::Idle)
    }

    /// Waits for the next command, watching the primary connection, the epoch and shutdown
    /// meanwhile.
    async fn await_command(&mut self) -> Result<Phase, Error> {
        if let Some(share) = &mut self.share {
            share.give_back(&mut self.legs).await;
        }
        self.legs.new_exchange();
        let packet = match self.legs.next_command(self.shutdown.as_mut()).await {
            Ok(packet) => packet,
            Err(Error::Retired { .. }) => return Ok(Phase::Retired),
            Err(error) => return Err(error),
        };
        self.dispatch(packet).await
    }

    /// Forwards a command to the primary and decides what follows it, step by step: the
    /// goodbye, a connection for a session that shares, the gate, the replica's set-up, then
    /// the command itself.
    async fn dispatch(&mut self, packet: Packet) -> Result<Phase, Error> {
        self.legs.take_client_seq(&packet)?;
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
        if cmd == COM_QUIT {
            // Goodbye goes to the primary only if anything still may (a session that shares
            // has no connection of its own to say it on).
            if self.legs.has_backend() && self.legs.admitted().is_ok() {
                self.forward_command(&packet).await?;
            }
            return Ok(Phase::Closed);
        }
        if let Some(done) = self.take_connection(cmd, &packet).await? {
            return Ok(done);
        }
        if let Some(done) = self.refused_by_gate().await? {
            return Ok(done);
        }
        let passwords = (cmd == COM_CHANGE_USER)
            .then(|| self.change_user_passwords(packet.payload()))
            .transpose()?;
        if let Some(done) = self.replica_setup(cmd, &packet).await? {
            return Ok(done);
        }
        Ok(match (self.relay_command(cmd, &packet).await?, passwords) {
            (Sent::Answered, _) => Phase::Idle,
            (Sent::Command(_), Some(passwords)) => Phase::ChangingUser(passwords),
            (Sent::Command(response), None) => response.map_or(Phase::Idle, Phase::Responding),
        })
    }

    /// Atomic reads: every command passes here. A fenced primary gets no statement (the
    /// session may wait for the next one: `Some(Idle)`); a retired one gets nothing, ever.
    async fn refused_by_gate(&mut self) -> Result<Option<Phase>, Error> {
        match self.legs.admitted() {
            Ok(()) => Ok(None),
            Err(error @ Error::Fenced { .. }) => {
                self.legs.queue_client_error(&error);
                self.legs.flush_client().await?;
                Ok(Some(Phase::Idle))
            }
            Err(error) => Err(error),
        }
    }

    /// A replica's semisync negotiation (strongsync answers it) or its dump request (the
    /// primary may accept it): `Some(phase)` if the command was one.
    async fn replica_setup(&mut self, cmd: u8, packet: &Packet) -> Result<Option<Phase>, Error> {
        if let Some(negotiation) = self.replica.negotiation(packet.payload()) {
            let layout = self.client.layout();
            self.replica
                .answer(negotiation, &mut self.legs, layout, self.last_status)
                .await?;
            return Ok(Some(Phase::Idle));
        }
        if !matches!(cmd, COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID) {
            return Ok(None);
        }
        let accepted = self
            .replica
            .request_dump(packet, &mut self.legs, self.flavour, &self.shared.metrics)
            .await?;
        Ok(Some(accepted.map_or(Phase::Idle, Phase::Dumping)))
    }

    /// Whether the response to `cmd` reveals no data, so the read barrier lets it through:
    /// a replica's set-up so far, or (only the barrier asks) a ping, a reset or a plain
    /// transaction statement, whose OK carries nothing but status flags.
    fn reveals_nothing(&mut self, cmd: u8, sql: Option<&[u8]>) -> bool {
        self.setup_only = self.setup_only
            && (cmd == COM_REGISTER_SLAVE || sql.is_some_and(reveals_nothing::replica_setup));
        self.setup_only
            || (self.shared.door.reads_wait()
                && (matches!(cmd, COM_PING | COM_RESET_CONNECTION)
                    || sql.is_some_and(reveals_nothing::transaction_control)))
    }

    /// Sends the command on (as it came, renumbered under sharing, or in its place a `BEGIN`
    /// that takes its snapshot now), noting it for the tracker and the snapshot cover.
    async fn relay_command(&mut self, cmd: u8, packet: &Packet) -> Result<Sent, Error> {
        let check = self.tracker.note_command(packet.payload());
        let sql = (cmd == COM_QUERY).then(|| &packet.payload()[1..]);
        let mut reveals_nothing = self.reveals_nothing(cmd, sql);
        // Result sets must end with an OK (not a legacy EOF) for their state to be seen.
        let may_start = self.shared.door.snapshot_reads()
            && self.tracker.snapshot_ready()
            && self.client.deprecate_eof();
        match self
            .cover
            .note_command(packet.payload(), !packet.continues(), may_start)
        {
            Replacement::None => match &mut self.share {
                Some(share) if Share::renumbers(cmd) => {
                    match share.forward_statement(&mut self.legs, packet).await? {
                        Routed::Forwarded => self.forward_rest(packet).await?,
                        Routed::Answered => return Ok(Sent::Answered),
                    }
                }
                _ => self.forward_command(packet).await?,
            },
            Replacement::StartWithSnapshot => {
                // Its OK is bounded: that bound covers every read of the snapshot.
                reveals_nothing = false;
                let seq = self.legs.next_primary_seq();
                self.legs.primary().write_packet_with(seq, |buf| {
                    buf.put_u8(COM_QUERY);
                    buf.put_slice(snapshot::START_WITH_SNAPSHOT);
                });
                self.legs.flush_primary().await?;
            }
        }
        let reader = ResponseReader::for_command(packet.payload(), self.client.deprecate_eof());
        Ok(Sent::Command(reader.map(|reader| {
            Command::new(reader, reveals_nothing, check)
        })))
    }

    /// Under `[sharing]`, gives the session a connection to the primary for its command, or
    /// answers the command without one (`SELECT LAST_INSERT_ID()`, from the session's own
    /// inserts). `Some(phase)` if the command is done with: answered, or refused for want of a
    /// free connection (the session goes on).
    async fn take_connection(&mut self, cmd: u8, packet: &Packet) -> Result<Option<Phase>, Error> {
        let Some(share) = &mut self.share else {
            return Ok(None);
        };
        if cmd == COM_STMT_PREPARE
            && share
                .refuse_prepare_past_limit(&mut self.legs, packet)
                .await?
        {
            return Ok(Some(Phase::Idle));
        }
        if cmd == COM_STMT_CLOSE && !self.legs.has_backend() {
            // Its statement is prepared on connections other sessions use too: it stays.
            share.close_unattached(packet.payload());
            self.cover.note_command(packet.payload(), true, false);
            return Ok(Some(Phase::Idle));
        }
        // A session with a connection of its own (pinned) asks the primary.
        let sql = (cmd == COM_QUERY && !self.legs.has_backend()).then(|| &packet.payload()[1..]);
        if let Some((name, value)) = sql.and_then(|sql| share.last_insert_id_answer(sql)) {
            let layout = self.client.layout();
            let status = self.last_status;
            let seq = self.legs.next_client_seq();
            self.legs.client().queue(|buf| {
                resultset::put_unsigned_result(buf, seq, layout, &name, value, status)
            });
            self.legs.flush_client().await?;
            return Ok(Some(Phase::Idle));
        }
        let epoch = self.shared.door.gate().epoch_number();
        match share.take(&mut self.legs, epoch).await {
            Ok(()) => {
                share.on_command(packet.payload(), !packet.continues());
                Ok(None)
            }
            Err(error @ Error::PoolExhausted { .. }) => {
                self.legs.queue_client_error(&error);
                self.legs.flush_client().await?;
                Ok(Some(Phase::Idle))
            }
            Err(error @ Error::Retired { .. }) => {
                self.shared.metrics.sessions_retired.inc();
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// Sends the command's packets (all of them, for a payload of 16 MiB or more) to the
    /// primary.
    async fn forward_command(&mut self, first: &Packet) -> Result<(), Error> {
        self.legs.pass_to_primary(first);
        self.forward_rest(first).await
    }

    /// Sends the packets of the command that follow `first` (already queued) to the primary.
    async fn forward_rest(&mut self, first: &Packet) -> Result<(), Error> {
        let mut continues = first.continues();
        while continues {
            if !self.legs.client().has_buffered_packet() {
                self.legs.flush_primary().await?;
            }
            let packet = self.legs.read_client_packet().await?;
            self.legs.pass_to_primary(&packet);
            continues = packet.continues();
        }
        self.legs.flush_primary().await
    }

    /// Relays one response, then sets the trackers up again if the command reset them.
    async fn relay_response(&mut self, command: Command) -> Result<Phase, Error> {
        let shared = &*self.shared;
        let bounds = Bounds::new(
            shared.probe.as_deref(),
            &shared.door,
            &shared.metrics,
            self.flavour,
            self.connection_id,
        );
        let parts = SessionParts {
            legs: &mut self.legs,
            tracker: &mut self.tracker,
            cover: &mut self.cover,
            share: self.share.as_mut(),
        };
        let status = ResponseRelay::new(command, shared, parts, bounds, self.primary_tracks)
            .run()
            .await?;
        if let Some(status) = status {
            self.last_status = status;
        }
        Ok(if self.tracker.take_reset() {
            Phase::TrackingSetup
        } else {
            Phase::Idle
        })
    }

    /// Where a `COM_CHANGE_USER` request may carry a password in clear, starting with its own
    /// auth data (which goes on only where both legs are secure). A request that does not
    /// parse is the primary's to refuse.
    ///
    /// # Errors
    /// [`Error::ClearPassword`].
    fn change_user_passwords(&self, payload: &[u8]) -> Result<PasswordWatch, Error> {
        let Ok(request) = ChangeUser::parse(payload, self.client.capabilities()) else {
            return Ok(PasswordWatch::new(None, &self.scramble));
        };
        let passwords = PasswordWatch::new(request.auth_plugin, &self.scramble);
        if passwords.client_sent(request.auth_data) == FromClient::ClearPassword {
            self.legs.clear_password_may_pass()?;
        }
        Ok(passwords)
    }

    /// Re-authentication after `COM_CHANGE_USER` (already forwarded); the new user's session
    /// starts without the proxy's tracking, so it is set up again.
    async fn change_user(&mut self, mut passwords: PasswordWatch) -> Result<Phase, Error> {
        let auth = Auth {
            primary_tracks: self.primary_tracks,
            filter: self.tracker.filter(),
            key: &self.shared.password_key,
            metrics: &self.shared.metrics,
        };
        let outcome = relay_auth(&mut self.legs, auth, &mut passwords).await?;
        self.scramble = *passwords.scramble();
        if let super::login::AuthOutcome::Accepted(status) = outcome {
            self.last_status = status;
        }
        Ok(Phase::TrackingSetup)
    }
}
