//! A client session's two connections, the client's and its own to the primary: the floor
//! the session, sharing and the read barrier stand on.

// Holds the sequence ids of the exchange in flight as each leg sees them, the client's time
// limits, and the ways the session waits on one leg while watching the other. The login and
// the relay own them in turn; a replica's dump takes the two connections apart
// ([`Legs::into_parts`]).

mod backend;
mod own_query;

pub(crate) use backend::Backend;
use backend::Watched;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use strongsync_proto::ok;
use strongsync_proto::packet::{Packet, Sequence};
use tokio_util::sync::WaitForCancellationFutureOwned;
use tracing::{debug, warn};

use crate::config::Timeouts;
use crate::conn::{Conn, ReadDeadline};
use crate::error::{Error, PasswordRefused};
use crate::gate::{Epoch, Gate, OnEpoch};
use crate::metrics::Metrics;
use crate::primary::{self, PrimaryStream};
use crate::stream::ClientStream;

/// Unread client bytes the proxy buffers while a response is in flight (pipelined commands);
/// past this it stops reading the client until the response is done.
const CLIENT_READ_AHEAD: usize = 256 * 1024;

const NO_BACKEND: &str = "a session talks to the primary only with a connection to it";

/// A packet from one leg or the other.
pub(crate) enum Either {
    Primary(Packet),
    Client(Packet),
}

/// The client's connection and the session's connection to the primary. Only a session that
/// shares connections is ever without one: between giving it back after a response and
/// taking one for its next command (see [`super::pool`]).
pub(crate) struct Legs {
    client: Conn<ClientStream>,
    primary: Option<Backend>,
    gate: Arc<Gate>,
    /// `failover.fenced_reads`: statements may still go to a fenced primary.
    fenced_reads: bool,
    client_seq: Sequence,
    primary_seq: Sequence,
    timeouts: Timeouts,
    /// The client has sent a protocol-4.1 login, so ERR packets may carry a SQLSTATE, and it
    /// owes every packet of an exchange within `timeouts.client_read`.
    logged_in: bool,
    /// Both legs negotiated `CLIENT_DEPRECATE_EOF` (the proxy passes the client's choice on).
    deprecate_eof: bool,
}

// === impl Legs ===

impl Legs {
    pub(crate) fn new(
        client: Conn<ClientStream>,
        primary: Conn<PrimaryStream>,
        epoch: OnEpoch,
        gate: Arc<Gate>,
        fenced_reads: bool,
        timeouts: Timeouts,
    ) -> Self {
        Legs {
            client,
            primary: Some(Backend::new(primary, epoch)),
            gate,
            fenced_reads,
            client_seq: Sequence::expecting(0),
            primary_seq: Sequence::expecting(0),
            timeouts,
            logged_in: false,
            deprecate_eof: false,
        }
    }

    pub(crate) fn client(&mut self) -> &mut Conn<ClientStream> {
        &mut self.client
    }

    pub(crate) fn primary(&mut self) -> &mut Conn<PrimaryStream> {
        &mut self.backend().conn
    }

    /// The connection to the primary. Every phase that talks to the primary has one (a
    /// session that shares takes one before it dispatches a command), so a call without one
    /// is a bug in the session's phases.
    fn backend(&mut self) -> &mut Backend {
        self.split().0
    }

    fn backend_ref(&self) -> &Backend {
        self.primary.as_ref().expect(NO_BACKEND)
    }

    /// The connection to the primary and the client's, apart, for waiting on both.
    fn split(&mut self) -> (&mut Backend, &mut Conn<ClientStream>) {
        (self.primary.as_mut().expect(NO_BACKEND), &mut self.client)
    }

    /// Whether the session has a connection to the primary now.
    pub(crate) fn has_backend(&self) -> bool {
        self.primary.is_some()
    }

    /// Gives up the connection to the primary (for the pool); the session has none until it
    /// takes one with [`Legs::attach`].
    pub(crate) fn detach(&mut self) -> Option<Backend> {
        self.primary.take()
    }

    /// Takes `backend` as the connection to the primary.
    pub(crate) fn attach(&mut self, backend: Backend) {
        debug_assert!(
            self.primary.is_none(),
            "one connection to the primary at a time"
        );
        self.primary = Some(backend);
    }

    /// The primary's greeting named the connection's id.
    pub(crate) fn set_primary_id(&mut self, id: u32) {
        self.backend().id = id;
    }

