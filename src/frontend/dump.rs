//! A replica's binlog dump through the proxy ("per-replica pipe"): the primary's events are
//! relayed as they come; a semisync replica gets the `EF <flag>` header on every event with
//! the ACK flag on each transaction's end, and its ACKs are read here and reported to strong
//! sync, never forwarded. An ACK that is slow to come is asked for again with a flagged
//! heartbeat (an ACK lost to a reconnect or an idle binlog must not leave commits waiting).

use std::net::SocketAddr;

use std::collections::VecDeque;

use bytes::BytesMut;
use prometheus::{Histogram, IntCounter};
use strongsync_proto::binlog::{put_heartbeat, EventSeen, StreamTracker, ROTATE_EVENT};
use strongsync_proto::command::COM_QUIT;
use strongsync_proto::packet::Packet;
use strongsync_proto::position::Position;
use strongsync_proto::semisync::{self, Ack};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::session::{Phase, Session};
use crate::durability::ReplicaHandle;
use crate::error::{Error, ReplicaError};

/// State of one dump.
struct Pipe {
    handle: ReplicaHandle,
    semisync: bool,
    tracker: StreamTracker,
    /// Sequence id of the next packet to the replica.
    seq: u8,
    /// The furthest position relayed: an ACK may not pass it.
    relayed: Option<Position>,
    /// The last transaction end sent with the ACK flag and not acknowledged yet, and when it
    /// (or the last reminder) went out.
    unacked: Option<(Position, Instant)>,
    /// An event larger than one packet, being put back together to be re-chunked with the
    /// semisync header (which moves every packet boundary by two bytes).
    large: Option<(BytesMut, EventSeen)>,
    /// Transaction ends sent with the ACK flag and when, for the ACK latency metric.
    flagged: VecDeque<(Position, Instant)>,
    ack_latency: Histogram,
    acks: IntCounter,
}

/// Flagged events remembered for the latency metric (a replica that stops acknowledging does
/// not make the proxy remember every event it sends).
const FLAGGED_KEPT: usize = 4096;

/// One thing that happened on a dump.
enum DumpEvent {
    Primary(Packet),
    Replica(Packet),
    Remind,
}

// === impl Session (dump) ===

