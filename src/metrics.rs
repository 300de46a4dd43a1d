//! The proxy's Prometheus metrics: one struct, its own registry, handed to the parts that
//! record into it. Gauges that describe strong sync's state are refreshed from
//! [`Durability::status`](crate::durability::Durability::status) when scraped.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus::{
    Counter, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::config::Visibility;
use crate::durability::{DurabilityStatus, Outcome, State, WaitObserver, OUTCOMES};
use crate::error::MALFORMED_KINDS;

/// Buckets for waits from a fraction of a millisecond to past the default 10 s ACK timeout.
const WAIT_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Why a session keeps its own connection to the primary under `[sharing]` (labels of
/// `strongsync_sessions_pinned`).
pub const PIN_REASONS: [&str; 8] = [
    "transaction",
    "session_state",
    "prepared_statement",
    "lock",
    "last_statement",
    "connection_id",
    "command",
    "tracking",
];

/// Why a session is checked after a response (labels of `strongsync_tracking_checks_total`).
pub const TRACKING_CHECK_REASONS: [&str; 6] = [
    "state_change",
    "legacy_eof",
    "untracked",
    "domain_switch",
    "session_quorum",
    "gtid_mode_off",
];

/// Why strongsync ran a statement of its own on a client's connection (labels of
/// `strongsync_session_statements_total`): setting up tracking (at login, after a reset or a
/// change of user), checking the session after a response, reading the quorum the session
/// asked for, putting tracking back, reading a replica's dump settings.
pub const SESSION_STATEMENT_REASONS: [&str; 5] = [
    "setup",
    "check",
    "session_quorum",
    "restore",
    "replica_dump",
];

/// Why a session's own quorum was not taken as it asked (labels of
/// `strongsync_session_quorum_refused_total`).
pub const SESSION_QUORUM_REFUSALS: [&str; 3] = ["not_a_count", "below_floor", "above_max"];

/// Why an admin call was refused (labels of `strongsync_admin_refused_total`).
pub const ADMIN_REFUSALS: [&str; 5] = [
    "no_token_configured",
    "missing_token",
    "wrong_token",
    "malformed",
    "too_many_connections",
];

/// The highest quorum there is (settings bound quorums to it).
const MAX_QUORUM: usize = 64;

/// A kind of metric family: how one is made and what the docs call it.
pub trait Family: prometheus::core::Collector + Clone + 'static {
    /// `counter`, `gauge` or `histogram`.
    const KIND: &'static str;

    /// A family called `name`, described by `help`, with series by `labels`.
    ///
    /// # Panics
    /// If `name` or a label is not a valid Prometheus name (the definitions below are).
    fn make(name: &str, help: &str, labels: &[&str]) -> Self;
}

/// One metric family, as the docs describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyInfo {
    /// Its name (`strongsync_…`).
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it measures: its help text, which `/metrics` shows too.
    pub help: String,
}

/// Declares every metric family once: its field, type, name, labels and help (the doc comment),
/// from which come the struct, its registration and the docs' table of metrics; then the
/// fields derived from them (series looked up once for the hot paths).
macro_rules! metrics {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                pub $field:ident: $ty:ty = $metric:literal [$($label:literal),*],
            )*
        }
        derived {
            $(
                $(#[doc = $ddoc:literal])*
                $dvis:vis $dfield:ident: $dty:ty = $dmake:expr,
            )*
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            registry: Registry,
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[doc = $ddoc])* $dvis $dfield: $dty, )*
        }

        impl $name {
            /// All metrics, registered in a registry of their own.
            ///
            /// # Panics
            /// Never in practice: the names above are valid and registered once each.
            pub fn new() -> Self {
                let registry = Registry::new();
                $(
                    let $field = <$ty as Family>::make(
                        $metric,
                        &words(concat!($($doc, " "),*)),
                        &[$($label),*],
                    );
                    registry
                        .register(Box::new($field.clone()))
                        .expect("each metric is registered once");
                )*
                $( let $dfield: $dty = $dmake; )*
                let metrics = $name { registry, $($field,)* $($dfield,)* };
                metrics.preset();
                metrics
            }

            /// Every metric family, as the docs' table of metrics describes it.
            pub fn families() -> Vec<FamilyInfo> {
                vec![$(
                    FamilyInfo {
                        name: $metric,
                        kind: <$ty as Family>::KIND,
                        labels: &[$($label),*],
                        help: words(concat!($($doc, " "),*)),
                    },
                )*]
            }
        }
    };
}

