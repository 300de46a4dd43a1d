//! A replica pipe: what a client session becomes once the primary has accepted its binlog dump.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::BytesMut;
use prometheus::{Histogram, IntCounter};
use strongsync_proto::binlog::{
    put_heartbeat, starts_transaction, EventSeen, StreamTracker, HEARTBEAT_EVENT,
    HEARTBEAT_V2_EVENT, MYSQL_ANONYMOUS_GTID_EVENT, ROTATE_EVENT,
};
use strongsync_proto::command::COM_QUIT;
use strongsync_proto::gtid::Gtid;
use strongsync_proto::packet::Packet;
use strongsync_proto::position::Position;
use strongsync_proto::semisync::{self, Ack};
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tracing::{debug, info, warn};

use super::held_back::HeldBack;
use super::{AcceptedDump, DumpLegs, PipeContext};
use crate::conn::Conn;
use crate::deadline;
use crate::durability::{ReplicaHandle, StreamCoverage};
use crate::error::{Error, ReplicaError};
use crate::gate::OnEpoch;
use crate::primary::{self, PrimaryStream};
use crate::stream::ClientStream;

/// Flagged events remembered for the latency metric (a replica that stops ACKing does
/// not make the proxy remember every event it sends).
const FLAGGED_KEPT: usize = 4096;

/// One replica's dump.
///
/// It owns the replica's connection and the dump's connection to the primary, and nothing of a
/// client session. The primary's events are relayed as they come; a semisync replica gets the `EF
/// <flag>` header on every event with the ACK flag where an ACK is wanted (below), and its ACKs are
/// read here and reported to strong sync, never forwarded. What the stream shows the replica holds
/// (see [`StreamCoverage`]) is reported too. An ACK that is slow to come is asked for again with a
/// flagged heartbeat.
///
/// One ACK per batch, not per transaction: ACKs are cumulative (a replica ACKs a position,
/// and with it everything before), so of the transaction ends relayed in one batch (what the
/// primary had sent when its buffer ran dry) only the last asks for one. A batch whose last
/// transaction end is followed by other events (a rotate, the start of the next transaction) asks
/// with a flagged heartbeat at the position the stream reached: a MariaDB replica takes a heartbeat
/// between any two events (it checks only that the position is not behind its own, and does not
/// count it in an event group), so a large transaction still streaming does not hold back the ACK
/// of the one before it.
///
/// A replica without semisync gets the events as the primary sent them, once the quorum holds them
/// under `async_replicas = "after_quorum"` (see [`HeldBack`]).
pub(crate) struct ReplicaPipe {
    cx: PipeContext,
    replica: Conn<ClientStream>,
    primary: Conn<PrimaryStream>,
    /// The epoch of the dump: once it is fenced (or over) nothing more is written.
    epoch: OnEpoch,
    /// Resolves once the epoch is fenced or over (made once, polled at every turn and during
    /// every write to the replica).
    fenced: Pin<Box<WaitForCancellationFutureOwned>>,
    handle: ReplicaHandle,
    peer: SocketAddr,
    semisync: bool,
    tracker: StreamTracker,
    coverage: StreamCoverage,
    /// Sequence id of the next packet to the replica.
    seq: u8,
    /// The furthest position relayed: an ACK may not pass it.
    relayed: Option<Position>,
    /// The last transaction end sent with the ACK flag and not ACKed yet, and when it
    /// (or the last reminder) went out.
    unacked: Option<(Position, Instant)>,
    /// A transaction end sent without the ACK flag because more of the stream had already
    /// come: a later flagged event of the batch asks for the ACK that covers it.
    owed: Option<Position>,
    /// An event larger than one packet, being put back together to be re-chunked with the
    /// semisync header (which moves every packet boundary by two bytes).
    large: Option<(BytesMut, EventSeen)>,
    /// Transaction ends sent with the ACK flag and when, for the ACK latency metric.
    flagged: VecDeque<(Position, Instant)>,
    /// Transaction ends read since strong sync was last told, and how far the stream has
    /// shown the replica holds everything: reported under one lock before the events go out.
    ends: Vec<(Option<Gtid>, Position)>,
    covered: Option<Position>,
    ack_latency: Histogram,
    acks: IntCounter,
    /// A replica without semisync: what is held back until the quorum holds it, and the
    /// quorum position as it moves.
    held: HeldBack,
    quorum: tokio::sync::watch::Receiver<Option<Position>>,
}

