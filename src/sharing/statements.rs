//! Prepared statements of sessions that share connections, prepared again on the connection
//! a command runs on.

// A statement's id lives on the connection that prepared it, so a session that shares numbers
// its statements itself and keeps their text; each connection keeps the statements prepared on
// it by text, for every session that takes it. An execute may leave its parameter types out
// (the server then uses those it was last executed with, on that connection): the session
// keeps the types its client last sent and adds them where the connection last ran the
// statement with others.

use std::collections::HashMap;
use std::sync::Arc;

use strongsync_proto::command::{self, COM_STMT_CLOSE, COM_STMT_PREPARE, COM_STMT_SEND_LONG_DATA};
use strongsync_proto::packet::Packet;
use strongsync_proto::response::{PacketKind, ResponseReader};
use strongsync_proto::stmt::{self, PrepareOk, Types, LAST_PREPARED};

use super::pin::{lives_on_connection, words_in};
use crate::error::Error;
use crate::legs::Legs;
use crate::metrics::Metrics;

/// The statements a session prepared, by the ids it gave its client.
#[derive(Debug, Default)]
pub(super) struct SessionStatements {
    by_id: HashMap<u32, Statement>,
    /// The id given last: what MariaDB's [`LAST_PREPARED`] names.
    last: Option<u32>,
    /// The id the next statement gets (ids start at 1 and skip those in use).
    next: u32,
    /// The `COM_STMT_PREPARE` in flight, until its `PREPARE_OK` (or ERR).
    preparing: Option<Preparing>,
    /// The bytes of text kept.
    bytes: usize,
}

/// A statement of the session's.
#[derive(Debug)]
struct Statement {
    text: Text,
    params: u16,
    /// The parameter types the client sent last (empty before it sent any).
    types: Vec<u8>,
    /// The pin words of its text (see [`words_in`]).
    words: u8,
}

/// Where a statement can run.
#[derive(Debug, Clone)]
enum Text {
    /// Anywhere: its text, prepared again where it is not yet.
    Shared(Arc<[u8]>),
    /// Only on the session's own connection, under this id: its text was not kept (it came
    /// in several packets, or past `sharing.statement_bytes`), and the session keeps its
    /// connection for good.
    Own(u32),
}

/// A `COM_STMT_PREPARE` in flight.
#[derive(Debug)]
struct Preparing {
    /// Its text, if the session keeps it.
    text: Option<Arc<[u8]>>,
    words: u8,
}

/// The statements prepared on one connection to the primary, by text.
#[derive(Debug, Default)]
pub(super) struct ConnStatements {
    by_text: HashMap<Arc<[u8]>, Prepared>,
    /// Counts uses, for the least recently used.
    clock: u64,
    /// The text of the statement whose execute is in flight: an error leaves its types in
    /// doubt.
    executing: Option<Arc<[u8]>>,
    /// The bytes of text kept.
    bytes: usize,
    /// Statements to close on the connection: made twice by a client's prepare, or the least
    /// recently used past the limits. Written before the next command (a close has no
    /// response).
    to_close: Vec<u32>,
}

/// A statement prepared on a connection.
#[derive(Debug)]
struct Prepared {
    id: u32,
    /// The types it was last executed with on the connection (empty: not known).
    bound: Vec<u8>,
    used: u64,
    /// A cursor or parameters sent ahead live on it: it is never closed to make room, for
    /// that would lose them (its session keeps the connection for good).
    held: bool,
}

/// What became of a statement command.
pub(crate) enum Routed {
    /// It is queued for the primary, renumbered (a close of a shared statement: nothing is),
    /// and the rest of it follows, then its response if it has one.
    Forwarded,
    /// strongsync answered it (an error), or it needs no answer: the session waits for the
    /// next command.
    Answered,
}

/// The limits a sharing session's statements live under.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatementLimits {
    /// `sharing.statements_per_connection`.
    pub per_connection: usize,
    /// `sharing.statements_per_session`.
    pub per_session: usize,
    /// `sharing.statement_bytes`: the text a session keeps, and a connection.
    pub bytes: usize,
}

/// Whether a sharing session's command `cmd` names a statement by the session's id, which the
/// connection knows by another (every statement command but the prepare).
pub(super) fn renumbered(cmd: u8) -> bool {
    matches!(
        cmd,
        command::COM_STMT_EXECUTE
            | command::COM_STMT_BULK_EXECUTE
            | command::COM_STMT_SEND_LONG_DATA
            | command::COM_STMT_CLOSE
            | command::COM_STMT_RESET
            | command::COM_STMT_FETCH
    )
}

// === impl SessionStatements ===