metrics! {
    /// Every metric the proxy exports.
    pub struct Metrics {
        /// Time a commit's OK was held (parked until released), by outcome.
        pub commit_wait: HistogramVec = "strongsync_commit_wait_seconds" ["outcome"],
        /// Commits released to their client, by outcome: `quorum` (held by its quorum in time),
        /// `timeout` (the policy released it), `degraded` (released at once while DEGRADED),
        /// `unresolved` (what it committed could be neither learnt nor bounded), `client_gone`
        /// (the client left while parked), `shutdown`, `none_asked` (its session asked for no
        /// quorum), `fenced` (the primary was fenced: the client got the fence's error),
        /// `not_leading` (this instance did not hold its cluster's lease: the client got an
        /// error).
        pub commits_released: IntCounterVec = "strongsync_commits_released_total" ["outcome"],
        /// Sessions whose commit OK is held right now.
        pub parked: IntGauge = "strongsync_parked_sessions" [],
        /// Time the read barrier (visibility = quorum) held a response until the quorum held
        /// the primary's binlog position read after it, by outcome.
        pub read_wait: HistogramVec = "strongsync_read_wait_seconds" ["outcome"],
        /// Responses the read barrier (visibility = quorum) released, by outcome (as for
        /// commits; `degraded` also counts those let go by a reload to visibility = commit).
        pub reads_released: IntCounterVec = "strongsync_reads_released_total" ["outcome"],
        /// Responses the read barrier (visibility = quorum) holds right now.
        pub reads_held: IntGauge = "strongsync_reads_held" [],
        /// Responses the read barrier (visibility = quorum) let go without a bound of their
        /// own: their transaction read only its consistent snapshot, which the quorum held.
        pub reads_in_snapshot: IntCounter = "strongsync_reads_in_snapshot_total" [],
        /// 1 when responses wait until the quorum holds what they may reveal (visibility =
        /// quorum).
        pub visibility_quorum: IntGauge = "strongsync_visibility_quorum" [],
        /// Time from a transaction end sent to a replica (flagged for ACK: the last one of a
        /// batch, or a heartbeat asking for it) to the ACK that covers it.
        pub ack_latency: HistogramVec = "strongsync_replica_ack_latency_seconds" ["server_id"],
        /// Semisync ACKs received, by replica.
        pub acks: IntCounterVec = "strongsync_replica_acks_total" ["server_id"],
        /// Semisync replicas that must hold a transaction before its commit is acknowledged
        /// (the configured quorum).
        pub quorum: IntGauge = "strongsync_quorum" [],
        /// 1 if the proxy only relays (commits never wait for replicas), 0 otherwise.
        pub passthrough: IntGauge = "strongsync_passthrough" [],
        /// 1 for the current durability state (strong: commits wait for their quorum;
        /// degraded: they do not), 0 for the other.
        pub durability_state: IntGaugeVec = "strongsync_durability_state" ["state"],
        /// Durability state changes, by the state entered.
        pub durability_transitions: IntCounterVec = "strongsync_durability_transitions_total" ["to"],
        /// Seconds spent in the degraded state (brought up to date on scrape).
        pub degraded_seconds: Counter = "strongsync_degraded_seconds_total" [],
        /// Replicas replicating through the proxy, by kind (semisync counts towards the
        /// quorum; async does not).
        pub replicas_connected: IntGaugeVec = "strongsync_replicas_connected" ["kind"],
        /// Binlog file number (the name's numeric suffix) of each replica's ACKed
        /// position.
        pub replica_acked_file: IntGaugeVec = "strongsync_replica_acked_binlog_file" ["server_id"],
        /// Offset of each replica's ACKed position in that binlog file.
        pub replica_acked_offset: IntGaugeVec = "strongsync_replica_acked_binlog_offset" ["server_id"],
        /// Binlog bytes between a replica's ACKed position and the newest transaction
        /// relayed.
        pub replica_lag_bytes: IntGaugeVec = "strongsync_replica_lag_bytes" ["server_id"],
        /// Transactions relayed that a replica has not ACKed.
        pub replica_lag_transactions: IntGaugeVec = "strongsync_replica_lag_transactions" ["server_id"],
        /// Client connections (replicas included).
        pub client_connections: IntGauge = "strongsync_client_connections" [],
        /// Connections to the primary.
        pub primary_connections: IntGauge = "strongsync_primary_connections" [],
        /// 1 if the primary answered the last check (its greeting), 0 if not.
        pub primary_up: IntGauge = "strongsync_primary_up" [],
        /// Bytes relayed, by direction (client_to_primary, primary_to_client; replicas are
        /// clients).
        pub relayed_bytes: IntCounterVec = "strongsync_relayed_bytes_total" ["direction"],
        /// Input rejected as malformed, by kind (client_malformed_packet,
        /// client_out_of_sequence, client_packet_too_large, replica_malformed_ack,
        /// replica_ack_beyond_relayed, replica_unexpected_packet, primary_malformed_packet).
        pub malformed_input: IntCounterVec = "strongsync_malformed_input_total" ["kind"],
        /// Binlog dump requests refused (by the primary, or by the proxy before it):
        /// connections that asked to be replicas and do not count as ones.
        pub replica_dumps_refused: IntCounter = "strongsync_replica_dumps_refused_total" [],
        /// Sessions checked after a response that may have changed their GTID tracking or
        /// hidden a commit, by why (state_change, legacy_eof, untracked, domain_switch,
        /// session_quorum, gtid_mode_off).
        pub tracking_checks: IntCounterVec = "strongsync_tracking_checks_total" ["reason"],
        /// Checks that found a client had switched off the GTID tracking strongsync needs (it
        /// was switched back on).
        pub tracking_restored: IntCounter = "strongsync_tracking_restored_total" [],
        /// Sessions set up from the primary's defaults (no statement of strongsync's) whose
        /// responses are bounded by the primary's position from one of them on until a reset:
        /// a statement that may run stored code changed their state, or their tracking no
        /// longer holds what strongsync needs.
        pub sessions_untrusted: IntCounter = "strongsync_sessions_untrusted_total" [],
        /// Statements strongsync ran on clients' connections to the primary, each seen by the
        /// primary as the client's own, by why (setup, check, session_quorum, restore,
        /// replica_dump).
        pub session_statements: IntCounterVec = "strongsync_session_statements_total" ["reason"],
        /// Responses bounded by the primary's binlog position read on strongsync's own
        /// connection (the probe), by result (ok, failed): every response under visibility =
        /// quorum.
        pub probe_bounds: IntCounterVec = "strongsync_probe_bounds_total" ["result"],
        /// Commits released to their client, by the quorum they waited for (a session may ask
        /// for its own with @strongsync_quorum; 0: it asked for none).
        pub commits_by_quorum: IntCounterVec = "strongsync_commits_by_quorum_total" ["quorum"],
        /// Sessions' @strongsync_quorum not taken as asked, by why (not_a_count: the
        /// configured quorum applies; below_floor, above_max: bounded).
        pub session_quorum_refused: IntCounterVec = "strongsync_session_quorum_refused_total" ["why"],
        /// 1 while the connected semisync replicas cannot meet the quorum rule (count, zones,
        /// outside the primary's zone): commits cannot reach their quorum.
        pub quorum_unmet: IntGauge = "strongsync_quorum_unmet" [],
        /// Binlog bytes held back from replicas without semisync until the quorum holds them
        /// (async_replicas = after_quorum).
        pub async_held_bytes: IntGauge = "strongsync_async_held_bytes" [],
        /// Client connections (replicas' included) that logged in with the compressed protocol
        /// (CLIENT_COMPRESS, zlib).
        pub compressed_logins: IntCounter = "strongsync_compressed_logins_total" [],
        /// Logins that went over TLS, by leg: `client` (the client's or replica's connection
        /// to strongsync) and `primary` (strongsync's connection to the primary for it).
        pub tls_logins: IntCounterVec = "strongsync_tls_logins_total" ["leg"],
        /// Logins whose password strongsync did not pass on, by why: `clear_from_client` (in
        /// clear over plain TCP to strongsync), `clear_to_primary` (strongsync's connection to
        /// the primary is plain), `foreign_key` (encrypted with a key strongsync cannot read),
        /// `undecryptable`.
        pub passwords_refused: IntCounterVec = "strongsync_passwords_refused_total" ["why"],
        /// Passwords a client on a plain connection encrypted with strongsync's RSA key, handed
        /// to the primary in clear over strongsync's TLS (or its Unix socket).
        pub passwords_relayed_by_key: IntCounter = "strongsync_passwords_relayed_by_key_total" [],
        /// 1 while this instance leads its cluster (holds the etcd lease); always 0 without a
        /// `[cluster]`.
        pub leader: IntGauge = "strongsync_leader" [],
        /// 1 if this instance is one of a cluster (`[cluster]`), 0 if it runs alone.
        pub cluster_member: IntGauge = "strongsync_cluster_member" [],
        /// Renewals of the leader's lease, by result: `ok`, `failed` (no answer in time: the
        /// next one tries again while the deadline allows), `expired` (etcd had let it go).
        pub lease_renewals: IntCounterVec = "strongsync_lease_renewals_total" ["result"],
        /// 1 while strongsync has fenced its primary: nothing of it is relayed or
        /// acknowledged, and statements are refused, until it follows a new primary.
        pub fenced: IntGauge = "strongsync_fenced" [],
        /// The epoch: raised by every follow of a new primary.
        pub epoch: IntGauge = "strongsync_epoch" [],
        /// GTIDs committed on a fenced primary and never acknowledged (the tail), counted
        /// over every fence.
        pub tail_gtids: IntGauge = "strongsync_unacknowledged_tail_gtids" [],
        /// Admin calls refused, by why (no_token_configured, missing_token, wrong_token,
        /// malformed, too_many_connections): they changed nothing.
        pub admin_refused: IntCounterVec = "strongsync_admin_refused_total" ["why"],
        /// Follows of a new primary that lacked transactions of the watermark, made because the
        /// call said force.
        pub forced_follows: IntCounter = "strongsync_forced_follows_total" [],
        /// Client sessions ended because a follow retired the primary they were connected to
        /// (their next command got error 1927).
        pub sessions_retired: IntCounter = "strongsync_sessions_retired_total" [],
        /// ACKs and relayed-transaction reports of replica pipes whose epoch was over when they
        /// came, ignored (their positions are an old primary's).
        pub stale_replica_reports: IntCounter = "strongsync_stale_replica_reports_total" [],
        /// 1 while the primary records transactions without a GTID (MySQL with gtid_mode not
        /// ON): every response is bounded by the primary's binlog position.
        pub commits_untracked: IntGauge = "strongsync_commits_untracked" [],
        /// State file writes, by result (ok, failed).
        pub state_writes: IntCounterVec = "strongsync_state_file_writes_total" ["result"],
        /// Time one state file write took (written whole, synced, renamed, the directory
        /// synced): what the fence and a follow wait for, and how far behind the positions in
        /// the file may be beyond `failover.state_interval`.
        pub state_write: HistogramVec = "strongsync_state_file_write_seconds" [],
        /// Free connections to the primary in the pools of `[sharing]`.
        pub pool_idle: IntGauge = "strongsync_pool_idle_connections" [],
        /// Connections a session took from its pool for a statement, by whether it was the
        /// one it had last (`own`) or another (`other`).
        pub pool_checkouts: IntCounterVec = "strongsync_pool_checkouts_total" ["connection"],
        /// Time statements waited for a free connection of their pool (only those that
        /// waited).
        pub pool_wait: HistogramVec = "strongsync_pool_wait_seconds" [],
        /// Statements that found no free connection within `sharing.max_wait` (error 1040).
        pub pool_wait_timeouts: IntCounter = "strongsync_pool_wait_timeouts_total" [],
        /// Connections to the primary the pools closed, by why: `surplus` (given back while
        /// `sharing.pool_size` were free, or a reload lowered it), `retired` (their epoch
        /// ended), `closed_by_primary` (the primary ended it while it was free), `unused` (the
        /// last session sharing its pool ended).
        pub pool_closed: IntCounterVec = "strongsync_pool_closed_total" ["why"],
        /// Prepared statements prepared again, by strongsync, on the shared connection a
        /// session's statement command ran on (it was prepared on another).
        pub statements_reprepared: IntCounter = "strongsync_pool_statements_reprepared_total" [],
        /// Prepared statements strongsync closed on a shared connection: the least recently
        /// used, past `sharing.statements_per_connection`, or one the connection had twice.
        pub statements_closed: IntCounter = "strongsync_pool_statements_closed_total" [],
        /// Sessions that keep their own connection to the primary under `[sharing]`, by why
        /// (transaction, session_state, prepared_statement, lock, last_statement,
        /// connection_id, command, tracking).
        pub sessions_pinned: IntGaugeVec = "strongsync_sessions_pinned" ["why"],
    }
    derived {
        /// `commit_wait` and `commits_released` of each outcome, in [`OUTCOMES`] order, looked
        /// up once (every commit records into them).
        by_outcome: Vec<(Histogram, IntCounter)> = per_outcome(&commit_wait, &commits_released),
        /// `read_wait` and `reads_released` of each outcome, in [`OUTCOMES`] order.
        reads_by_outcome: Vec<(Histogram, IntCounter)> = per_outcome(&read_wait, &reads_released),
        /// `relayed_bytes` towards the primary, looked up once (sessions add to it per command).
        pub relayed_to_primary: IntCounter = relayed_bytes.with_label_values(&["client_to_primary"]),
        /// `relayed_bytes` towards clients and replicas.
        pub relayed_to_client: IntCounter = relayed_bytes.with_label_values(&["primary_to_client"]),
        /// `commits_by_quorum` per quorum, looked up once each.
        by_quorum: Vec<OnceLock<IntCounter>> = (0..=MAX_QUORUM).map(|_| OnceLock::new()).collect(),
        /// DEGRADED time already counted into `degraded_seconds` (it is refreshed on scrape).
        degraded_counted: Mutex<Duration> = Mutex::new(Duration::ZERO),
    }
}