    /// The client's connection, for reading what it says of itself.
    pub(crate) fn client_ref(&self) -> &Conn<ClientStream> {
        &self.client
    }

    /// The connection to the primary, for reading what it is.
    pub(crate) fn primary_ref(&self) -> &Conn<PrimaryStream> {
        &self.backend_ref().conn
    }

    /// A password in clear may go on from the client to the primary: both legs are secure
    /// (the client's TLS; the primary's TLS or Unix socket).
    ///
    /// # Errors
    /// [`Error::Password`] naming the plain leg.
    pub(crate) fn clear_password_may_pass(&self) -> Result<(), Error> {
        if !self.client.get_ref().is_tls() {
            return Err(Error::Password(PasswordRefused::FromClient));
        }
        if !self.primary_ref().get_ref().is_secure() {
            return Err(Error::Password(PasswordRefused::ToPrimary));
        }
        Ok(())
    }

    /// The client's leg is plain and the primary's secure: a client that asks for the
    /// server's key gets strongsync's, since the primary wants the password in clear.
    pub(crate) fn answers_key_requests(&self) -> bool {
        !self.client.get_ref().is_tls() && self.primary_ref().get_ref().is_secure()
    }

    /// The epoch of the connection to the primary.
    pub(crate) fn epoch(&self) -> &Arc<Epoch> {
        self.backend_ref().epoch.arc()
    }

    /// Whether a statement may go to the primary now (the gate's check, without a write).
    ///
    /// # Errors
    /// The fence's or the retired epoch's error.
    pub(crate) fn admitted(&self) -> Result<(), Error> {
        self.gate
            .admits(self.backend_ref().epoch.number(), self.fenced_reads)
            .map_err(Error::from)
    }

    /// The error for this session's epoch being over.
    fn retired_error(&self) -> Error {
        Error::Retired {
            epoch: self.backend_ref().epoch.number(),
            now: self.gate.epoch_number(),
        }
    }

    /// The client has sent its login, asking for `CLIENT_DEPRECATE_EOF` or not (see
    /// [`Legs::read_client_packet`]).
    pub(crate) fn logged_in(&mut self, deprecate_eof: bool) {
        self.logged_in = true;
        self.deprecate_eof = deprecate_eof;
    }

    /// Whether result sets end in an OK packet rather than a legacy EOF, on both legs.
    pub(crate) fn deprecate_eof(&self) -> bool {
        self.deprecate_eof
    }

    /// A new exchange (a command and its response) starts on both legs.
    pub(crate) fn new_exchange(&mut self) {
        self.client_seq = Sequence::expecting(0);
        self.primary_seq = Sequence::expecting(0);
    }

    /// A new exchange starts on the primary's leg alone: one strongsync has with the primary
    /// within the client's (a statement prepared again before the client's execute).
    pub(crate) fn new_primary_exchange(&mut self) {
        self.primary_seq = Sequence::expecting(0);
    }

    /// The primary's greeting came with sequence id `seq`: the login goes on from there on its
    /// leg, and from 0 on the client's.
    pub(crate) fn greeted(&mut self, seq: u8) {
        self.primary_seq = Sequence::expecting(seq.wrapping_add(1));
        self.client_seq = Sequence::expecting(0);
    }

    /// The sequence id of the next packet to the client.
    pub(crate) fn next_client_seq(&mut self) -> u8 {
        self.client_seq.advance()
    }

    /// The sequence id of the next packet to the primary.
    pub(crate) fn next_primary_seq(&mut self) -> u8 {
        self.primary_seq.advance()
    }

    /// Checks the sequence id of a packet from the primary.
    pub(crate) fn check_primary_seq(&mut self, packet: &Packet) -> Result<(), Error> {
        self.primary_seq
            .check(packet.seq())
            .map_err(Error::PrimaryProtocol)
    }

    /// Checks a client packet's sequence id. Under the compressed protocol the frames carry
    /// the sequence and a packet's own id follows its client's count of frames (servers do not
    /// check it there either): it is taken as it comes, and the connection numbers what goes
    /// back by its frames.
    pub(crate) fn take_client_seq(&mut self, packet: &Packet) -> Result<(), Error> {
        if self.client.is_compressed() {
            self.client_seq = Sequence::expecting(packet.seq().wrapping_add(1));
            return Ok(());
        }
        self.client_seq
            .check(packet.seq())
            .map_err(Error::ClientProtocol)
    }