impl SessionStatements {
    /// A `COM_STMT_PREPARE` of `text` goes to the primary (`whole`: in one packet). Whether
    /// the session keeps its text, within `limits.bytes` (if not, the statement can run only
    /// where it is prepared now, and the session must keep its connection).
    pub(super) fn preparing(&mut self, text: &[u8], whole: bool, limits: StatementLimits) -> bool {
        let keep = whole && self.bytes + text.len() <= limits.bytes;
        self.preparing = Some(Preparing {
            text: keep.then(|| Arc::from(text)),
            words: words_in(text),
        });
        keep
    }

    /// The pin words of the statement an execute names, if the session has it.
    pub(super) fn words_of(&self, payload: &[u8]) -> Option<u8> {
        self.find(stmt::statement_id(payload)?).map(|s| s.words)
    }

    /// Whether the session may prepare one more statement.
    pub(super) fn has_room(&self, limit: usize) -> bool {
        self.by_id.len() < limit
    }

    /// The `PREPARE_OK` of the statement in flight came, on `conn`: the session gives it an id
    /// of its own, which the client is told. If the connection had the statement already, the
    /// one it had serves, and the new one is closed once the response is over (see
    /// [`close_surplus`]), as are those past the connection's limits.
    pub(super) fn prepared(
        &mut self,
        ok: PrepareOk,
        conn: &mut ConnStatements,
        limits: StatementLimits,
    ) -> u32 {
        let preparing = self.preparing.take().unwrap_or(Preparing {
            text: None,
            words: 0,
        });
        let text = match preparing.text {
            Some(text) => {
                self.bytes += text.len();
                conn.insert(Arc::clone(&text), ok.id, limits);
                Text::Shared(text)
            }
            None => Text::Own(ok.id),
        };
        let id = self.free_id();
        self.by_id.insert(
            id,
            Statement {
                text,
                params: ok.params,
                types: Vec::new(),
                words: preparing.words,
            },
        );
        self.last = Some(id);
        id
    }

    /// The primary refused the statement in flight.
    pub(super) fn refused(&mut self) {
        self.preparing = None;
    }

    /// The client closed statement `id`: `Some` id to close on the session's own connection,
    /// for one that lives only there.
    pub(super) fn close(&mut self, id: u32) -> Option<u32> {
        let statement = self.by_id.remove(&id)?;
        if self.last == Some(id) {
            self.last = None;
        }
        match statement.text {
            Text::Own(own) => Some(own),
            Text::Shared(text) => {
                self.bytes -= text.len();
                None
            }
        }
    }

    /// The connection was reset or its user changed: the primary closed every statement of
    /// it, and the client knows none of its ids any more.
    pub(super) fn forget(&mut self) {
        self.by_id.clear();
        self.last = None;
        self.bytes = 0;
    }

    fn find(&self, id: u32) -> Option<&Statement> {
        let id = if id == LAST_PREPARED { self.last? } else { id };
        self.by_id.get(&id)
    }

    fn free_id(&mut self) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1);
            let id = self.next;
            if id != 0 && id != LAST_PREPARED && !self.by_id.contains_key(&id) {
                return id;
            }
        }
    }

    /// Sends a statement command (`COM_STMT_EXECUTE`, `_BULK_EXECUTE`, `_RESET`, `_FETCH`,
    /// `_SEND_LONG_DATA`, or `_CLOSE` of a statement of the session's own connection) to the
    /// primary as the statement the connection has, preparing it there first if it has not,
    /// with the parameter types the connection lacks. A command naming no statement of the
    /// session's gets the error the server gives; one whose statement the primary refuses to
    /// prepare gets that refusal as its response.
    ///
    /// # Errors
    /// The legs' errors.
    pub(super) async fn forward(
        &mut self,
        legs: &mut Legs,
        conn: &mut ConnStatements,
        first: &Packet,
        limits: StatementLimits,
        metrics: &Metrics,
    ) -> Result<Routed, Error> {
        let payload = first.payload();
        let cmd = payload[0];
        // Too short to name a statement: the primary says what is wrong with it.
        let Some(asked) = stmt::statement_id(payload) else {
            legs.pass_to_primary(first);
            return Ok(Routed::Forwarded);
        };
        let key = if asked == LAST_PREPARED {
            self.last
        } else {
            Some(asked)
        };
        let Some(statement) = key.and_then(|key| self.by_id.get_mut(&key)) else {
            return refuse(
                legs,
                first,
                Error::UnknownStatement {
                    id: asked,
                    command: command::name(cmd),
                },
            )
            .await;
        };
        if cmd == COM_STMT_CLOSE {
            if let Text::Own(own) = statement.text {
                let seq = legs.next_primary_seq();
                legs.primary()
                    .write_packet_with(seq, |buf| stmt::put_close(buf, own));
            }
            if let Some(key) = key {
                self.close(key);
            }
            return Ok(Routed::Forwarded);
        }
        let (id, text) = match &statement.text {
            Text::Own(own) => (*own, None),
            Text::Shared(text) => match prepare_here(legs, conn, text, limits, metrics).await? {
                Ok(id) => (id, Some(Arc::clone(text))),
                Err(refusal) => {
                    drain(legs, first).await?;
                    if cmd != COM_STMT_SEND_LONG_DATA {
                        legs.pass_to_client(&refusal);
                        legs.flush_client().await?;
                    }
                    return Ok(Routed::Answered);
                }
            },
        };
        write_closes(legs, conn, metrics);
        let to = RunAs { id, text, asked };
        forward_as(statement, to, legs, conn, first).await
    }
}

