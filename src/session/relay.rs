//! Relaying one command's response packet by packet, holding what reports a commit until
//! strong sync lets it go.

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::ok::{self, EofPacket, OkPacket};
use strongsync_proto::packet::Packet;
use strongsync_proto::response::{PacketKind, ResponseReader};
use strongsync_proto::stmt::PrepareOk;

use super::commits::{Mark, ResponseCommits};
use super::Shared;
use crate::barrier::{Bounds, SnapshotCover};
use crate::commit::{Cause, Unresolved};
use crate::durability::Release;
use crate::error::Error;
use crate::flavour::{CheckReason, Tracker, Unlearnt};
use crate::legs::Legs;
use crate::sharing::Share;

// Tracker data is filtered, commits are reported to strong sync before the packets that
// announce them are released (or replaced by an error if it says so), responses that may hide
// a commit are held until the session is checked, and the read barrier and `LOAD DATA LOCAL
// INFILE` uploads are served here.

/// Queued response bytes that trigger a write to the client even if more packets are
/// already buffered from the primary.
pub(super) const FLUSH_AT: usize = 64 * 1024;

/// Under the read barrier, response bytes gathered before a part of an unfinished response is
/// bounded and released (at most `limits.max_held_response_bytes`): a large result set streams
/// in parts of this size, one probe reading each.
const READ_HOLD_CHUNK: usize = 1024 * 1024;

/// A command whose response is to be relayed.
#[derive(Debug)]
pub(super) struct Command {
    reader: ResponseReader,
    /// The response reveals no data, so the read barrier lets it through: the answer to a
    /// replica's setup statement, a plain `BEGIN`, `COMMIT` or `ROLLBACK`, `COM_PING`,
    /// `COM_RESET_CONNECTION`.
    reveals_nothing: bool,
    /// The response is checked whatever it says (the statement names `@strongsync_quorum`).
    check: Option<CheckReason>,
}

/// The parts of a session a response's relay works on.
pub(super) struct SessionParts<'s> {
    pub legs: &'s mut Legs,
    pub tracker: &'s mut Tracker,
    pub cover: &'s mut SnapshotCover,
    pub share: Option<&'s mut Share>,
}

/// The relay of one response, with the parts of the session it works on.
pub(super) struct ResponseRelay<'s> {
    shared: &'s Shared,
    legs: &'s mut Legs,
    tracker: &'s mut Tracker,
    cover: &'s mut SnapshotCover,
    bounds: Bounds<'s>,
    connection_id: u32,
    /// The epoch of the connection the response comes on (the session may give it back
    /// before the response's commits are released).
    epoch: u64,
    /// The primary leg negotiated session tracking (its OKs may carry a state block).
    primary_tracks: bool,
    reader: ResponseReader,
    commits: ResponseCommits,
    /// Status flags of the last OK or EOF relayed.
    status: Option<StatusFlags>,
    /// The session's part in `[sharing]`: its pins follow the response, and its connection
    /// goes back to the pool before a commit waits, if nothing pins it.
    share: Option<&'s mut Share>,
}

// === impl Command ===

impl Command {
    pub(super) fn new(
        reader: ResponseReader,
        reveals_nothing: bool,
        check: Option<CheckReason>,
    ) -> Self {
        Command {
            reader,
            reveals_nothing,
            check,
        }
    }
}

// === impl ResponseRelay ===

impl<'s> ResponseRelay<'s> {
    /// The relay of the response to `command`, with the session's parts it works on.
    pub(super) fn new(
        command: Command,
        shared: &'s Shared,
        parts: SessionParts<'s>,
        bounds: Bounds<'s>,
        primary_tracks: bool,
    ) -> Self {
        let SessionParts {
            legs,
            tracker,
            cover,
            share,
        } = parts;
        let barrier = shared.door.reads_wait() && !command.reveals_nothing;
        let mut commits = ResponseCommits::new(barrier, cover.for_response());
        if let Some(reason) = command.check {
            commits.need_check(reason);
        }
        ResponseRelay {
            connection_id: bounds.connection_id(),
            epoch: legs.epoch().number(),
            shared,
            legs,
            tracker,
            cover,
            bounds,
            primary_tracks,
            reader: command.reader,
            commits,
            status: None,
            share,
        }
    }

