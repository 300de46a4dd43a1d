//! What differs between a MariaDB primary and a MySQL one, behind one type chosen at login from
//! the primary's greeting, [`Flavour`].

mod defaults;
mod learnt;
mod mariadb;
mod mysql;
mod plain;
mod server;
#[cfg(test)]
mod testing;

use std::future::Future;
use std::sync::Arc;

use smallvec::SmallVec;
use strongsync_proto::command::COM_RESET_CONNECTION;
use strongsync_proto::gtid::{Gtid, GtidPosition};
use strongsync_proto::handshake::ServerGreeting;
use strongsync_proto::ok::{OkPacket, TrackingFilter};
use strongsync_proto::ProtoError;
use tracing::{debug, warn};

use crate::asked::AskedQuorum;
use crate::commit::Unresolved;
use crate::error::{Error, ReplicaSetupError};
use crate::metrics::Metrics;
use crate::tracking_defaults::SessionDefaults;
pub use defaults::TrackingDefaults;
pub use server::{GtidModeProblem, Inspected, PromoteSql, ServerIdentity};

/// The kind of server the primary is.
///
/// It says:
/// - how a session's commits are reported, and how the session is checked when a response may
///   hide one ([`Tracker`], one per session);
/// - what the primary's binlog position reads as, the bound of what a response may have
///   committed or revealed ([`Flavour::bound_queries`]);
/// - what a replica says it holds when it asks for the binlog ([`Flavour::dump_setup`]);
/// - what failover asks a server that is to become the primary, and who it is
///   ([`ServerIdentity`], [`Flavour::inspect_query`]).
///
/// GTIDs and positions themselves are in [`strongsync_proto::gtid`]. The relay and the replica
/// pipes speak to the primary's flavour only through this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// MariaDB: `last_gtid` tracking, `domain-server-seq` GTIDs, `@slave_connect_state`.
    MariaDb,
    /// MySQL: `session_track_gtids`, `uuid:n` and `uuid:tag:n` GTIDs, `COM_BINLOG_DUMP_GTID`.
    MySql,
}

/// The session's primary leg, for the queries the proxy sends on its own behalf between the
/// client's commands; their answers never reach the client.
pub trait OwnQueries {
    /// Sends `queries` in one write and reads each one's answer, in order.
    fn ask(&mut self, queries: &[&str]) -> impl Future<Output = Result<Vec<Answer>, Error>> + Send;
}

/// The answer to a query the proxy sent on its own behalf: the first row, or the error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The first row's values (`None` for NULL); empty if there was no row.
    pub row: Vec<Option<Vec<u8>>>,
    /// The ERR the query got, if it failed (`code message`).
    pub error: Option<String>,
    /// Its error code.
    pub code: Option<u16>,
}

/// What a session's tracker keeps whatever the flavour.
#[derive(Debug)]
struct Common {
    context: TrackerContext,
    /// What the client may see of the tracking data.
    filter: TrackingFilter,
    /// The primary is known to report this session's commits (MySQL: it was asked to).
    active: bool,
    /// `COM_RESET_CONNECTION` put every tracker back to the server's defaults.
    reset: bool,
    /// The quorum the session asked for (`@strongsync_quorum`), as last read; `None`: it did
    /// not ask (or asked for something that is not a count).
    quorum: Option<usize>,
    /// `quorum` changed since the session last took it in ([`Tracker::quorum_change`]).
    quorum_changed: bool,
    /// Set up from the primary's defaults, with no statement of strongsync's (see
    /// [`learnt`]); `None`: set up with statements.
    defaults: Option<learnt::FromDefaults>,
}

/// A session's GTID tracking on the primary leg, as its flavour does it.
#[derive(Debug)]
pub enum Tracker {
    /// See [`mariadb`].
    MariaDb(mariadb::Tracker),
    /// See [`mysql`].
    MySql(mysql::Tracker),
}

/// What a session's tracker is given.
#[derive(Clone)]
pub struct TrackerContext {
    /// The primary's id for the session's connection.
    pub connection_id: u32,
    /// The client negotiated session tracking: it may see tracker data it asked for.
    pub client_tracks: bool,
    /// The primary leg negotiated session tracking (the proxy asks; old servers lack it).
    pub primary_tracks: bool,
    /// Follow the transaction's state for the snapshot cover: a probe is configured (the read
    /// barrier may come on) and the client reads result sets ending in OK packets.
    pub snapshot_vars: bool,
    /// Counts checks, restorations and refused session quorums.
    pub metrics: Arc<Metrics>,
    /// What the tracker reads of the proxy's state as it runs.
    pub proxy: Arc<dyn ProxyState>,
}