/// One thing that happened on a dump.
enum DumpEvent {
    Primary(Packet),
    Replica(Packet),
    Remind,
    /// The quorum position moved (or the settings changed).
    Quorum,
}

// === impl ReplicaPipe ===

impl ReplicaPipe {
    /// Takes over a session's connections for the dump the primary accepted: the replica is
    /// admitted to strong sync now, holding what the primary was told it has — unless the
    /// dump's epoch was fenced or is over meanwhile: then both connections close (the replica
    /// asks again, and is let in once strongsync follows a primary).
    pub(crate) fn admit(
        cx: PipeContext,
        legs: DumpLegs,
        dump: AcceptedDump,
        peer: SocketAddr,
    ) -> Option<(Self, Packet)> {
        let DumpLegs {
            replica: mut client,
            seq,
            mut primary,
            epoch,
        } = legs;
        let AcceptedDump {
            server_id,
            semisync,
            connect_state,
            first,
        } = dump;
        let handle = match cx.durability.admit(
            epoch.number(),
            server_id,
            peer,
            semisync,
            connect_state,
        ) {
            Ok(handle) => handle,
            Err(refused) => {
                info!(server_id, %refused, "replica dump not relayed: its epoch is fenced or over");
                client.discard_pending();
                primary::reset_on_close(&mut primary);
                return None;
            }
        };
        if client.is_compressed() {
            handle.compressed();
        }
        let (ack_latency, acks) = cx.metrics.ack_latency_of(server_id);
        let held = HeldBack::new(cx.metrics.async_held_bytes.clone());
        let quorum = cx.durability.watch_quorum();
        let pipe = ReplicaPipe {
            cx,
            replica: client,
            primary,
            fenced: Box::pin(epoch.fenced()),
            epoch,
            handle,
            peer,
            semisync,
            tracker: StreamTracker::new(),
            coverage: StreamCoverage::new(),
            seq,
            relayed: None,
            unacked: None,
            owed: None,
            large: None,
            flagged: VecDeque::new(),
            ends: Vec::new(),
            covered: None,
            ack_latency,
            acks,
            held,
            quorum,
        };
        Some((pipe, first))
    }

    /// Relays the dump, starting with its first packet, until either side ends it; then
    /// closes both connections (the replica leaves strong sync when the pipe is dropped).
    pub(crate) async fn run(mut self, first: Packet) {
        let result = self.relay(first).await;
        if let Err(error) = &result {
            if let Some(kind) = error.malformed_kind() {
                self.cx.metrics.malformed(kind);
            }
            if error.is_routine() {
                debug!(%error, server_id = self.handle.server_id(), "replica dump ended");
            } else {
                warn!(%error, replica = %self.peer, server_id = self.handle.server_id(), side = ?error.side(), "closing replica connection");
            }
        }
        let limit = self.cx.write_timeout;
        if matches!(result, Err(Error::Fenced { .. } | Error::NotLeading { .. })) {
            // What is queued came from the fenced primary: it goes nowhere. The replica
            // reconnects by itself and is let in once strongsync follows a new primary.
            self.replica.abandon().await;
            primary::reset_on_close(&mut self.primary);
        } else {
            let _ = tokio::time::timeout(limit, self.replica.shutdown()).await;
            self.primary.shutdown().await;
        }
        self.count_relayed_bytes();
    }