// === impl Metrics ===

impl Metrics {
    /// Series that exist from the start, so alerts and rates see zeros rather than nothing.
    fn preset(&self) {
        for kind in MALFORMED_KINDS {
            self.malformed_input.with_label_values(&[kind]);
        }
        for kind in ["semisync", "async"] {
            self.replicas_connected.with_label_values(&[kind]);
        }
        for to in ["strong", "degraded"] {
            self.durability_transitions.with_label_values(&[to]);
        }
        for reason in TRACKING_CHECK_REASONS {
            self.tracking_checks.with_label_values(&[reason]);
        }
        for reason in SESSION_STATEMENT_REASONS {
            self.session_statements.with_label_values(&[reason]);
        }
        for result in ["ok", "failed"] {
            self.probe_bounds.with_label_values(&[result]);
        }
        for why in SESSION_QUORUM_REFUSALS {
            self.session_quorum_refused.with_label_values(&[why]);
        }
        for why in ADMIN_REFUSALS {
            self.admin_refused.with_label_values(&[why]);
        }
        for result in ["ok", "failed"] {
            self.state_writes.with_label_values(&[result]);
        }
        for connection in ["own", "other"] {
            self.pool_checkouts.with_label_values(&[connection]);
        }
        for why in ["surplus", "retired", "closed_by_primary", "unused"] {
            self.pool_closed.with_label_values(&[why]);
        }
        for why in PIN_REASONS {
            self.sessions_pinned.with_label_values(&[why]);
        }
        for result in ["ok", "failed", "expired"] {
            self.lease_renewals.with_label_values(&[result]);
        }
        for leg in ["client", "primary"] {
            self.tls_logins.with_label_values(&[leg]);
        }
        for why in [
            "clear_from_client",
            "clear_to_primary",
            "foreign_key",
            "undecryptable",
        ] {
            self.passwords_refused.with_label_values(&[why]);
        }
        // Histograms without labels: their buckets from the start too.
        self.state_write.with_label_values::<&str>(&[]);
        self.pool_wait.with_label_values::<&str>(&[]);
    }