    /// Passes a packet on to the primary as the next of the exchange.
    pub(crate) fn pass_to_primary(&mut self, packet: &Packet) {
        let seq = self.primary_seq.advance();
        self.backend().conn.forward_as(packet, seq);
    }

    /// Passes a packet on to the client as the next of the exchange.
    pub(crate) fn pass_to_client(&mut self, packet: &Packet) {
        let seq = self.client_seq.advance();
        self.client.forward_as(packet, seq);
    }

    /// Reads the client's next packet of the current exchange. Once the client has logged in
    /// it owes the packet, so it must arrive within `timeouts.client_read`; before, the login
    /// as a whole has `timeouts.client_handshake` instead.
    pub(crate) async fn read_client_packet(&mut self) -> Result<Packet, Error> {
        let read = if self.logged_in {
            let limit = self.timeouts.client_read;
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

    /// The client's next command, however long it idles (a command begun must be finished
    /// within `timeouts.client_read`), watching the primary connection and `shutdown`
    /// meanwhile: between commands the primary has nothing to say, so if it speaks it is
    /// closing (`KILL`, `wait_timeout`, shutdown). What it sent stays buffered for the next
    /// response, as it would on a direct connection. `shutdown` is made once per session:
    /// a new wait at every command would register and unregister with the token each time.
    pub(crate) async fn next_command(
        &mut self,
        shutdown: Pin<&mut WaitForCancellationFutureOwned>,
    ) -> Result<Packet, Error> {
        let limit = self.timeouts.client_read;
        let mut shutdown = shutdown;
        loop {
            tokio::select! {
                biased;
                () = shutdown.as_mut() => return Err(Error::Shutdown),
                event = Backend::watch(&mut self.primary) => match event {
                    Watched::Retired => return Err(self.retired_error()),
                    Watched::Filled(filled) => {
                        if filled.map_err(Error::from_primary)? == 0 {
                            return Err(Error::PrimaryClosed);
                        }
                    }
                },
                packet = self.client.read_packet_within(limit, ReadDeadline::FromFirstByte) => {
                    return packet.map_err(Error::from_client);
                }
            }
        }
    }

    /// The next packet from whichever leg speaks first (an authentication exchange, where
    /// either may).
    pub(crate) async fn next_from_either(&mut self) -> Result<Either, Error> {
        let (backend, client) = self.split();
        let packet = tokio::select! {
            () = backend.retired.as_mut() => None,
            packet = backend.conn.read_packet() => Some(Either::Primary(packet.map_err(Error::from_primary)?)),
            packet = client.read_packet() => Some(Either::Client(packet.map_err(Error::from_client)?)),
        };
        packet.ok_or_else(|| self.retired_error())
    }

    /// The next packet from the primary. A client that hangs up meanwhile ends the session
    /// (dropping the primary connection, which rolls back anything uncommitted, as a direct
    /// disconnect would); bytes it pipelines meanwhile wait in its buffer.
    pub(crate) async fn next_primary_packet(&mut self) -> Result<Packet, Error> {
        let (backend, client) = self.split();
        loop {
            tokio::select! {
                biased;
                packet = backend.conn.read_packet() => return packet.map_err(Error::from_primary),
                () = backend.retired.as_mut() => break,
                filled = client.fill(), if client.buffered_len() < CLIENT_READ_AHEAD => {
                    if filled.map_err(Error::from_client)? == 0 {
                        return Err(Error::ClientClosed);
                    }
                }
            }
        }
        Err(self.retired_error())
    }

    /// Runs `fut`, failing early if the client disconnects. A parked commit is not cut short
    /// by shutdown: it gets the shutdown's grace period like any other work in flight.
    pub(crate) async fn while_watching_client<T>(
        &mut self,
        fut: impl Future<Output = T>,
    ) -> Result<T, Error> {
        tokio::pin!(fut);
        loop {
            tokio::select! {
                biased;
                out = &mut fut => return Ok(out),
                filled = self.client.fill(), if self.client.buffered_len() < CLIENT_READ_AHEAD => {
                    if filled.map_err(Error::from_client)? == 0 {
                        return Err(Error::ClientClosed);
                    }
                }
            }
        }
    }

    /// Writes what is queued for the primary, if its epoch is in force and (unless
    /// `failover.fenced_reads`) not fenced: the fence waits for the write.
    pub(crate) async fn flush_primary(&mut self) -> Result<(), Error> {
        let backend = self.primary.as_mut().expect(NO_BACKEND);
        let _pass = self.gate.pass(backend.epoch.number(), self.fenced_reads)?;
        backend.conn.flush().await.map_err(Error::PrimaryIo)
    }

    /// Writes what is queued for the client. While the client does not read, nothing more is
    /// read from the primary either (the session is here, not reading), so a client that stops
    /// reading holds at most what is queued; after `timeouts.client_write` without progress
    /// the session ends.
    pub(crate) async fn flush_client(&mut self) -> Result<(), Error> {
        let limit = self.timeouts.client_write;
        self.client
            .flush_within(limit)
            .await
            .map_err(Error::from_client)
    }

    /// Queues the ERR packet that tells the client about `error`, as the next packet of the
    /// exchange, if it has one. The SQLSTATE marker is only understood once the client has
    /// logged in with protocol 4.1.
    /// Queues the primary's OK for the client, with the tracker data `filter` does not let
    /// through removed (the packet as it came when there is none).
    pub(crate) fn forward_ok(
        &mut self,
        packet: &Packet,
        ok: &ok::OkPacket<'_>,
        seq: u8,
        filter: ok::TrackingFilter,
    ) {
        if ok.needs_filtering(filter) {
            self.client
                .write_packet_with(seq, |buf| ok.write_filtered(filter, buf));
        } else {
            self.client.forward_as(packet, seq);
        }
    }

    pub(crate) fn queue_client_error(&mut self, error: &Error) {
        let seq = self.client_seq.advance();
        queue_client_error(&mut self.client, seq, self.logged_in, error);
    }

    /// Adds what was written on both legs to the relayed-bytes counters.
    pub(crate) fn count_relayed_bytes(&mut self, metrics: &Metrics) {
        metrics
            .relayed_to_primary
            .inc_by(self.primary.as_mut().map_or(0, |b| b.conn.take_written()));
        metrics.relayed_to_client.inc_by(self.client.take_written());
    }

    /// Ends the session: logs why (`error`, if it ended on one) and tells the client, if there
    /// is anything to tell, then closes both connections.
    pub(crate) async fn close(mut self, error: Option<Error>, peer: SocketAddr, metrics: &Metrics) {
        if let Some(error) = &error {
            if let Some(kind) = error.malformed_kind() {
                metrics.malformed(kind);
            }
            if let Error::Password(why) = error {
                metrics
                    .passwords_refused
                    .with_label_values(&[why.label()])
                    .inc();
            }
            if error.is_routine() {
                debug!(%error, "session ended");
            } else {
                warn!(%error, client = %peer, side = ?error.side(), "closing client connection");
            }
            self.queue_client_error(error);
        }
        // A client that stopped reading would stall the goodbye as well: it gets none, and
        // any other client gets no longer than a write may take.
        if !matches!(error, Some(Error::ClientWriteTimeout(_))) {
            let limit = self.timeouts.client_write;
            let _ = tokio::time::timeout(limit, self.client.shutdown()).await;
        }
        self.close_primary().await;
        self.count_relayed_bytes(metrics);
    }

    /// Closes the connection to the primary: cleanly if it may still be written to, else
    /// (fenced, or its epoch over) at once, with nothing queued sent and a reset, so that no
    /// byte of it reaches the old primary after the fence or the follow.
    async fn close_primary(&mut self) {
        if let Some(backend) = &mut self.primary {
            backend.close(&self.gate, self.fenced_reads).await;
        }
    }

    /// The session's epoch is over: the connection to the retired primary is closed now
    /// (reset, nothing queued sent); the client's is kept, for the error its next command
    /// gets, with the sequence id the exchange would go on with.
    pub(crate) fn retire(mut self) -> (Conn<ClientStream>, Error) {
        let error = self.retired_error();
        if let Some(backend) = &mut self.primary {
            primary::reset_on_close(&mut backend.conn);
        }
        (self.client, error)
    }

    /// The two connections, for a replica's dump: the client's with the sequence id of the
    /// next packet to it, and the connection to the primary.
    pub(crate) fn into_parts(self) -> (Conn<ClientStream>, u8, Backend) {
        let Legs {
            client,
            primary,
            mut client_seq,
            ..
        } = self;
        let seq = client_seq.advance();
        let backend = primary.expect(NO_BACKEND);
        (client, seq, backend)
    }
}

/// Queues the ERR packet that tells the client about `error`, if it has one. The SQLSTATE
/// marker is only understood once the client has logged in with protocol 4.1; before the
/// greeting nothing has been negotiated.
pub(crate) fn queue_client_error(
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
