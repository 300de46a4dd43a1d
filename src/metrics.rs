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

/// Why a session is checked after a response (labels of `strongsync_tracking_checks_total`).
pub const TRACKING_CHECK_REASONS: [&str; 5] = [
    "state_change",
    "legacy_eof",
    "untracked",
    "domain_switch",
    "session_quorum",
];

/// Why a session's own quorum was not taken as it asked (labels of
/// `strongsync_session_quorum_refused_total`).
pub const SESSION_QUORUM_REFUSALS: [&str; 3] = ["not_a_count", "below_floor", "above_max"];

/// The highest quorum there is (settings bound quorums to it).
const MAX_QUORUM: usize = 64;

/// Every metric the proxy exports.
pub struct Metrics {
    registry: Registry,
    /// Histogram: seconds a commit was parked, by outcome.
    pub commit_wait: HistogramVec,
    /// Counter: commits released, by outcome.
    pub commits_released: IntCounterVec,
    /// `commit_wait` and `commits_released` of each outcome, in [`OUTCOMES`] order, looked up
    /// once (every commit records into them).
    by_outcome: Vec<(Histogram, IntCounter)>,
    /// Gauge: commits parked now.
    pub parked: IntGauge,
    /// Histogram: seconds the read barrier held a response, by outcome.
    pub read_wait: HistogramVec,
    /// Counter: responses the read barrier released, by outcome.
    pub reads_released: IntCounterVec,
    /// `read_wait` and `reads_released` of each outcome, in [`OUTCOMES`] order.
    reads_by_outcome: Vec<(Histogram, IntCounter)>,
    /// Gauge: responses the read barrier holds now.
    pub reads_held: IntGauge,
    /// Responses that went without a bound of their own, their transaction's snapshot held.
    pub reads_in_snapshot: IntCounter,
    /// Gauge: 1 under `visibility = "quorum"` (the read barrier), else 0.
    pub visibility_quorum: IntGauge,
    /// Histogram: seconds from a flagged event sent to the ACK that covers it, by replica.
    pub ack_latency: HistogramVec,
    /// Counter: ACKs received, by replica.
    pub acks: IntCounterVec,
    /// Gauge: the configured quorum.
    pub quorum: IntGauge,
    /// Gauge: 1 when commits do not wait at all (passthrough).
    pub passthrough: IntGauge,
    /// Gauge: 1 for the current durability state, 0 for the other.
    pub durability_state: IntGaugeVec,
    /// Counter: durability state transitions, by the state entered.
    pub durability_transitions: IntCounterVec,
    /// Counter: seconds spent DEGRADED.
    pub degraded_seconds: Counter,
    /// Gauge: connected replicas, semisync or async.
    pub replicas_connected: IntGaugeVec,
    /// Gauge: per replica, the binlog file (sequence number) of its acknowledged position.
    pub replica_acked_file: IntGaugeVec,
    /// Gauge: per replica, the offset of its acknowledged position.
    pub replica_acked_offset: IntGaugeVec,
    /// Gauge: per replica, binlog bytes between its acknowledged position and the newest
    /// transaction relayed.
    pub replica_lag_bytes: IntGaugeVec,
    /// Gauge: per replica, transactions relayed but not acknowledged by it.
    pub replica_lag_transactions: IntGaugeVec,
    /// Gauge: client connections.
    pub client_connections: IntGauge,
    /// Gauge: connections to the primary.
    pub primary_connections: IntGauge,
    /// Gauge: 1 if the primary answered the last check.
    pub primary_up: IntGauge,
    /// Counter: bytes relayed, by direction.
    pub relayed_bytes: IntCounterVec,
    /// `relayed_bytes` towards the primary, looked up once (sessions add to it per command).
    pub relayed_to_primary: IntCounter,
    /// `relayed_bytes` towards clients and replicas.
    pub relayed_to_client: IntCounter,
    /// Counter: input rejected as malformed, by kind.
    pub malformed_input: IntCounterVec,
    /// Counter: binlog dump requests the primary (or the proxy) refused: connections that
    /// asked to be replicas and were not.
    pub replica_dumps_refused: IntCounter,
    /// Counter: sessions checked after a response (what they committed, how they track), by
    /// why.
    pub tracking_checks: IntCounterVec,
    /// Counter: checks that found a client had taken the proxy's tracking away (it was put
    /// back).
    pub tracking_restored: IntCounter,
    /// Counter: responses bounded by the probe (the primary's binlog position read on
    /// strongsync's own connection), by result (`ok`, `failed`).
    pub probe_bounds: IntCounterVec,
    /// Counter: commits released, by the quorum they waited for (0: their session asked for
    /// none).
    pub commits_by_quorum: IntCounterVec,
    /// `commits_by_quorum` per quorum, looked up once each.
    by_quorum: Vec<OnceLock<IntCounter>>,
    /// Counter: sessions' `@strongsync_quorum` not taken as asked, by why.
    pub session_quorum_refused: IntCounterVec,
    /// Gauge: 1 while the connected semisync replicas cannot meet the quorum rule.
    pub quorum_unmet: IntGauge,
    /// Gauge: bytes of the binlog held back from async replicas until the quorum holds them.
    pub async_held_bytes: IntGauge,
    /// Counter: client connections (replicas' included) that logged in with the compressed
    /// protocol.
    pub compressed_logins: IntCounter,
    /// DEGRADED time already counted into `degraded_seconds` (it is refreshed on scrape).
    degraded_counted: Mutex<Duration>,
}