/// The statement a command runs as on the connection: its id there, its text if it is a
/// shared one, and the id the client named it by.
struct RunAs {
    id: u32,
    text: Option<Arc<[u8]>>,
    asked: u32,
}

/// Sends statement command `first` to the primary as statement `to` on the connection, with
/// the parameter types the connection lacks added (the client may leave out those it sent
/// last, which another connection may have had).
async fn forward_as(
    statement: &mut Statement,
    to: RunAs,
    legs: &mut Legs,
    conn: &mut ConnStatements,
    first: &Packet,
) -> Result<Routed, Error> {
    let RunAs { id, text, asked } = to;
    let payload = first.payload();
    let cmd = payload[0];
    let seq = legs.next_primary_seq();
    let types = Types::of(payload, statement.params).ok().flatten();
    conn.executing.clone_from(&text);
    if let Some(text) = text.as_ref().filter(|_| lives_on_connection(payload)) {
        conn.hold(text);
    }
    let Some(types) = types else {
        legs.primary()
            .forward_patched(first, seq, 1, &id.to_le_bytes());
        return Ok(Routed::Forwarded);
    };
    let bulk = cmd != command::COM_STMT_EXECUTE;
    if let Some(sent) = types.sent {
        if statement.types != sent {
            statement.types = sent.to_vec();
        }
        if let Some(text) = &text {
            conn.bound(text, if bulk { &[] } else { sent });
        }
        legs.primary()
            .forward_patched(first, seq, 1, &id.to_le_bytes());
        return Ok(Routed::Forwarded);
    }
    // The connection has the client's last types for it (its own connection always has).
    let has_types = text
        .as_ref()
        .is_none_or(|text| conn.has_bound(text, &statement.types));
    if has_types || statement.types.is_empty() {
        legs.primary()
            .forward_patched(first, seq, 1, &id.to_le_bytes());
        return Ok(Routed::Forwarded);
    }
    if first.continues() {
        // The types would not fit in a packet of the largest size.
        return refuse(legs, first, Error::TypesLeftOut { id: asked }).await;
    }
    if let Some(text) = &text {
        let types_now = if bulk { &[][..] } else { &statement.types };
        conn.bound(text, types_now);
    }
    let with = &statement.types;
    legs.primary()
        .write_packet_with(seq, |buf| types.put_with(buf, payload, id, with));
    Ok(Routed::Forwarded)
}

// === impl ConnStatements ===

impl ConnStatements {
    /// The statement prepared as `text` on the connection, as used now.
    fn touch(&mut self, text: &[u8]) -> Option<u32> {
        self.clock += 1;
        let prepared = self.by_text.get_mut(text)?;
        prepared.used = self.clock;
        Some(prepared.id)
    }

    /// Records `text` prepared as `id`, to be closed if the connection had it already; then
    /// the least recently used others go (to be closed) while the connection is past
    /// `limits`.
    fn insert(&mut self, text: Arc<[u8]>, id: u32, limits: StatementLimits) {
        if let Some(had) = self.touch(&text) {
            if had != id {
                self.to_close.push(id);
            }
            return;
        }
        self.bytes += text.len();
        self.by_text.insert(
            text,
            Prepared {
                id,
                bound: Vec::new(),
                used: self.clock,
                held: false,
            },
        );
        while self.by_text.len() > limits.per_connection || self.bytes > limits.bytes {
            let Some(oldest) = self
                .by_text
                .iter()
                .filter(|(_, p)| p.used != self.clock && !p.held)
                .min_by_key(|(_, p)| p.used)
                .map(|(text, _)| Arc::clone(text))
            else {
                break;
            };
            if let Some(prepared) = self.by_text.remove(&oldest) {
                self.bytes -= oldest.len();
                self.to_close.push(prepared.id);
            }
        }
    }

    fn hold(&mut self, text: &[u8]) {
        if let Some(prepared) = self.by_text.get_mut(text) {
            prepared.held = true;
        }
    }