    /// Relays the response. Packets go to the client in batches (whatever the primary has sent
    /// so far); a batch that reports a commit is held until the commit hook lets it go, and
    /// from a packet that may hide one everything is held until the session has been checked.
    /// Returns the status flags of the last OK or EOF, if one came.
    pub(super) async fn run(mut self) -> Result<Option<StatusFlags>, Error> {
        let check_every = self.tracker.checks_every_response();
        loop {
            let reader = &mut self.reader;
            if reader.awaits_client() {
                self.answer_infile_request().await?;
                self.reader.infile_sent();
                continue;
            }
            if !self.legs.primary().has_buffered_packet()
                || self.legs.client().pending_write() >= FLUSH_AT
            {
                self.release(false).await?;
            }
            let packet = self.legs.next_primary_packet().await?;
            self.legs.check_primary_seq(&packet)?;
            let step = self
                .reader
                .on_packet(&packet)
                .map_err(Error::PrimaryProtocol)?;
            let offset = self.legs.client().pending_write();
            let mark = Mark::new(offset, self.legs.next_client_seq());
            self.commits.queued(mark);
            self.relay_packet(&packet, step.kind, mark.seq(), check_every)?;
            self.commits.hold_if_news();
            if step.done {
                break;
            }
        }
        self.finish().await?;
        Ok(self.status)
    }

    /// Passes one packet of the response on, taking in what it says (`kind`, as the reader
    /// found it): commits, the session's state, a prepared statement's id.
    fn relay_packet(
        &mut self,
        packet: &Packet,
        kind: PacketKind,
        seq: u8,
        check_every: Option<CheckReason>,
    ) -> Result<(), Error> {
        match kind {
            PacketKind::Ok | PacketKind::OkTerminator => {
                self.relay_ok(packet, seq)?;
                if let Some(reason) = check_every {
                    self.commits.need_check(reason);
                }
            }
            PacketKind::Eof => {
                // A legacy EOF carries the state-changed flag but never the state itself.
                let eof = EofPacket::parse(packet.payload()).map_err(Error::PrimaryProtocol)?;
                let status = eof.status;
                if status.contains(StatusFlags::SERVER_SESSION_STATE_CHANGED) {
                    self.commits.need_check(CheckReason::LegacyEof);
                }
                if let Some(reason) = check_every {
                    self.commits.need_check(reason);
                }
                self.status = Some(status);
                if let Some(share) = &mut self.share {
                    share.on_eof(status, eof.warnings);
                }
                self.forward_to_client(packet, seq);
            }
            PacketKind::Err => {
                if let Some(share) = &mut self.share {
                    share.on_err();
                }
                // An error may have ended the transaction (a deadlock, a row changed
                // since the snapshot) and never carries its state.
                self.commits.leave_snapshot();
                self.forward_to_client(packet, seq);
            }
            PacketKind::PrepareOk => self.relay_prepare_ok(packet, seq)?,
            _ => self.forward_to_client(packet, seq),
        }
        Ok(())
    }

    /// The response is read whole: it is checked if it must be, sharing's surplus statements
    /// are closed, the connection goes back to the pool where it may, and what is left is
    /// released.
    async fn finish(&mut self) -> Result<(), Error> {
        if let Some(reason) = self.commits.take_check() {
            self.check(reason).await?;
            self.commits.hold_if_news();
        }
        if let Some(share) = &mut self.share {
            share.close_surplus(self.legs).await?;
        }
        debug_assert!(
            !self.commits.holding(),
            "a finished response is never held back"
        );
        // The response is read whole: a commit waits for its quorum without a connection, if
        // the session may give it back (a reset's trackers are set up on it first).
        if let Some(share) = &mut self.share {
            if !self.tracker.reset_pending() {
                share.give_back(self.legs).await;
            }
        }
        self.release(true).await?;
        self.cover.after_response(
            self.commits.snapshot_taken(),
            self.commits.leaves_snapshot(),
        );
        Ok(())
    }

