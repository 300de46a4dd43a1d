//! A session's part in `[sharing]`: its pool, its pins, and its connection's moves.

use std::sync::Arc;

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::ok::OkPacket;

use super::legs::Legs;
use super::pin::{Pin, Pins};
use super::pool::{PoolKey, Pools};
use crate::error::Error;
use crate::metrics::Metrics;

/// A session that may share: where its connections come from and why it keeps one.
pub(super) struct Share {
    pools: Arc<Pools>,
    key: PoolKey,
    pins: Pins,
    /// The id the session's last insert generated (what `LAST_INSERT_ID()` is on a
    /// connection of its own), 0 before one.
    last_insert_id: u64,
    /// The id of the connection the session had last (asked for first).
    own: u32,
    /// The epoch the session logged in under: once another is in force, its next command
    /// gets the error a retired session gets.
    epoch: u64,
    /// The reason `strongsync_sessions_pinned` counts the session under, if any.
    shown: Option<Pin>,
    /// A command was sent. Until then the session keeps its login's connection: clients set
    /// their session up first (a C client's `SET NAMES`, an ORM's `SET autocommit`), and a
    /// session that gave its connection back and then pinned another could leave those that
    /// gave theirs back with none, its own closed as surplus meanwhile.
    commanded: bool,
    metrics: Arc<Metrics>,
}

// === impl Share ===

impl Share {
    pub(super) fn new(
        pools: Arc<Pools>,
        key: PoolKey,
        own: u32,
        epoch: u64,
        metrics: Arc<Metrics>,
    ) -> Self {
        pools.enter(&key);
        let pins = Pins::for_login(key.charset);
        Share {
            pools,
            key,
            pins,
            last_insert_id: 0,
            own,
            epoch,
            shown: None,
            commanded: false,
            metrics,
        }
    }

    /// Pins the session to its connection for good.
    pub(super) fn fix(&mut self, why: Pin) {
        self.pins.fix(why);
    }

    /// A command goes to the primary.
    pub(super) fn on_command(&mut self, payload: &[u8]) {
        self.commanded = true;
        self.pins.on_command(payload);
    }

    /// An OK from the primary (parsed with session tracking).
    pub(super) fn on_ok(&mut self, ok: &OkPacket<'_>) {
        let pools = &self.pools;
        self.pins.on_ok(ok, |charset, collation| {
            pools.names_give(charset, collation)
        });
        if ok.last_insert_id != 0 {
            self.last_insert_id = ok.last_insert_id;
        }
    }

    /// A legacy EOF from the primary.
    pub(super) fn on_eof(&mut self, status: StatusFlags, warnings: u16) {
        self.pins.on_eof(status, warnings);
    }

    /// An ERR from the primary.
    pub(super) fn on_err(&mut self) {
        self.pins.on_err();
    }

    /// What `LAST_INSERT_ID()` would say on a connection of the session's own.
    pub(super) fn last_insert_id(&self) -> u64 {
        self.last_insert_id
    }

    /// Gives the session's connection back to the pool if nothing pins the session and it has
    /// sent a command; updates the pinned-sessions gauge either way.
    pub(super) async fn give_back(&mut self, legs: &mut Legs) {
        let verdict = self.pins.verdict();
        self.show(verdict);
        if verdict.is_some() || !self.commanded {
            return;
        }
        if let Some(backend) = legs.detach() {
            self.own = backend.id();
            self.pools.give_back(&self.key, backend).await;
        }
    }

    /// Gives the session a connection from its pool if it has none.
    ///
    /// # Errors
    /// [`Error::Retired`] if the session's epoch is over; [`Error::PoolExhausted`] if none
    /// came free in time; the client's errors if it went away meanwhile.
    pub(super) async fn take(&mut self, legs: &mut Legs, epoch_now: u64) -> Result<(), Error> {
        if legs.has_backend() {
            return Ok(());
        }
        if epoch_now != self.epoch {
            return Err(Error::Retired {
                epoch: self.epoch,
                now: epoch_now,
            });
        }
        let backend = legs
            .while_watching_client(self.pools.acquire(&self.key, self.own))
            .await??;
        legs.attach(backend);
        Ok(())
    }

    fn show(&mut self, verdict: Option<Pin>) {
        if self.shown == verdict {
            return;
        }
        if let Some(old) = self.shown {
            self.metrics
                .sessions_pinned
                .with_label_values(&[old.label()])
                .dec();
        }
        if let Some(new) = verdict {
            self.metrics
                .sessions_pinned
                .with_label_values(&[new.label()])
                .inc();
        }
        self.shown = verdict;
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.show(None);
        self.pools.leave(&self.key);
    }
}
