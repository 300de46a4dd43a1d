//! Connection sharing (`[sharing]`): sessions without state share connections to the
//! primary, and a session reaches all of it through its [`Share`].

mod pin;
mod pool;
mod statements;

use std::borrow::Cow;
use std::sync::Arc;

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::command::{
    COM_CHANGE_USER, COM_RESET_CONNECTION, COM_STMT_BULK_EXECUTE, COM_STMT_EXECUTE,
    COM_STMT_PREPARE,
};
use strongsync_proto::ok::OkPacket;
use strongsync_proto::packet::Packet;
use strongsync_proto::stmt::PrepareOk;

use pin::{asks_last_insert_id, Pin, Pins};
use pool::{Kept, Pooled};
use statements::SessionStatements;

use crate::error::Error;
use crate::legs::Legs;
use crate::metrics::Metrics;

pub(crate) use pool::{PoolKey, Pools};
pub(crate) use statements::Routed;

/// A session that may share: where its connections come from and why it keeps one.
pub(crate) struct Share {
    pools: Arc<Pools>,
    key: PoolKey,
    /// What the pool keeps with the connection the session's legs hold now, if they hold one.
    kept: Option<Kept>,
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

/// The session's legs hold a connection whenever its share keeps what goes with it.
const NOT_KEPT: &str = "a sharing session's connection and what its pool keeps with it go together";

// === impl Share ===

impl Share {
    /// The part in `key`'s pool of a session that logged in on connection `own` in `epoch`:
    /// that connection becomes one of the pool's.
    pub(crate) fn new(
        pools: Arc<Pools>,
        key: PoolKey,
        own: u32,
        epoch: u64,
        metrics: Arc<Metrics>,
    ) -> Self {
        pools.enter(&key);
        let pins = Pins::for_login(key.charset);
        Share {
            kept: Some(pools.join(&key)),
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

    /// The session's commits are tracked by settings strongsync made on its connection: it
    /// keeps that connection for good.
    pub(crate) fn tracked_by_own_settings(&mut self) {
        self.pins.fix(Pin::Tracking);
    }

    /// Whether a command names a statement by the session's id, which the connection knows by
    /// another: it goes by [`Share::forward_statement`].
    pub(crate) fn renumbers(cmd: u8) -> bool {
        statements::renumbered(cmd)
    }

    /// A command goes to the primary (`whole`: in one packet).
    pub(crate) fn on_command(&mut self, payload: &[u8], whole: bool) {
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
            COM_RESET_CONNECTION | COM_CHANGE_USER => {
                // The primary closes the connection's statements, and the client forgets the
                // session's ids.
                self.statements.forget();
                self.kept().statements.forget();
            }
            _ => {}
        }
    }

    /// Refuses a `COM_STMT_PREPARE` past `sharing.statements_per_session` (reading the rest
    /// of it from the client): whether it did.
    ///
    /// # Errors
    /// The legs' errors.
    pub(crate) async fn refuse_prepare_past_limit(
        &self,
        legs: &mut Legs,
        prepare: &Packet,
    ) -> Result<bool, Error> {
        let limit = self.pools.statement_limits().per_session;
        if self.statements.has_room(limit) {
            return Ok(false);
        }
        statements::refuse(legs, prepare, Error::TooManyStatements { limit }).await?;
        Ok(true)
    }

    /// A statement's `PREPARE_OK` came: the id the client is told.
    pub(crate) fn prepared(&mut self, ok: PrepareOk) -> u32 {
        let limits = self.pools.statement_limits();
        let conn = &mut self.kept.as_mut().expect(NOT_KEPT).statements;
        self.statements.prepared(ok, conn, limits)
    }

    /// The client closed a statement (`COM_STMT_CLOSE` `payload`) while the session has no
    /// connection: nothing goes to the primary (a statement that lives on a connection pins
    /// the session to it).
    pub(crate) fn close_unattached(&mut self, payload: &[u8]) {
        let Some(id) = strongsync_proto::stmt::statement_id(payload) else {
            return;
        };
        let own = self.statements.close(id);
        debug_assert!(
            own.is_none(),
            "a session with a statement of its own connection keeps it"
        );
    }

    /// The answer to a `SELECT LAST_INSERT_ID()` (statement text `sql`) from the session's
    /// own inserts, with the column's name as the client wrote it.
    pub(crate) fn last_insert_id_answer<'a>(&self, sql: &'a [u8]) -> Option<(Cow<'a, str>, u64)> {
        let expression = asks_last_insert_id(sql)?;
        Some((String::from_utf8_lossy(expression), self.last_insert_id))
    }