    /// Passes an OK to the client with the tracker data it did not ask for removed, noting any
    /// commit it reports and anything else it says changed.
    fn relay_ok(&mut self, packet: &Packet, seq: u8) -> Result<(), Error> {
        let ok = OkPacket::parse(packet.payload(), self.primary_tracks)
            .map_err(Error::PrimaryProtocol)?;
        self.status = Some(ok.status);
        if let Some(share) = &mut self.share {
            share.on_ok(&ok);
        }
        self.commits.transaction_reported(&ok);
        let news = self.tracker.on_ok(&ok);
        for gtid in news.committed {
            self.commits.reported(gtid);
        }
        if let Some(reason) = news.check {
            self.commits.need_check(reason);
        }
        if !self.commits.discarded() {
            self.legs
                .forward_ok(packet, &ok, seq, self.tracker.filter());
        }
        Ok(())
    }

    /// Passes a `PREPARE_OK` to the client, with the id the session gives the statement if
    /// it shares connections (the connection's own id otherwise).
    fn relay_prepare_ok(&mut self, packet: &Packet, seq: u8) -> Result<(), Error> {
        let ok = PrepareOk::parse(packet.payload()).map_err(Error::PrimaryProtocol)?;
        let id = match &mut self.share {
            Some(share) => share.prepared(ok),
            None => ok.id,
        };
        self.cover.prepared(id);
        if id == ok.id {
            self.forward_to_client(packet, seq);
        } else if !self.commits.discarded() {
            self.legs
                .client()
                .forward_patched(packet, seq, 1, &id.to_le_bytes());
        }
        Ok(())
    }

    fn forward_to_client(&mut self, packet: &Packet, seq: u8) {
        if !self.commits.discarded() {
            self.legs.client().forward_as(packet, seq);
        }
    }

    /// Checks the session after a response that may have changed its tracking or committed
    /// unreported: what it learns is waited for; what it cannot learn is bounded, or released
    /// as unresolved.
    async fn check(&mut self, reason: CheckReason) -> Result<(), Error> {
        let checked = self.tracker.check(reason, &mut *self.legs).await?;
        self.shared.take_in_quorum(self.tracker);
        if let Some(gtid) = checked.committed {
            self.commits.reported(gtid);
        }
        match checked.unlearnt {
            None => Ok(()),
            Some(Unlearnt::Bound(reason)) => self.bound_or_give_up(reason).await,
            Some(Unlearnt::Unresolved(reason)) => {
                self.commits.give_up(reason);
                Ok(())
            }
        }
    }

    /// What is held must go before the session can say what it committed (or the session
    /// cannot say): bounds it by the primary's binlog position, read on strongsync's own
    /// connection, or — without one, or if it fails — releases it as unresolved for `reason`.
    async fn bound_or_give_up(&mut self, reason: Unresolved) -> Result<(), Error> {
        match self.bounds.bound_once(self.legs, &reason).await? {
            Some(bound) => self.commits.bounded(&bound),
            None => self.commits.give_up(reason),
        }
        Ok(())
    }

    /// Under the read barrier, bounds what is queued for the client by the primary's binlog
    /// position; if no reading can be had, what is queued goes as unresolved (counted, logged,
    /// listed in `/status`).
    async fn bound_read(&mut self) -> Result<(), Error> {
        match self.bounds.read_bound(self.legs).await? {
            Ok(bound) => self.commits.bounded_read(&bound),
            Err(error) => self.commits.unbounded(Unresolved::ReadUnbounded {
                error: Cause::new(error),
            }),
        }
        Ok(())
    }