impl Session {
    /// Relays a dump until either side ends it.
    pub(super) async fn relay_dump(
        &mut self,
        server_id: u32,
        peer: SocketAddr,
    ) -> Result<Phase, Error> {
        let handle =
            self.shared
                .durability
                .register_replica(server_id, peer, self.replica.semisync);
        handle.has_gtids(&self.replica.connect_state);
        let (ack_latency, acks) = self.shared.metrics.ack_latency_of(server_id);
        let mut pipe = Pipe {
            flagged: VecDeque::new(),
            ack_latency,
            acks,
            handle,
            semisync: self.replica.semisync,
            tracker: StreamTracker::new(),
            seq: self.client_seq.next(),
            relayed: None,
            unacked: None,
            large: None,
        };
        // A dump is not a client session in flight: shutdown does not wait for it, it ends
        // it (the hard stop) once the parked commits it may be acknowledging are done.
        self.in_flight = None;
        let hard_stop = self.shared.hard_stop.clone();
        let remind_after = self.shared.durability.config().ack_nudge_after;
        loop {
            if !self.primary.has_buffered_packet() {
                self.flush_client().await?;
                self.count_relayed_bytes();
            }
            let remind_at = pipe.remind_at(remind_after);
            let event = tokio::select! {
                biased;
                () = hard_stop.cancelled() => return Err(Error::Shutdown),
                packet = self.primary.read_packet() => match packet.map_err(Error::from_primary) {
                    Ok(packet) => DumpEvent::Primary(packet),
                    // The primary ends a dump by closing it (STOP SLAVE kills it by id).
                    Err(Error::PrimaryClosed) => return Ok(Phase::Closed),
                    Err(e) => return Err(e),
                },
                packet = self.client.read_packet() => DumpEvent::Replica(packet.map_err(Error::from_client)?),
                () = sleep_until_some(remind_at) => DumpEvent::Remind,
            };
            let go_on = match event {
                DumpEvent::Primary(packet) => pipe.on_primary_packet(self, &packet)?,
                DumpEvent::Replica(packet) => pipe.on_replica_packet(&packet)?,
                DumpEvent::Remind => {
                    pipe.remind(self);
                    true
                }
            };
            if !go_on {
                self.flush_client().await?;
                return Ok(Phase::Closed);
            }
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

// === impl Pipe ===

impl Pipe {
    /// Relays a packet from the primary; false once the dump is over (EOF or ERR).
    fn on_primary_packet(&mut self, session: &mut Session, packet: &Packet) -> Result<bool, Error> {
        if packet.is_continuation() {
            match &mut self.large {
                Some((event, _)) => {
                    event.extend_from_slice(packet.payload());
                    if !packet.continues() {
                        let (event, seen) = self.large.take().expect("checked just above");
                        self.send_event(session, &event, seen);
                    }
                }
                None => session.client.forward_as(packet, self.advance()),
            }
            return Ok(true);
        }
        let payload = packet.payload();
        if payload.first() != Some(&0x00) {
            // EOF or ERR: the end of the dump, passed on as it is.
            session.client.forward_as(packet, self.advance());
            return Ok(false);
        }
        let event = &payload[1..];
        let seen = self
            .tracker
            .on_event(event)
            .map_err(Error::PrimaryProtocol)?;
        self.note(&seen);
        if !self.semisync {
            session.client.forward_as(packet, self.advance());
        } else if packet.continues() {
            self.large = Some((BytesMut::from(event), seen));
        } else {
            self.send_event(session, event, seen);
        }
        Ok(true)
    }

    /// Keeps track of what the event tells strong sync.
    fn note(&mut self, seen: &EventSeen) {
        if let Some(end) = seen.end {
            self.relayed = self.relayed.max(Some(end));
            if seen.ends_transaction {
                self.handle.transaction_relayed(seen.gtid, end);
            } else if seen.header.kind == ROTATE_EVENT {
                self.handle.file_ended(end);
            }
        }
    }

    /// Sends a whole event to a semisync replica, flagged for ACK if it ends a transaction.
    fn send_event(&mut self, session: &mut Session, event: &[u8], seen: EventSeen) {
        let flag = match seen.end {
            Some(end) if seen.ends_transaction => {
                let now = Instant::now();
                self.unacked = Some((end, now));
                if self.flagged.len() == FLAGGED_KEPT {
                    self.flagged.pop_front();
                }
                self.flagged.push_back((end, now));
                semisync::ACK_REQUESTED
            }
            _ => semisync::NO_ACK,
        };
        self.write_event(session, flag, event);
    }

    fn write_event(&mut self, session: &mut Session, flag: u8, event: &[u8]) {
        let seq = self.seq;
        let next = session
            .client
            .queue(|buf| semisync::put_event(buf, seq, flag, event));
        // After a flagged event the replica answers with sequence id 0, so the primary's next
        // packet carries 1 (protocol.md §4.5).
        self.seq = if flag == semisync::ACK_REQUESTED {
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
        let position =
            Position::in_file(ack.file, ack.position).map_err(ReplicaError::MalformedAck)?;
        self.handle
            .acknowledged(position, self.relayed)
            .map_err(ReplicaError::Ack)?;
        if self.unacked.is_some_and(|(flagged, _)| position >= flagged) {
            self.unacked = None;
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

    /// When to ask again for an acknowledgement that is slow to come.
    fn remind_at(&self, after: std::time::Duration) -> Option<Instant> {
        self.unacked.map(|(_, since)| since + after)
    }

    /// Asks the replica again: a heartbeat at the position it has reached, flagged for ACK
    /// (it answers with everything it has). Only between events.
    fn remind(&mut self, session: &mut Session) {
        let (Some(file), Some(position), Some(checksum), Some(server_id)) = (
            self.tracker.file(),
            self.tracker.position(),
            self.tracker.checksum(),
            self.tracker.server_id(),
        ) else {
            self.unacked = None;
            return;
        };
        let Some((flagged, _)) = self.unacked else {
            return;
        };
        if self.large.is_some() {
            return;
        }
        let Ok(log_pos) = u32::try_from(position.offset) else {
            self.unacked = None;
            return;
        };
        warn!(server_id = self.handle.server_id(), %flagged, "no ACK yet: asking the replica again");
        let mut heartbeat = Vec::with_capacity(64);
        put_heartbeat(&mut heartbeat, server_id, file, log_pos, checksum);
        self.write_event(session, semisync::ACK_REQUESTED, &heartbeat);
        self.unacked = Some((flagged, Instant::now()));
    }
}