/// What a tracker reads of the proxy's state as it runs: strong sync provides it, and the
/// flavour sees nothing else of strong sync.
pub trait ProxyState: Send + Sync {
    /// Under `visibility = "snapshot"`: a transaction's snapshot is followed.
    fn snapshot_reads(&self) -> bool;
    /// The primary records transactions without a GTID: no response's commits can be named.
    fn commits_untracked(&self) -> bool;
    /// What the watch of the primary last found of its session-tracking defaults.
    fn session_defaults(&self) -> &SessionDefaults;
}

/// Why a response is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckReason {
    /// Its state block says more than a bare report of the session's commit.
    StateChange,
    /// A legacy EOF flagged a change without saying what.
    LegacyEof,
    /// The proxy's tracking is not known to be on.
    Untracked,
    /// The session's next commit may not be reported (it switched domain or server id, or
    /// forced a sequence number).
    DomainSwitch,
    /// The statement names `@strongsync_quorum`.
    SessionQuorum,
    /// The primary records transactions without a GTID (MySQL `gtid_mode` not `ON`): what a
    /// response committed cannot be named, and is bounded without asking.
    GtidModeOff,
}

/// What one OK packet told the tracker.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OkNews {
    /// Commits it reported.
    pub committed: SmallVec<[Gtid; 1]>,
    /// The session must be checked once the response is over.
    pub check: Option<CheckReason>,
}

/// What a check learnt.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// A commit the response did not report (it is waited for like one it did).
    pub committed: Option<Gtid>,
    /// What it could not learn, if anything.
    pub unlearnt: Option<Unlearnt>,
}

/// What a check could not learn, and what then becomes of what the response holds back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlearnt {
    /// It is bounded by the primary's binlog position, read on strongsync's own connection, or
    /// released as unresolved for this reason where that fails.
    Bound(Unresolved),
    /// It is released as unresolved for this reason: nothing can bound it.
    Unresolved(Unresolved),
}

/// What the connection of a replica asking for the binlog has set up, read just before its dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpSetup {
    /// The GTIDs the primary was told the replica has.
    pub connect_state: GtidPosition,
}

// === impl Flavour ===

impl Flavour {
    /// The flavour of the server that sent `greeting`.
    pub fn of(greeting: &ServerGreeting<'_>) -> Flavour {
        if greeting.is_mariadb() {
            Flavour::MariaDb
        } else {
            Flavour::MySql
        }
    }

    /// A session's tracker.
    pub fn tracker(self, context: TrackerContext) -> Tracker {
        match self {
            Flavour::MariaDb => Tracker::MariaDb(mariadb::Tracker::new(context)),
            Flavour::MySql => Tracker::MySql(mysql::Tracker::new(context)),
        }
    }

    /// The queries whose answer is the primary's binlog position, read after a response
    /// arrived: it bounds everything the response may have committed or revealed. The first
    /// is asked; a later one only of a primary that does not know the one before (MySQL 8.0
    /// has no `SHOW BINARY LOG STATUS`).
    pub fn bound_queries(self) -> &'static [&'static str] {
        match self {
            Flavour::MariaDb => mariadb::BOUND_QUERIES,
            Flavour::MySql => mysql::BOUND_QUERIES,
        }
    }

    /// Whether the bound query goes as a prepared statement (prepared once per connection, so
    /// that each reading skips the primary's parser: under `visibility = "quorum"` every read
    /// waits for one). MariaDB's is a `SELECT`; MySQL's is a `SHOW` statement, sent as text.
    pub fn bound_is_prepared(self) -> bool {
        matches!(self, Flavour::MariaDb)
    }

    /// The position [`bound_queries`](Self::bound_queries) answered, from its row (`None` for
    /// NULL). MariaDB's is a GTID position; MySQL's a binlog position (see
    /// [`strongsync_proto::gtid::Domain::Binlog`]).
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] if it is not a position.
    pub fn parse_bound(self, row: &[Option<Vec<u8>>]) -> Result<GtidPosition, ProtoError> {
        match self {
            Flavour::MariaDb => GtidPosition::parse(
                row.first()
                    .cloned()
                    .flatten()
                    .unwrap_or_default()
                    .as_slice(),
            ),
            Flavour::MySql => mysql::parse_bound(row),
        }
    }

    /// Reads a GTID position as this flavour writes one.
    ///
    /// # Errors
    /// What the flavour's parser raises.
    pub fn parse_position(self, text: &str) -> Result<GtidPosition, ProtoError> {
        match self {
            Flavour::MariaDb => GtidPosition::parse(text.as_bytes()),
            Flavour::MySql => GtidPosition::parse_mysql(text),
        }
    }

    /// The query a replica's connection is asked just before its dump request goes to the
    /// primary (see [`dump_setup`](Self::dump_setup)).
    pub fn dump_query(self) -> &'static str {
        match self {
            Flavour::MariaDb => mariadb::DUMP_QUERY,
            Flavour::MySql => mysql::DUMP_QUERY,
        }
    }

    /// What a replica's dump request (`dump`, its payload) and the answer to
    /// [`dump_query`](Self::dump_query) on its connection say the dump will start from.
    ///
    /// # Errors
    /// [`ReplicaSetupError`] if the dump must not go to the primary.
    pub fn dump_setup(self, dump: &[u8], answer: &Answer) -> Result<DumpSetup, ReplicaSetupError> {
        match self {
            Flavour::MariaDb => mariadb::dump_setup(answer),
            Flavour::MySql => mysql::dump_setup(dump, answer),
        }
    }
}