    async fn relay(&mut self, first: Packet) -> Result<(), Error> {
        if !self.on_primary_packet(&first)? {
            return self.flush_replica().await;
        }
        let hard_stop = self.cx.hard_stop.clone();
        let mut hard_stop = std::pin::pin!(hard_stop.cancelled());
        let limit = self.cx.max_held_bytes;
        loop {
            // What either side sent that is already read is taken at once, with no `select!`
            // per event: a burst of commits is one pass, and one write to the replica.
            // Nothing is written before `flush_replica`, which checks the gate.
            if !self.drain_buffered(limit)? {
                return self.flush_replica().await;
            }
            // Past the limit the dump is not read: the replica falls behind.
            let full = self.held.bytes() >= limit;
            self.release_held();
            self.ask_for_owed_ack();
            self.flush_replica().await?;
            self.count_relayed_bytes();
            let holding = !self.held.is_empty();
            // Read while an ACK is owed, at every turn: the setting is live.
            let remind_at = self
                .unacked
                .map(|(_, since)| since + self.cx.durability.ack_nudge_after());
            let event = tokio::select! {
                biased;
                () = hard_stop.as_mut() => return Err(Error::Shutdown),
                () = self.fenced.as_mut() => return Err(self.fenced_error()),
                packet = self.primary.read_packet(), if !full => match packet.map_err(Error::from_primary) {
                    Ok(packet) => DumpEvent::Primary(packet),
                    // The primary ends a dump by closing it (STOP SLAVE kills it by id).
                    Err(Error::PrimaryClosed) => return Ok(()),
                    Err(e) => return Err(e),
                },
                packet = self.replica.read_packet() => DumpEvent::Replica(packet.map_err(Error::from_client)?),
                () = deadline::sleep_until(remind_at) => DumpEvent::Remind,
                // The sender lives as long as strong sync: an error is the proxy going away.
                changed = self.quorum.changed(), if holding => match changed {
                    Ok(()) => DumpEvent::Quorum,
                    Err(_) => return Err(Error::Shutdown),
                },
            };
            let go_on = match event {
                DumpEvent::Primary(packet) => self.on_primary_packet(&packet)?,
                DumpEvent::Replica(packet) => self.on_replica_packet(&packet)?,
                DumpEvent::Remind => {
                    self.remind();
                    true
                }
                DumpEvent::Quorum => {
                    self.release_held();
                    true
                }
            };
            if !go_on {
                return self.flush_replica().await;
            }
        }
    }

