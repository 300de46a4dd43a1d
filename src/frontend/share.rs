//! A session's part in `[sharing]`: its pool, its pins, and its connection's moves.

use std::sync::Arc;

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::command::{
    COM_CHANGE_USER, COM_RESET_CONNECTION, COM_STMT_BULK_EXECUTE, COM_STMT_EXECUTE,
    COM_STMT_PREPARE,
};
use strongsync_proto::ok::OkPacket;
use strongsync_proto::packet::Packet;
use strongsync_proto::stmt::PrepareOk;

use super::legs::Legs;
use super::pin::{Pin, Pins};
use super::pool::{PoolKey, Pools};
use super::statements::{Routed, SessionStatements};
use crate::error::Error;
use crate::metrics::Metrics;

/// A session that may share: where its connections come from and why it keeps one.
pub(super) struct Share {
    pools: Arc<Pools>,
    key: PoolKey,
    pins: Pins,
    /// Its prepared statements, numbered by the session (they run on any connection).
    statements: SessionStatements,
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
            statements: SessionStatements::default(),
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

    /// A command goes to the primary (`whole`: in one packet).
    pub(super) fn on_command(&mut self, payload: &[u8], whole: bool) {
        self.commanded = true;
        self.pins.on_command(payload);
        match payload[0] {
            COM_STMT_PREPARE => {
                let limits = self.pools.statement_limits();
                if !self.statements.preparing(&payload[1..], whole, limits) {
                    // Its text is not kept: it can run only where it is prepared now.
                    self.pins.fix(Pin::Prepared);
                }
            }
            COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => {
                if let Some(words) = self.statements.words_of(payload) {
                    self.pins.on_words(words);
                }
            }
            COM_RESET_CONNECTION | COM_CHANGE_USER => self.statements.forget(),
            _ => {}
        }
    }

    /// Whether the session may prepare one more statement.
    ///
    /// # Errors
    /// [`Error::TooManyStatements`].
    pub(super) fn may_prepare(&self) -> Result<(), Error> {
        let limit = self.pools.statement_limits().per_session;
        if self.statements.has_room(limit) {
            Ok(())
        } else {
            Err(Error::TooManyStatements { limit })
        }
    }

    /// A statement's `PREPARE_OK` came: the id the client is told.
    pub(super) fn prepared(&mut self, ok: PrepareOk, legs: &mut Legs) -> u32 {
        let limits = self.pools.statement_limits();
        self.statements.prepared(ok, legs.statements(), limits)
    }

    /// The client closed a statement, while the session has no connection: nothing goes to
    /// the primary (a statement that lives on a connection pins the session to it).
    pub(super) fn close_unattached(&mut self, id: u32) {
        let own = self.statements.close(id);
        debug_assert!(
            own.is_none(),
            "a session with a statement of its own connection keeps it"
        );
    }

    /// Sends a statement command to the primary, renumbered (see
    /// [`SessionStatements::forward`]).
    ///
    /// # Errors
    /// The legs' errors.
    pub(super) async fn forward_statement(
        &mut self,
        legs: &mut Legs,
        first: &Packet,
    ) -> Result<Routed, Error> {
        let limits = self.pools.statement_limits();
        self.statements
            .forward(legs, first, limits, &self.metrics)
            .await
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
    pub(super) fn on_err(&mut self, legs: &mut Legs) {
        self.pins.on_err();
        self.statements.refused();
        legs.statements().failed();
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