// === impl Tracker ===

impl Tracker {
    /// Makes the primary report this session's commits and state changes (after a login, a
    /// reset or a change of user, before the client's next command).
    ///
    /// # Errors
    /// The primary leg failed.
    pub async fn set_up(&mut self, primary: &mut impl OwnQueries) -> Result<(), Error> {
        match self {
            Tracker::MariaDb(t) => t.set_up(primary).await,
            Tracker::MySql(t) => t.set_up(primary).await,
        }
    }

    /// Notes a command before it goes to the primary; says why its response must be checked,
    /// if it must whatever the response says.
    pub fn note_command(&mut self, payload: &[u8]) -> Option<CheckReason> {
        match self {
            Tracker::MariaDb(t) => t.note_command(payload),
            Tracker::MySql(t) => t.note_command(payload),
        }
    }

    /// Whether the command just relayed reset the session's trackers (`COM_RESET_CONNECTION`):
    /// then they are set up again. Asked once per command.
    pub fn take_reset(&mut self) -> bool {
        std::mem::take(&mut self.common_mut().reset)
    }

    /// Whether the command just relayed reset the session's trackers, without taking the
    /// news (see [`Tracker::take_reset`]).
    pub fn reset_pending(&self) -> bool {
        self.common().reset
    }

    /// Whether the session's commits are learnt from what the primary's defaults give every
    /// session: strongsync changed nothing on its connection, so any connection of the same
    /// login tracks it alike.
    pub fn tracks_from_defaults(&self) -> bool {
        self.common().defaults.is_some()
    }

    /// Why every response must be checked now, if it must.
    pub fn checks_every_response(&self) -> Option<CheckReason> {
        match self {
            Tracker::MariaDb(t) => t.checks_every_response(),
            Tracker::MySql(t) => t.checks_every_response(),
        }
    }

    /// Takes in an OK packet of a response: the commits it reports and whether it may hide
    /// something that needs a check.
    pub fn on_ok(&mut self, ok: &OkPacket<'_>) -> OkNews {
        match self {
            Tracker::MariaDb(t) => t.on_ok(ok),
            Tracker::MySql(t) => t.on_ok(ok),
        }
    }

    /// Checks the session after a response that may have changed its tracking or committed
    /// unreported, and puts the proxy's tracking back if the client took it away.
    ///
    /// # Errors
    /// The primary leg failed.
    pub async fn check(
        &mut self,
        reason: CheckReason,
        primary: &mut impl OwnQueries,
    ) -> Result<Checked, Error> {
        match self {
            Tracker::MariaDb(t) => t.check(reason, primary).await,
            Tracker::MySql(t) => t.check(reason, primary).await,
        }
    }

    /// What the client may see of the tracker data.
    pub fn filter(&self) -> TrackingFilter {
        self.common().filter
    }

    /// The quorum the session asked for (`@strongsync_quorum`), as last read.
    pub fn quorum(&self) -> Option<usize> {
        self.common().quorum
    }

    /// The quorum the session asked for, once after each change (`Some(None)`: it no longer
    /// asks).
    pub fn quorum_change(&mut self) -> Option<Option<usize>> {
        let common = self.common_mut();
        std::mem::take(&mut common.quorum_changed).then_some(common.quorum)
    }

    /// Whether the session's next transaction started with a consistent snapshot reads only
    /// that snapshot (see [`crate::config::Visibility::Snapshot`]).
    pub fn snapshot_ready(&self) -> bool {
        match self {
            Tracker::MariaDb(t) => t.snapshot_ready(),
            Tracker::MySql(_) => false,
        }
    }
}