// === impl Metrics ===

impl Metrics {
    /// All metrics, registered in a registry of their own.
    ///
    /// # Panics
    /// Never in practice: the names below are valid and registered once each.
    pub fn new() -> Self {
        let registry = Registry::new();
        let relayed_bytes = counter_vec(
            "strongsync_relayed_bytes_total",
            "Bytes relayed, by direction (client_to_primary, primary_to_client; replicas are clients).",
            &["direction"],
        );
        let commit_wait = histogram_vec(
            "strongsync_commit_wait_seconds",
            "Time a commit's OK was held (parked until released), by outcome.",
            &["outcome"],
            WAIT_BUCKETS,
        );
        let commits_released = counter_vec(
            "strongsync_commits_released_total",
            "Commits released to their client, by outcome (quorum, timeout, degraded, unresolved, client_gone, shutdown).",
            &["outcome"],
        );
        let read_wait = histogram_vec(
            "strongsync_read_wait_seconds",
            "Time the read barrier (visibility = quorum) held a response until the quorum held the primary's binlog position read after it, by outcome.",
            &["outcome"],
            WAIT_BUCKETS,
        );
        let reads_released = counter_vec(
            "strongsync_reads_released_total",
            "Responses the read barrier (visibility = quorum) released, by outcome (quorum, timeout, degraded, unresolved, client_gone, shutdown).",
            &["outcome"],
        );
        let by_outcome = per_outcome(&commit_wait, &commits_released);
        let reads_by_outcome = per_outcome(&read_wait, &reads_released);
        let m = Metrics {
            commit_wait,
            commits_released,
            by_outcome,
            read_wait,
            reads_released,
            reads_by_outcome,
            reads_in_snapshot: IntCounter::new(
                "strongsync_reads_in_snapshot_total",
                "Responses the read barrier (visibility = quorum) let go without a bound of their own: their transaction read only its consistent snapshot, which the quorum held.",
            )
            .expect("valid metric"),
            reads_held: gauge(
                "strongsync_reads_held",
                "Responses the read barrier (visibility = quorum) holds right now.",
            ),
            visibility_quorum: gauge(
                "strongsync_visibility_quorum",
                "1 when responses wait until the quorum holds what they may reveal (visibility = quorum).",
            ),
            relayed_to_primary: relayed_bytes.with_label_values(&["client_to_primary"]),
            relayed_to_client: relayed_bytes.with_label_values(&["primary_to_client"]),
            relayed_bytes,
            parked: gauge("strongsync_parked_sessions", "Sessions whose commit OK is held right now."),
            ack_latency: histogram_vec(
                "strongsync_replica_ack_latency_seconds",
                "Time from a transaction end sent to a replica (flagged for ACK) to the ACK that covers it.",
                &["server_id"],
                WAIT_BUCKETS,
            ),
            acks: counter_vec("strongsync_replica_acks_total", "Semisync ACKs received, by replica.", &["server_id"]),
            quorum: gauge(
                "strongsync_quorum",
                "Semisync replicas that must acknowledge a transaction before its commit is acknowledged (the configured quorum).",
            ),
            passthrough: gauge(
                "strongsync_passthrough",
                "1 if the proxy only relays (commits never wait for replicas), 0 otherwise.",
            ),
            durability_state: gauge_vec(
                "strongsync_durability_state",
                "1 for the current durability state (strong: commits wait for their quorum; degraded: they do not).",
                &["state"],
            ),
            durability_transitions: counter_vec(
                "strongsync_durability_transitions_total",
                "Durability state changes, by the state entered.",
                &["to"],
            ),
            degraded_seconds: Counter::new(
                "strongsync_degraded_seconds_total",
                "Seconds spent in the degraded state (brought up to date on scrape).",
            )
            .expect("valid metric"),
            replicas_connected: gauge_vec(
                "strongsync_replicas_connected",
                "Replicas replicating through the proxy, by kind (semisync counts towards the quorum).",
                &["kind"],
            ),
            replica_acked_file: gauge_vec(
                "strongsync_replica_acked_binlog_file",
                "Binlog file number (the name's numeric suffix) of each replica's acknowledged position.",
                &["server_id"],
            ),
            replica_acked_offset: gauge_vec(
                "strongsync_replica_acked_binlog_offset",
                "Offset of each replica's acknowledged position in that binlog file.",
                &["server_id"],
            ),
            replica_lag_bytes: gauge_vec(
                "strongsync_replica_lag_bytes",
                "Binlog bytes between a replica's acknowledged position and the newest transaction relayed.",
                &["server_id"],
            ),
            replica_lag_transactions: gauge_vec(
                "strongsync_replica_lag_transactions",
                "Transactions relayed that a replica has not acknowledged.",
                &["server_id"],
            ),
            client_connections: gauge("strongsync_client_connections", "Client connections (replicas included)."),
            primary_connections: gauge("strongsync_primary_connections", "Connections to the primary."),
            primary_up: gauge(
                "strongsync_primary_up",
                "1 if the primary answered the last check (its greeting), 0 if not.",
            ),
            malformed_input: counter_vec(
                "strongsync_malformed_input_total",
                "Input rejected as malformed, by kind.",
                &["kind"],
            ),
            replica_dumps_refused: IntCounter::new(
                "strongsync_replica_dumps_refused_total",
                "Binlog dump requests refused (by the primary, or by the proxy before it): connections that asked to be replicas and do not count as ones.",
            )
            .expect("valid metric"),
            tracking_checks: counter_vec(
                "strongsync_tracking_checks_total",
                "Sessions checked after a response that may have changed their GTID tracking or hidden a commit, by why (state_change, legacy_eof, untracked, domain_switch).",
                &["reason"],
            ),
            tracking_restored: IntCounter::new(
                "strongsync_tracking_restored_total",
                "Checks that found a client had switched off the GTID tracking strongsync needs (it was switched back on).",
            )
            .expect("valid metric"),
            probe_bounds: counter_vec(
                "strongsync_probe_bounds_total",
                "Responses bounded by the primary's binlog position read on strongsync's own connection (the probe), by result (ok, failed).",
                &["result"],
            ),
            commits_by_quorum: counter_vec(
                "strongsync_commits_by_quorum_total",
                "Commits released to their client, by the quorum they waited for (a session may ask for its own with @strongsync_quorum; 0: it asked for none).",
                &["quorum"],
            ),
            by_quorum: (0..=MAX_QUORUM).map(|_| OnceLock::new()).collect(),
            session_quorum_refused: counter_vec(
                "strongsync_session_quorum_refused_total",
                "Sessions' @strongsync_quorum not taken as asked, by why (not_a_count: the configured quorum applies; below_floor, above_max: bounded).",
                &["why"],
            ),
            quorum_unmet: gauge(
                "strongsync_quorum_unmet",
                "1 while the connected semisync replicas cannot meet the quorum rule (count, zones, outside the primary's zone): commits cannot reach their quorum.",
            ),
            async_held_bytes: gauge(
                "strongsync_async_held_bytes",
                "Binlog bytes held back from replicas without semisync until the quorum holds them (async_replicas = after_quorum).",
            ),
            compressed_logins: IntCounter::new(
                "strongsync_compressed_logins_total",
                "Client connections (replicas' included) that logged in with the compressed protocol (CLIENT_COMPRESS, zlib).",
            )
            .expect("valid metric"),
            degraded_counted: Mutex::new(Duration::ZERO),
            registry,
        };
        m.register_all();
        m
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.commit_wait.clone()),
            Box::new(self.commits_released.clone()),
            Box::new(self.parked.clone()),
            Box::new(self.read_wait.clone()),
            Box::new(self.reads_released.clone()),
            Box::new(self.reads_held.clone()),
            Box::new(self.reads_in_snapshot.clone()),
            Box::new(self.visibility_quorum.clone()),
            Box::new(self.ack_latency.clone()),
            Box::new(self.acks.clone()),
            Box::new(self.quorum.clone()),
            Box::new(self.passthrough.clone()),
            Box::new(self.durability_state.clone()),
            Box::new(self.durability_transitions.clone()),
            Box::new(self.degraded_seconds.clone()),
            Box::new(self.replicas_connected.clone()),
            Box::new(self.replica_acked_file.clone()),
            Box::new(self.replica_acked_offset.clone()),
            Box::new(self.replica_lag_bytes.clone()),
            Box::new(self.replica_lag_transactions.clone()),
            Box::new(self.client_connections.clone()),
            Box::new(self.primary_connections.clone()),
            Box::new(self.primary_up.clone()),
            Box::new(self.relayed_bytes.clone()),
            Box::new(self.malformed_input.clone()),
            Box::new(self.replica_dumps_refused.clone()),
            Box::new(self.tracking_checks.clone()),
            Box::new(self.tracking_restored.clone()),
            Box::new(self.probe_bounds.clone()),
            Box::new(self.commits_by_quorum.clone()),
            Box::new(self.session_quorum_refused.clone()),
            Box::new(self.quorum_unmet.clone()),
            Box::new(self.async_held_bytes.clone()),
            Box::new(self.compressed_logins.clone()),
        ];
        for c in collectors {
            self.registry
                .register(c)
                .expect("each metric is registered once");
        }
        // Series that exist from the start, so alerts and rates see zeros rather than nothing.
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
        for result in ["ok", "failed"] {
            self.probe_bounds.with_label_values(&[result]);
        }
        for why in SESSION_QUORUM_REFUSALS {
            self.session_quorum_refused.with_label_values(&[why]);
        }
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

fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("valid metric")
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
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