    /// Releases what has been queued for the client: first reports the commits it announces
    /// (waiting as long as the commit hook says), then writes it — or, if the hook says the
    /// commit failed its quorum, replaces it with that error and drops the rest of the
    /// response. While the response is held for a check nothing is released, up to the
    /// configured bound; past it what is held goes, bounded by the probe or else released as
    /// unresolved. Under the read barrier, what is queued goes once the response is `done`
    /// (or [`READ_HOLD_CHUNK`] has gathered), after the quorum holds the binlog position read
    /// after it arrived.
    async fn release(&mut self, done: bool) -> Result<(), Error> {
        let limits = &self.shared.config.limits;
        if self.commits.holding() {
            let limit = limits.max_held_response_bytes;
            if self.legs.client().pending_write() <= limit {
                return Ok(());
            }
            self.bound_or_give_up(Unresolved::HeldPastLimit { limit })
                .await?;
        }
        let pending = self.legs.client().pending_write();
        if self.commits.barrier() && !self.commits.discarded() && pending > 0 {
            let chunk = READ_HOLD_CHUNK.min(limits.max_held_response_bytes);
            if !done && pending < chunk {
                return Ok(());
            }
            let by_snapshot = done
                && self
                    .cover
                    .answers(self.commits.snapshot(), &self.shared.door);
            if !by_snapshot {
                self.bound_read().await?;
            }
        }
        if self.commits.has_news() {
            let (commit, hold) =
                self.commits
                    .take(self.connection_id, self.tracker.quorum(), self.epoch);
            // Once the client has its error, later commits of the batch wait for no one.
            if !self.commits.discarded() {
                let wait = self.shared.door.wait(commit);
                if let Release::Fail(error) = self.legs.while_watching_client(wait).await? {
                    self.fail_held(hold, Error::NotAcknowledged(error));
                    self.commits.discard();
                }
            }
        }
        self.legs.flush_client().await?;
        self.commits.flushed();
        Ok(())
    }

    /// Replaces the held part of the response with the ERR packet for `error`.
    fn fail_held(&mut self, hold: Option<Mark>, error: Error) {
        let Some(hold) = hold else { return };
        tracing::warn!(%error, "commit not acknowledged: the client gets an error");
        let client = self.legs.client();
        client.truncate_pending(hold.offset());
        if let Some(err) = error.client_error() {
            client.write_packet_with(hold.seq(), |buf| {
                ok::put_err(buf, err.code, Some(err.sql_state), &err.message)
            });
        }
    }

    /// The primary asks for the client's file. The client must see the request before
    /// anything more can happen, so what is held goes now (the session cannot be asked before
    /// the response is over: the probe bounds it, or it goes out as unresolved; the check
    /// after the response still covers the rest). After a failed commit the client is not
    /// listening any more: the proxy declines the file itself.
    async fn answer_infile_request(&mut self) -> Result<(), Error> {
        self.commits.not_whole();
        if self.commits.holding() {
            self.bound_or_give_up(Unresolved::HiddenBeforeInfile)
                .await?;
        }
        self.release(true).await?;
        if self.commits.discarded() {
            let seq = self.legs.next_primary_seq();
            self.legs.primary().write_packet(seq, &[]);
            return self.legs.flush_primary().await;
        }
        self.relay_infile().await
    }

    /// Relays the client's file for `LOAD DATA LOCAL INFILE` up to and including the empty
    /// packet that ends it.
    async fn relay_infile(&mut self) -> Result<(), Error> {
        loop {
            if !self.legs.client().has_buffered_packet()
                || self.legs.primary().pending_write() >= FLUSH_AT
            {
                self.legs.flush_primary().await?;
            }
            let packet = self.legs.read_client_packet().await?;
            self.legs.pass_to_primary(&packet);
            // An empty packet after a full one only ends that chunk, not the file.
            if packet.payload().is_empty() && !packet.is_continuation() {
                return self.legs.flush_primary().await;
            }
        }
    }
}
