//! Relaying a command's response packet by packet: tracker data filtered, commits reported to
//! the commit hook before the packets that announce them are released (or replaced by an
//! error if the hook says so), and `LOAD DATA LOCAL INFILE` uploads.

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::gtid::tracked_gtids;
use strongsync_proto::ok::{
    self, EofPacket, OkPacket, SESSION_TRACK_STATE_CHANGE_VAR, SESSION_TRACK_TRANSACTION_INFO_VAR,
};
use strongsync_proto::packet::Packet;
use strongsync_proto::response::{PacketKind, ResponseReader};

use super::commits::{Mark, ResponseCommits};
use super::session::{Phase, Session, CLIENT_READ_AHEAD, FLUSH_AT, READ_HOLD_CHUNK};
use super::tracking::CheckReason;
use crate::commit::{Release, Unresolved};
use crate::error::Error;

// === impl Session (relay) ===

impl Session {
    /// Relays one response. Packets go to the client in batches (whatever the primary has
    /// sent so far); a batch that reports a commit is held until the commit hook lets it go,
    /// and from a packet that may hide one (see [`super::tracking`]) everything is held until
    /// the session has been checked.
    pub(super) async fn relay_response(
        &mut self,
        mut reader: ResponseReader,
    ) -> Result<Phase, Error> {
        let barrier = self.shared.durability.reads_wait() && !self.reveals_nothing;
        let mut commits = ResponseCommits::new(barrier);
        commits.snapshot = self.snapshot.for_response();
        let check_every = self.tracking.checks_every_response();
        if self.tracking.take_names_quorum() && self.mariadb {
            commits.need_check(CheckReason::SessionQuorum);
        }
        loop {
            if reader.awaits_client() {
                self.answer_infile_request(&mut commits).await?;
                reader.infile_sent();
                continue;
            }
            if !self.primary.has_buffered_packet() || self.client.pending_write() >= FLUSH_AT {
                self.release(&mut commits, false).await?;
            }
            let packet = self.next_primary_packet().await?;
            self.primary_seq
                .check(packet.seq())
                .map_err(Error::PrimaryProtocol)?;
            let step = reader.on_packet(&packet).map_err(Error::PrimaryProtocol)?;
            let mark = Mark {
                offset: self.client.pending_write(),
                seq: self.client_seq.advance(),
            };
            commits.queued(mark);
            match step.kind {
                PacketKind::Ok | PacketKind::OkTerminator => {
                    self.relay_ok(&packet, mark.seq, Some(&mut commits))?;
                    if let Some(reason) = check_every {
                        commits.need_check(reason);
                    }
                }
                PacketKind::Eof => {
                    // A legacy EOF carries the state-changed flag but never the state itself.
                    let status = EofPacket::parse(packet.payload())
                        .map_err(Error::PrimaryProtocol)?
                        .status;
                    if status.contains(StatusFlags::SERVER_SESSION_STATE_CHANGED) {
                        commits.need_check(CheckReason::LegacyEof);
                    }
                    if let Some(reason) = check_every {
                        commits.need_check(reason);
                    }
                    self.last_status = status;
                    self.forward_to_client(&packet, mark.seq, &commits);
                }
                PacketKind::Err => {
                    // An error may have ended the transaction (a deadlock, a row changed
                    // since the snapshot) and never carries its state.
                    commits.leaves_snapshot = true;
                    self.forward_to_client(&packet, mark.seq, &commits);
                }
                PacketKind::PrepareOk => {
                    self.snapshot.prepared(packet.payload());
                    self.forward_to_client(&packet, mark.seq, &commits);
                }
                _ => self.forward_to_client(&packet, mark.seq, &commits),
            }
            commits.hold_if_news();
            if step.done {
                break;
            }
        }
        if commits.check.is_some() {
            self.check_tracking(&mut commits).await?;
            commits.hold_if_news();
        }
        debug_assert!(!commits.holding, "a finished response is never held back");
        self.release(&mut commits, true).await?;
        self.snapshot.after_response(&commits);
        Ok(if self.tracking.reset {
            Phase::TrackingSetup
        } else {
            Phase::Idle
        })
    }