    /// Takes every whole packet already read from the primary (while fewer than `limit`
    /// bytes are held back) and from the replica; false once the dump is over.
    fn drain_buffered(&mut self, limit: usize) -> Result<bool, Error> {
        while self.held.bytes() < limit {
            let Some(packet) = self
                .primary
                .buffered_packet()
                .map_err(Error::from_primary)?
            else {
                break;
            };
            if !self.on_primary_packet(&packet)? {
                return Ok(false);
            }
        }
        while let Some(packet) = self.replica.buffered_packet().map_err(Error::from_client)? {
            if !self.on_replica_packet(&packet)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Relays a packet from the primary; false once the dump is over (EOF or ERR).
    fn on_primary_packet(&mut self, packet: &Packet) -> Result<bool, Error> {
        if packet.is_continuation() {
            match &mut self.large {
                Some((event, _)) => {
                    event.extend_from_slice(packet.payload());
                    if !packet.continues() {
                        let (event, seen) = self.large.take().expect("checked just above");
                        self.send_event(&event, seen);
                    }
                }
                None => {
                    let gate = self.held.gate(None);
                    self.send_async(packet, gate);
                }
            }
            return Ok(true);
        }
        let payload = packet.payload();
        if payload.first() != Some(&0x00) {
            // EOF or ERR: the end of the dump, passed on as it is — unless events are held
            // back before it: the replica is then closed on, and asks again.
            if self.held.is_empty() {
                let seq = self.advance();
                self.replica.forward_as(packet, seq);
            }
            return Ok(false);
        }
        let event = &payload[1..];
        let seen = self
            .tracker
            .on_event(event)
            .map_err(Error::PrimaryProtocol)?;
        self.note(&seen);
        if !self.semisync {
            let gate = self.held.gate(self.reached_by(&seen));
            self.send_async(packet, gate);
        } else if packet.continues() {
            self.large = Some((BytesMut::from(event), seen));
        } else {
            self.send_event(event, seen);
        }
        Ok(true)
    }

    /// Keeps track of what the event tells strong sync.
    fn note(&mut self, seen: &EventSeen) {
        if seen.header.kind == MYSQL_ANONYMOUS_GTID_EVENT && !self.cx.durability.commits_untracked()
        {
            // The primary commits without GTIDs (gtid_mode turned off at run time): until a
            // check of the primary finds it on again, every response is bounded.
            self.cx.durability.untracked_commits(Some(
                "a transaction without a GTID was relayed (gtid_mode is not ON on the primary)"
                    .into(),
            ));
        }
        let covered = match seen.end {
            Some(end) => {
                self.relayed = self.relayed.max(Some(end));
                if seen.ends_transaction {
                    self.ends.push((seen.gtid, end));
                    self.coverage.transaction_ended(end)
                } else if starts_transaction(seen.header.kind) {
                    let start = Position {
                        offset: end.offset.saturating_sub(u64::from(seen.header.event_size)),
                        ..end
                    };
                    self.coverage.transaction_started(start)
                } else {
                    if seen.header.kind == ROTATE_EVENT {
                        // The book of binlog files follows the transactions in order.
                        self.report_relayed();
                        self.handle.file_ended(end);
                    }
                    self.coverage.read_through(end)
                }
            }
            // A heartbeat says how far the primary has read the binlog for this replica.
            None => self
                .reached_by(seen)
                .and_then(|at| self.coverage.read_through(at)),
        };
        if let Some(covered) = covered.filter(|_| self.semisync) {
            self.covered = self.covered.max(Some(covered));
        }
    }

    /// The binlog position the stream reaches with an event, if it says: its end, or for a
    /// heartbeat the position it carries.
    fn reached_by(&self, seen: &EventSeen) -> Option<Position> {
        match seen.end {
            Some(end) => Some(end),
            // MySQL's second heartbeat (8.0.26 on) carries it in its header too.
            None if matches!(seen.header.kind, HEARTBEAT_EVENT | HEARTBEAT_V2_EVENT)
                && seen.header.log_pos != 0 =>
            {
                self.tracker.position().map(|at| Position {
                    offset: u64::from(seen.header.log_pos),
                    ..at
                })
            }
            None => None,
        }
    }

    /// Sends a packet to a replica without semisync, or holds it back until the quorum holds
    /// what it brings the replica to (`gate`).
    fn send_async(&mut self, packet: &Packet, gate: Option<Position>) {
        if self.cx.durability.async_held_back() {
            let quorum = *self.quorum.borrow();
            if !self.held.may_pass(gate, quorum) {
                self.held.hold(gate, packet.clone());
                return;
            }
        } else {
            self.release_held();
        }
        let seq = self.advance();
        self.replica.forward_as(packet, seq);
    }

    /// Sends what the quorum now holds of what was held back (everything, once the settings
    /// no longer hold async replicas back).
    fn release_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let all = !self.cx.durability.async_held_back();
        let quorum = *self.quorum.borrow_and_update();
        while let Some(packet) = self.held.release(quorum, all) {
            let seq = self.advance();
            self.replica.forward_as(&packet, seq);
        }
    }

    /// Tells strong sync what was relayed since it was last told (one lock for the batch).
    fn report_relayed(&mut self) {
        if self.ends.is_empty() && self.covered.is_none() {
            return;
        }
        self.handle.relayed(&self.ends, self.covered.take());
        self.ends.clear();
    }

    /// Sends a whole event to a semisync replica, flagged for ACK if it ends a transaction and
    /// nothing more of the stream has come yet.
    fn send_event(&mut self, event: &[u8], seen: EventSeen) {
        let flag = match seen.end {
            Some(end) if seen.ends_transaction => {
                if self.primary.has_buffered_packet() {
                    self.owed = Some(end);
                    semisync::NO_ACK
                } else {
                    self.owed = None;
                    self.flagged_for(end);
                    semisync::ACK_REQUESTED
                }
            }
            _ => semisync::NO_ACK,
        };
        self.write_event(flag, event);
    }

    /// An event asking for the ACK of everything through `end` is going out.
    fn flagged_for(&mut self, end: Position) {
        let now = Instant::now();
        self.unacked = Some((end, now));
        if self.flagged.len() == FLAGGED_KEPT {
            self.flagged.pop_front();
        }
        self.flagged.push_back((end, now));
    }

    /// The batch is over and its last transaction end went out unflagged (events that end no
    /// transaction followed it): a flagged heartbeat asks for the ACK. In the middle of an event
    /// larger than a packet none can go out: the reminder asks once it can.
    fn ask_for_owed_ack(&mut self) {
        let Some(owed) = self.owed else { return };
        if self.heartbeat_for_ack() {
            self.owed = None;
            self.flagged_for(owed);
        } else if self.unacked.is_none() {
            self.unacked = Some((owed, Instant::now()));
        }
    }

    fn write_event(&mut self, flag: u8, event: &[u8]) {
        let seq = self.seq;
        let next = self
            .replica
            .queue(|buf| semisync::put_event(buf, seq, flag, event));
        // After a flagged event the replica answers with sequence id 0, so the primary's next
        // packet carries 1 (protocol.md §4.5); compressed, its frames count again the same way.
        self.seq = if flag == semisync::ACK_REQUESTED {
            self.replica.restart_frame_seq(1);
            1
        } else {
            next
        };
    }

    fn advance(&mut self) -> u8 {
        let seq = self.seq;
        self.seq = seq.wrapping_add(1);
        seq
    }

    /// Takes a packet from the replica: an ACK (semisync), or its goodbye; false once it left.
    fn on_replica_packet(&mut self, packet: &Packet) -> Result<bool, Error> {
        let payload = packet.payload();
        if payload == [COM_QUIT] {
            return Ok(false);
        }
        if !self.semisync {
            return Err(ReplicaError::Unexpected {
                first: payload.first().copied().unwrap_or(0),
            }
            .into());
        }
        let ack = Ack::parse(payload).map_err(ReplicaError::MalformedAck)?;
        self.report_relayed();
        let position =
            Position::in_file(ack.file, ack.position).map_err(ReplicaError::MalformedAck)?;
        let covered = self.coverage.acked(position);
        self.handle
            .acked(position, self.relayed, covered)
            .map_err(ReplicaError::Ack)?;
        if self.unacked.is_some_and(|(flagged, _)| position >= flagged) {
            self.unacked = None;
        }
        if self.owed.is_some_and(|owed| position >= owed) {
            self.owed = None;
        }
        self.acks.inc();
        while let Some(&(flagged, sent)) = self.flagged.front() {
            if flagged > position {
                break;
            }
            self.ack_latency.observe(sent.elapsed().as_secs_f64());
            self.flagged.pop_front();
        }
        debug!(server_id = self.handle.server_id(), %position, "ack");
        Ok(true)
    }

    /// Asks the replica again: a heartbeat at the position it has reached, flagged for ACK
    /// (it answers with everything it has). Only between events.
    fn remind(&mut self) {
        let Some((flagged, _)) = self.unacked else {
            return;
        };
        if self.large.is_some() {
            return;
        }
        if self.heartbeat_for_ack() {
            debug!(server_id = self.handle.server_id(), %flagged, "no ACK yet: asking the replica again");
            self.unacked = Some((flagged, Instant::now()));
        } else {
            self.unacked = None;
        }
    }

    /// Queues a heartbeat at the position the stream has reached, flagged for ACK; false if
    /// the stream has not said enough yet to write one (or is in the middle of an event).
    fn heartbeat_for_ack(&mut self) -> bool {
        let (Some(file), Some(position), Some(checksum), Some(server_id)) = (
            self.tracker.file(),
            self.tracker.position(),
            self.tracker.checksum(),
            self.tracker.server_id(),
        ) else {
            return false;
        };
        let Ok(log_pos) = u32::try_from(position.offset) else {
            return false;
        };
        if self.large.is_some() {
            return false;
        }
        let mut heartbeat = Vec::with_capacity(64);
        put_heartbeat(&mut heartbeat, server_id, file, log_pos, checksum);
        self.write_event(semisync::ACK_REQUESTED, &heartbeat);
        true
    }

    /// Writes what is queued for the replica, within `timeouts.client_write` (a replica that
    /// reads nothing is disconnected, as any client would be).
    async fn flush_replica(&mut self) -> Result<(), Error> {
        // Before the replica can see (and ACK) an event, strong sync knows of it.
        self.report_relayed();
        let limit = self.cx.write_timeout;
        // The one way out to the replica: nothing passes once the epoch is fenced or over, or
        // the cluster's lease lapsed, not even the rest of a large write under way (the gate
        // of every write to the primary, checked before every write).
        let gate = &self.cx.gate;
        let number = self.epoch.number();
        let open = || gate.admits(number, false).is_ok();
        let flushed = self
            .replica
            .flush_within_while(limit, open, self.fenced.as_mut())
            .await
            .map_err(Error::from_client)?;
        if flushed {
            Ok(())
        } else {
            Err(self.fenced_error())
        }
    }

    fn fenced_error(&self) -> Error {
        if self.cx.gate.lease().may_act() {
            Error::Fenced {
                epoch: self.epoch.number(),
            }
        } else {
            Error::NotLeading { leader: None }
        }
    }

    fn count_relayed_bytes(&mut self) {
        let m = &self.cx.metrics;
        m.relayed_to_primary.inc_by(self.primary.take_written());
        m.relayed_to_client.inc_by(self.replica.take_written());
    }
}