    fn bound(&mut self, text: &[u8], types: &[u8]) {
        if let Some(prepared) = self.by_text.get_mut(text) {
            if prepared.bound != types {
                prepared.bound = types.to_vec();
            }
        }
    }

    fn has_bound(&self, text: &[u8], types: &[u8]) -> bool {
        self.by_text.get(text).is_some_and(|p| p.bound == types)
    }

    /// An error answered the command in flight: if it was an execute, the types its statement
    /// has on the connection are no longer known.
    pub(super) fn failed(&mut self) {
        if let Some(text) = self.executing.take() {
            self.bound(&text, &[]);
        }
    }

    /// The connection was reset or its user changed: the primary closed its statements.
    pub(super) fn forget(&mut self) {
        self.by_text.clear();
        self.executing = None;
        self.bytes = 0;
        self.to_close.clear();
    }
}

/// The id of the statement `text` on the connection, prepared there now if it is not yet (the
/// statements that puts past `limits` are closed before the command: see [`write_closes`]);
/// `Err` holds the primary's refusal.
async fn prepare_here(
    legs: &mut Legs,
    conn: &mut ConnStatements,
    text: &Arc<[u8]>,
    limits: StatementLimits,
    metrics: &Metrics,
) -> Result<Result<u32, Packet>, Error> {
    if let Some(id) = conn.touch(text) {
        return Ok(Ok(id));
    }
    // Each command is an exchange of its own, from sequence id 0.
    legs.new_primary_exchange();
    let seq = legs.next_primary_seq();
    legs.primary()
        .write_packet_with(seq, |buf| stmt::put_prepare(buf, text));
    legs.flush_primary().await?;
    let mut reader = ResponseReader::for_command(&[COM_STMT_PREPARE], legs.deprecate_eof())
        .expect("a prepare has a response");
    let mut outcome = None;
    loop {
        let packet = legs.next_primary_packet().await?;
        legs.check_primary_seq(&packet)?;
        let step = reader.on_packet(&packet).map_err(Error::PrimaryProtocol)?;
        match step.kind {
            PacketKind::PrepareOk => {
                let ok = PrepareOk::parse(packet.payload()).map_err(Error::PrimaryProtocol)?;
                outcome = Some(Ok(ok.id));
            }
            PacketKind::Err => outcome = Some(Err(packet)),
            _ => {}
        }
        if step.done {
            break;
        }
    }
    legs.new_primary_exchange();
    let outcome = outcome.expect("a finished prepare response began with PREPARE_OK or ERR");
    if let Ok(id) = outcome {
        metrics.statements_reprepared.inc();
        conn.insert(Arc::clone(text), id, limits);
    }
    Ok(outcome)
}

/// Queues the closes of the statements the connection is to close, each an exchange of its
/// own (from sequence id 0, with no response), before the next command.
fn write_closes(legs: &mut Legs, conn: &mut ConnStatements, metrics: &Metrics) {
    let mut to_close = std::mem::take(&mut conn.to_close);
    if to_close.is_empty() {
        return;
    }
    metrics.statements_closed.inc_by(to_close.len() as u64);
    for id in &to_close {
        legs.primary()
            .write_packet_with(0, |buf| stmt::put_close(buf, *id));
    }
    // The vector goes back, to be filled again without an allocation.
    to_close.clear();
    conn.to_close = to_close;
}

/// Closes the statements the connection is to close (see [`ConnStatements::insert`]), once
/// a prepare's response is over.
///
/// # Errors
/// The legs' errors.
pub(super) async fn close_surplus(
    legs: &mut Legs,
    conn: &mut ConnStatements,
    metrics: &Metrics,
) -> Result<(), Error> {
    if conn.to_close.is_empty() {
        return Ok(());
    }
    write_closes(legs, conn, metrics);
    legs.flush_primary().await
}

/// Answers the statement command `first` with `error` (if it is a command answered at all),
/// reading the rest of it from the client.
pub(super) async fn refuse(legs: &mut Legs, first: &Packet, error: Error) -> Result<Routed, Error> {
    drain(legs, first).await?;
    if !matches!(first.payload()[0], COM_STMT_SEND_LONG_DATA | COM_STMT_CLOSE) {
        legs.queue_client_error(&error);
        legs.flush_client().await?;
    }
    Ok(Routed::Answered)
}

/// Reads the packets of the client's command that follow `first`, which go nowhere.
async fn drain(legs: &mut Legs, first: &Packet) -> Result<(), Error> {
    let mut continues = first.continues();
    while continues {
        continues = legs.read_client_packet().await?.continues();
    }
    Ok(())
}

#[cfg(test)]
mod tests;