    /// Sends a statement command to the primary, renumbered (see
    /// [`SessionStatements::forward`]).
    ///
    /// # Errors
    /// The legs' errors.
    pub(crate) async fn forward_statement(
        &mut self,
        legs: &mut Legs,
        first: &Packet,
    ) -> Result<Routed, Error> {
        let limits = self.pools.statement_limits();
        let conn = &mut self.kept.as_mut().expect(NOT_KEPT).statements;
        self.statements
            .forward(legs, conn, first, limits, &self.metrics)
            .await
    }

    /// Closes the statements the connection is to close once a response is over (a prepare
    /// may have made one twice, or put the connection past its limits).
    ///
    /// # Errors
    /// The legs' errors.
    pub(crate) async fn close_surplus(&mut self, legs: &mut Legs) -> Result<(), Error> {
        let conn = &mut self.kept.as_mut().expect(NOT_KEPT).statements;
        statements::close_surplus(legs, conn, &self.metrics).await
    }

    /// An OK from the primary (parsed with session tracking).
    pub(crate) fn on_ok(&mut self, ok: &OkPacket<'_>) {
        let pools = &self.pools;
        self.pins.on_ok(ok, |charset, collation| {
            pools.names_give(charset, collation)
        });
        if ok.last_insert_id != 0 {
            self.last_insert_id = ok.last_insert_id;
        }
    }

    /// A legacy EOF from the primary.
    pub(crate) fn on_eof(&mut self, status: StatusFlags, warnings: u16) {
        self.pins.on_eof(status, warnings);
    }

    /// An ERR from the primary.
    pub(crate) fn on_err(&mut self) {
        self.pins.on_err();
        self.statements.refused();
        self.kept().statements.failed();
    }

    /// Gives the session's connection back to the pool if nothing pins the session and it has
    /// sent a command; updates the pinned-sessions gauge either way.
    pub(crate) async fn give_back(&mut self, legs: &mut Legs) {
        let verdict = self.pins.verdict();
        self.show(verdict);
        if verdict.is_some() || !self.commanded {
            return;
        }
        if let Some(backend) = legs.detach() {
            self.own = backend.id();
            let kept = self.kept.take().expect(NOT_KEPT);
            self.pools
                .give_back(&self.key, Pooled { backend, kept })
                .await;
        }
    }

    /// Gives the session a connection from its pool if it has none.
    ///
    /// # Errors
    /// [`Error::Retired`] if the session's epoch is over; [`Error::PoolExhausted`] if none
    /// came free in time; the client's errors if it went away meanwhile.
    pub(crate) async fn take(&mut self, legs: &mut Legs, epoch_now: u64) -> Result<(), Error> {
        if legs.has_backend() {
            return Ok(());
        }
        if epoch_now != self.epoch {
            return Err(Error::Retired {
                epoch: self.epoch,
                now: epoch_now,
            });
        }
        let Pooled { backend, kept } = legs
            .while_watching_client(self.pools.acquire(&self.key, self.own))
            .await??;
        legs.attach(backend);
        self.kept = Some(kept);
        Ok(())
    }

    fn kept(&mut self) -> &mut Kept {
        self.kept.as_mut().expect(NOT_KEPT)
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