    /// Brings the state gauges up to date with strong sync's status.
    pub fn refresh(&self, status: &DurabilityStatus) {
        self.parked.set(status.parked as i64);
        self.reads_held.set(status.reads_parked as i64);
        self.visibility_quorum
            .set(i64::from(status.visibility != Visibility::Commit));
        self.quorum.set(status.quorum as i64);
        self.quorum_unmet.set(i64::from(
            status.quorum_unmet.is_some() && !status.passthrough,
        ));
        self.passthrough.set(i64::from(status.passthrough));
        let degraded = status.state == State::Degraded;
        self.durability_state
            .with_label_values(&["strong"])
            .set(i64::from(!degraded));
        self.durability_state
            .with_label_values(&["degraded"])
            .set(i64::from(degraded));
        {
            let mut counted = self
                .degraded_counted
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let new = status.degraded_total.saturating_sub(*counted);
            self.degraded_seconds.inc_by(new.as_secs_f64());
            *counted = (*counted).max(status.degraded_total);
        }
        self.commits_untracked
            .set(i64::from(status.commits_untracked.is_some()));
        let stale = status.stale_reports;
        self.stale_replica_reports
            .inc_by(stale.saturating_sub(self.stale_replica_reports.get()));
        let semisync = status.replicas.iter().filter(|r| r.semisync).count();
        self.replicas_connected
            .with_label_values(&["semisync"])
            .set(semisync as i64);
        self.replicas_connected
            .with_label_values(&["async"])
            .set((status.replicas.len() - semisync) as i64);
        for vec in [
            &self.replica_acked_file,
            &self.replica_acked_offset,
            &self.replica_lag_bytes,
            &self.replica_lag_transactions,
        ] {
            vec.reset(); // replicas that left disappear
        }
        for r in &status.replicas {
            let id = r.server_id.to_string();
            if let Some(acked) = r.acked {
                self.replica_acked_file
                    .with_label_values(&[&id])
                    .set(acked.file_seq as i64);
                self.replica_acked_offset
                    .with_label_values(&[&id])
                    .set(acked.offset as i64);
            }
            if let Some(lag) = r.lag_bytes {
                self.replica_lag_bytes
                    .with_label_values(&[&id])
                    .set(lag as i64);
            }
            if let Some(lag) = r.lag_transactions {
                self.replica_lag_transactions
                    .with_label_values(&[&id])
                    .set(lag as i64);
            }
        }
    }