impl Tracker {
    fn common(&self) -> &Common {
        match self {
            Tracker::MariaDb(t) => &t.common,
            Tracker::MySql(t) => &t.common,
        }
    }

    fn common_mut(&mut self) -> &mut Common {
        match self {
            Tracker::MariaDb(t) => &mut t.common,
            Tracker::MySql(t) => &mut t.common,
        }
    }
}

// === impl Common ===

impl Common {
    fn new(context: TrackerContext) -> Self {
        Common {
            filter: TrackingFilter {
                client_tracks: context.client_tracks,
                ..TrackingFilter::default()
            },
            context,
            active: false,
            reset: false,
            quorum: None,
            quorum_changed: false,
            defaults: None,
        }
    }

    /// Takes in the quorum the session asks for. A value that is not a count is taken as no
    /// ask (the configured quorum), and counted, so that an operator sees sessions asking for
    /// what they do not get; the session bounds a count by the settings.
    fn take_quorum(&mut self, asked: &AskedQuorum) {
        let quorum = match asked {
            AskedQuorum::Unset => None,
            AskedQuorum::Count(n) => Some(*n),
            AskedQuorum::Invalid(value) => {
                debug!(connection_id = self.context.connection_id, %value, "@strongsync_quorum is not a count: the configured quorum applies");
                self.context.metrics.session_quorum_refused("not_a_count");
                None
            }
        };
        if quorum != self.quorum {
            self.quorum = quorum;
            self.quorum_changed = true;
        }
    }

    /// Runs `queries` of strongsync's own on the session's connection, counted for `reason`
    /// (see [`crate::metrics::SESSION_STATEMENT_REASONS`]).
    async fn ask(
        &self,
        primary: &mut impl OwnQueries,
        reason: &'static str,
        queries: &[&str],
    ) -> Result<Vec<Answer>, Error> {
        self.context
            .metrics
            .session_statements_ran(reason, queries.len());
        primary.ask(queries).await
    }

    /// Starts a set-up: nothing is tracked until it works, and unless the proxy tracks
    /// transactions itself, whatever the client asks for of them is its own, and passes. False
    /// if the primary offers no session tracking: every response is then checked.
    fn begin_set_up(&mut self) -> bool {
        self.reset = false;
        self.active = false;
        self.filter.keep_transaction_state = true;
        self.filter.keep_transaction_characteristics = true;
        if !self.context.primary_tracks {
            warn!("primary does not offer session tracking: every response is checked with a query of its own");
        }
        self.context.primary_tracks
    }

    /// Notes a command that resets the session's trackers behind the proxy's back.
    fn note_reset(&mut self, payload: &[u8]) {
        if payload.first() == Some(&COM_RESET_CONNECTION) {
            self.reset = true;
        }
    }
}

// === impl Answer ===

impl Answer {
    /// The answers to `N` queries sent together, in order (an empty one for any that did not
    /// come: [`OwnQueries::ask`] reads one per query).
    pub fn each<const N: usize>(answers: Vec<Answer>) -> [Answer; N] {
        let mut answers = answers.into_iter();
        [(); N].map(|()| answers.next().unwrap_or_default())
    }

    /// The first value of the first row (empty for NULL or no row).
    pub fn first_value(self) -> Vec<u8> {
        self.row.into_iter().next().flatten().unwrap_or_default()
    }

    /// Value `i` of the first row, if it is there and not NULL.
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        self.row.get(i)?.as_deref()
    }
}

// === impl CheckReason ===

impl CheckReason {
    /// Label for the metric.
    pub fn label(self) -> &'static str {
        match self {
            CheckReason::StateChange => "state_change",
            CheckReason::LegacyEof => "legacy_eof",
            CheckReason::Untracked => "untracked",
            CheckReason::DomainSwitch => "domain_switch",
            CheckReason::SessionQuorum => "session_quorum",
            CheckReason::GtidModeOff => "gtid_mode_off",
        }
    }

    /// Label of `strongsync_session_statements_total` for the check's statement.
    fn statement_label(self) -> &'static str {
        match self {
            CheckReason::SessionQuorum => "session_quorum",
            _ => "check",
        }
    }
}

impl std::fmt::Debug for TrackerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackerContext")
            .field("connection_id", &self.connection_id)
            .field("client_tracks", &self.client_tracks)
            .field("primary_tracks", &self.primary_tracks)
            .field("snapshot_vars", &self.snapshot_vars)
            .finish_non_exhaustive()
    }
}

/// True if a `session_track_system_variables` value includes `name` (or everything).
fn tracks(list: &[u8], name: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .any(|v| v == b"*" || v.eq_ignore_ascii_case(name))
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