    /// Passes an OK to the client with the tracker data it did not ask for removed, noting
    /// (when `commits` is given) any commit it reports and anything else it says changed.
    pub(super) fn relay_ok(
        &mut self,
        packet: &Packet,
        seq: u8,
        commits: Option<&mut ResponseCommits>,
    ) -> Result<(), Error> {
        let ok = OkPacket::parse(packet.payload(), self.primary_tracks)
            .map_err(Error::PrimaryProtocol)?;
        self.last_status = ok.status;
        let discard = commits.as_ref().is_some_and(|c| c.discard);
        if let Some(commits) = commits {
            commits.transaction_reported(&ok);
            if ok
                .status
                .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED)
            {
                for tracked in tracked_gtids(&ok) {
                    self.note_tracked(tracked, commits);
                }
                if self.mariadb && !ok.reports_only_routine_state() {
                    commits.need_check(CheckReason::StateChange);
                    if let Some(on) = state_change_set(&ok) {
                        // The client switched state-change items on or off itself: from this
                        // packet on it sees them as it asked.
                        self.tracking.filter.keep_state_change = on;
                    }
                    let switched = variable_set(&ok, SESSION_TRACK_TRANSACTION_INFO_VAR)
                        .filter(|_| self.tracking.snapshot_vars);
                    if let Some(value) = switched {
                        // Likewise for the transaction items (set back to the proxy's value
                        // by the check after this response).
                        self.tracking.client_transaction_info(value);
                    }
                }
            }
        }
        if discard {
            return Ok(());
        }
        let filter = self.tracking.filter;
        if ok.needs_filtering(filter) {
            self.client
                .write_packet_with(seq, |buf| ok.write_filtered(filter, buf));
        } else {
            self.client.forward_as(packet, seq);
        }
        Ok(())
    }

    fn forward_to_client(&mut self, packet: &Packet, seq: u8, commits: &ResponseCommits) {
        if !commits.discard {
            self.client.forward_as(packet, seq);
        }
    }

    /// Releases what has been queued for the client: first reports the commits it announces
    /// (waiting as long as the commit hook says), then writes it — or, if the hook says the
    /// commit failed its quorum, replaces it with that error and drops the rest of the
    /// response. While the response is held for a check nothing is released, up to the
    /// configured bound; past it what is held goes, bounded by the probe or else released as
    /// unresolved. Under the read barrier, what is queued goes once the response is `done`
    /// (or [`READ_HOLD_CHUNK`] has gathered), after the quorum holds the binlog position read
    /// after it arrived.
    async fn release(&mut self, commits: &mut ResponseCommits, done: bool) -> Result<(), Error> {
        if commits.holding {
            let limit = self.shared.config.limits.max_held_response_bytes;
            if self.client.pending_write() <= limit {
                return Ok(());
            }
            self.bound_or_give_up(commits, Unresolved::HeldPastLimit { limit })
                .await?;
        }
        if commits.barrier && !commits.discard && self.client.pending_write() > 0 {
            let chunk = READ_HOLD_CHUNK.min(self.shared.config.limits.max_held_response_bytes);
            if !done && self.client.pending_write() < chunk {
                return Ok(());
            }
            if !(done && self.answers_from_snapshot(commits)) {
                self.bound_read(commits).await?;
            }
        }
        if commits.has_news() {
            let (commit, hold) = commits.take(self.connection_id, self.tracking.quorum);
            if commits.discard {
                // The client already has its error; later commits of the batch wait for no one.
            } else {
                let wait = self.shared.hook.on_commit(commit);
                if let Release::Fail(error) = self.while_watching_client(wait).await? {
                    self.fail_held(hold, Error::NotAcknowledged(error));
                    commits.discard = true;
                }
            }
        }
        self.flush_client().await?;
        commits.flushed();
        Ok(())
    }

    /// Replaces the held part of the response with the ERR packet for `error`.
    fn fail_held(&mut self, hold: Option<Mark>, error: Error) {
        let Some(hold) = hold else { return };
        tracing::warn!(%error, "commit not acknowledged: the client gets an error");
        self.client.truncate_pending(hold.offset);
        if let Some(err) = error.client_error() {
            self.client.write_packet_with(hold.seq, |buf| {
                ok::put_err(buf, err.code, Some(err.sql_state), &err.message)
            });
        }
    }

    /// Runs `fut`, failing early if the client disconnects. A parked commit is not cut short
    /// by shutdown: it gets the shutdown's grace period like any other work in flight.
    pub(super) async fn while_watching_client<T>(
        &mut self,
        fut: impl std::future::Future<Output = T>,
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

    /// The next packet from the primary. A client that hangs up meanwhile ends the session
    /// (dropping the primary connection, which rolls back anything uncommitted, as a direct
    /// disconnect would); bytes it pipelines meanwhile wait in its buffer.
    pub(super) async fn next_primary_packet(&mut self) -> Result<Packet, Error> {
        loop {
            tokio::select! {
                biased;
                packet = self.primary.read_packet() => return packet.map_err(Error::from_primary),
                filled = self.client.fill(), if self.client.buffered_len() < CLIENT_READ_AHEAD => {
                    if filled.map_err(Error::from_client)? == 0 {
                        return Err(Error::ClientClosed);
                    }
                }
            }
        }
    }

    /// The primary asks for the client's file. The client must see the request before
    /// anything more can happen, so what is held goes now (the session cannot be asked before
    /// the response is over: the probe bounds it, or it goes out as unresolved; the check
    /// after the response still covers the rest). After a failed commit the client is not
    /// listening any more: the proxy declines the file itself.
    async fn answer_infile_request(&mut self, commits: &mut ResponseCommits) -> Result<(), Error> {
        // What is released now is not the whole response.
        commits.snapshot = None;
        if commits.holding {
            self.bound_or_give_up(commits, Unresolved::HiddenBeforeInfile)
                .await?;
        }
        self.release(commits, true).await?;
        if commits.discard {
            self.primary.write_packet(self.primary_seq.advance(), &[]);
            return self.flush_primary().await;
        }
        self.relay_infile().await
    }

    /// Relays the client's file for `LOAD DATA LOCAL INFILE` up to and including the empty
    /// packet that ends it.
    async fn relay_infile(&mut self) -> Result<(), Error> {
        loop {
            if !self.client.has_buffered_packet() || self.primary.pending_write() >= FLUSH_AT {
                self.flush_primary().await?;
            }
            let packet = self.read_client_packet().await?;
            self.primary.forward_as(&packet, self.primary_seq.advance());
            // An empty packet after a full one only ends that chunk, not the file.
            if packet.payload().is_empty() && !packet.is_continuation() {
                return self.flush_primary().await;
            }
        }
    }
}

/// What an OK says the session's `session_track_state_change` was set to, if it says.
fn state_change_set(ok: &OkPacket<'_>) -> Option<bool> {
    variable_set(ok, SESSION_TRACK_STATE_CHANGE_VAR)
        .map(|value| value.eq_ignore_ascii_case(b"ON") || value == b"1")
}

/// What an OK says the session's variable `name` was set to, if it says.
fn variable_set<'a>(ok: &OkPacket<'a>, name: &[u8]) -> Option<&'a [u8]> {
    ok.state_items()
        .flatten()
        .flat_map(|item| item.variables().flatten())
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, value)| value)
        .last()
}