    /// The ACK latency histogram of one replica (kept by its pipe, so an ACK does not look up
    /// labels).
    pub fn ack_latency_of(&self, server_id: u32) -> (Histogram, IntCounter) {
        let id = server_id.to_string();
        (
            self.ack_latency.with_label_values(&[&id]),
            self.acks.with_label_values(&[&id]),
        )
    }

    /// Counts a session checked after a response, for `reason` (one of
    /// [`TRACKING_CHECK_REASONS`]).
    pub fn tracking_checked(&self, reason: &str) {
        self.tracking_checks.with_label_values(&[reason]).inc();
    }

    /// Counts `n` statements of strongsync's own on a client's connection, for `reason` (one
    /// of [`SESSION_STATEMENT_REASONS`]).
    pub fn session_statements_ran(&self, reason: &str, n: usize) {
        self.session_statements
            .with_label_values(&[reason])
            .inc_by(n as u64);
    }

    /// Counts a session's `@strongsync_quorum` not taken as asked, for `why` (one of
    /// [`SESSION_QUORUM_REFUSALS`]).
    pub fn session_quorum_refused(&self, why: &str) {
        self.session_quorum_refused.with_label_values(&[why]).inc();
    }

    /// Counts input rejected as malformed.
    pub fn malformed(&self, kind: &str) {
        self.malformed_input.with_label_values(&[kind]).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitObserver for Metrics {
    fn released(&self, outcome: Outcome, waited: Duration) {
        observe(&self.by_outcome, outcome, waited);
    }

    fn read_released(&self, outcome: Outcome, waited: Duration) {
        observe(&self.reads_by_outcome, outcome, waited);
    }

    fn read_in_snapshot(&self) {
        self.reads_in_snapshot.inc();
    }

    fn commit_quorum(&self, quorum: usize) {
        if let Some(series) = self.by_quorum.get(quorum) {
            series
                .get_or_init(|| {
                    self.commits_by_quorum
                        .with_label_values(&[&quorum.to_string()])
                })
                .inc();
        }
    }

    fn state_changed(&self, to: State) {
        let label = match to {
            State::Strong => "strong",
            State::Degraded => "degraded",
        };
        self.durability_transitions
            .with_label_values(&[label])
            .inc();
    }
}

/// The series of `wait` and `released` for each outcome, in [`OUTCOMES`] order.
fn per_outcome(wait: &HistogramVec, released: &IntCounterVec) -> Vec<(Histogram, IntCounter)> {
    OUTCOMES
        .iter()
        .map(|o| {
            (
                wait.with_label_values(&[o.label()]),
                released.with_label_values(&[o.label()]),
            )
        })
        .collect()
}

fn observe(series: &[(Histogram, IntCounter)], outcome: Outcome, waited: Duration) {
    if let Some((wait, released)) = series.get(outcome.index()) {
        wait.observe(waited.as_secs_f64());
        released.inc();
    }
}

/// A doc comment as one line of words.
fn words(doc: &str) -> String {
    doc.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The Markdown table of every metric family, as `docs/operations.md` shows it.
pub fn reference_table() -> String {
    let mut table = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for family in Metrics::families() {
        let labels: Vec<String> = family.labels.iter().map(|l| format!("`{l}`")).collect();
        table.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            family.name,
            family.kind,
            labels.join(", "),
            family.help.replace('|', "\\|")
        ));
    }
    table
}

impl Family for IntCounter {
    const KIND: &'static str = "counter";

    fn make(name: &str, help: &str, _labels: &[&str]) -> Self {
        IntCounter::new(name, help).expect("valid metric")
    }
}

impl Family for Counter {
    const KIND: &'static str = "counter";

    fn make(name: &str, help: &str, _labels: &[&str]) -> Self {
        Counter::new(name, help).expect("valid metric")
    }
}

impl Family for IntCounterVec {
    const KIND: &'static str = "counter";

    fn make(name: &str, help: &str, labels: &[&str]) -> Self {
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
    }
}

impl Family for IntGauge {
    const KIND: &'static str = "gauge";

    fn make(name: &str, help: &str, _labels: &[&str]) -> Self {
        IntGauge::new(name, help).expect("valid metric")
    }
}

impl Family for IntGaugeVec {
    const KIND: &'static str = "gauge";

    fn make(name: &str, help: &str, labels: &[&str]) -> Self {
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
    }
}

/// Histograms of waits, from a fraction of a millisecond to past the default ACK timeout.
impl Family for HistogramVec {
    const KIND: &'static str = "histogram";

    fn make(name: &str, help: &str, labels: &[&str]) -> Self {
        HistogramVec::new(
            HistogramOpts::new(name, help).buckets(WAIT_BUCKETS.to_vec()),
            labels,
        )
        .expect("valid metric")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exported_with_help_and_the_strongsync_prefix() {
        let m = Metrics::new();
        m.released(Outcome::Quorum, Duration::from_millis(3));
        let text = m.encode();
        assert!(
            text.contains(
                "strongsync_commit_wait_seconds_bucket{outcome=\"quorum\",le=\"0.005\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("strongsync_commits_released_total{outcome=\"quorum\"} 1"));
        for line in text.lines().filter(|l| l.starts_with("# HELP")) {
            let name = line.split_whitespace().nth(2).unwrap();
            assert!(name.starts_with("strongsync_"), "{line}");
            assert!(line.split_whitespace().count() > 3, "help text for {name}");
        }
    }
}
