//! Replica faults and a primary restart with real MariaDB servers replicating through the
//! proxy: a replica SIGKILLed under load and restarted, a replica whose network stalls or is
//! cut (a relay the test controls), one whose ACKs come back late, and the primary restarted
//! cleanly. Each case checks what the clients saw, the durability state and released
//! outcomes, that no waiter is left, and that every server ends with the same rows.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use strongsync::config::{DurabilityConfig, OnTimeout};
use strongsync::durability::State;
use support::mariadb::{wait_for, Deadline, MariaDb, APP_PASSWORD, APP_USER};
use support::proxy::assert_not_acknowledged;
use support::sql::Statements;
use support::strong::{blocking, durability, joined, Strong};
use support::tcp_relay::Direction;

/// Generous bound for "eventually": a guard against hangs, not a timing expectation.
const PATIENCE: Duration = Duration::from_secs(60);

/// Rows are `(writer, seq)`; `pad` makes some transactions large.
const TABLE: &str = "CREATE TABLE sbtest.t \
    (writer INT NOT NULL, seq INT NOT NULL, pad MEDIUMTEXT, PRIMARY KEY (writer, seq))";

/// What the clients of a test saw.
#[derive(Debug, Default)]
struct Written {
    /// Rows whose INSERT was answered OK.
    acked: Vec<(u32, u32)>,
    /// Rows whose INSERT failed: they may or may not have committed.
    in_doubt: Vec<(u32, u32)>,
    /// Every error, connection attempts included.
    errors: Vec<String>,
}

/// Writers inserting rows through the proxy, each on its own connection, until stopped. A
/// writer whose connection fails connects again.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Written>>,
}

/// A primary, two semisync replicas replicating through the proxy (one of them, optionally,
/// through a relay the test controls), and the proxy, with the table of [`TABLE`].
fn start(durability: DurabilityConfig, relayed: Option<usize>) -> Strong {
    Strong::start_relayed(2, relayed, |config, topology| {
        topology
            .primary
            .sql(&format!("DROP TABLE sbtest.t; {TABLE}"));
        config.durability = durability;
    })
}

/// The end of every test: both replicas back and caught up, no waiter left, and the same rows
/// everywhere, with every acknowledged one among them.
fn assert_recovered(cluster: &Strong, written: &Written) {
    wait_replicas_acknowledged_head(cluster);
    assert_no_waiter_left(cluster);
    assert_same_rows_everywhere(cluster, written);
}

/// Waits until both replicas are connected with semisync and have acknowledged everything
/// relayed, as the proxy sees them; both are then failover candidates.
fn wait_replicas_acknowledged_head(cluster: &Strong) {
    let deadline = Deadline::after(PATIENCE);
    loop {
        let status = cluster.proxy.durability().status();
        let caught_up = status.replicas.len() == 2
            && status
                .replicas
                .iter()
                .all(|r| r.semisync && r.acked.is_some() && r.acked == status.head);
        if caught_up {
            // Both hold every commit acknowledged to a client.
            assert_eq!(status.failover_candidates, [2, 3], "{status:#?}");
            return;
        }
        assert!(
            !deadline.expired(),
            "the replicas did not ACK the head: {status:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// No session is left parked, by the proxy's status and by its gauge.
fn assert_no_waiter_left(cluster: &Strong) {
    wait_for("no parked session", PATIENCE, || cluster.parked() == 0);
    assert_eq!(cluster.metrics().get("strongsync_parked_sessions"), 0.0);
}

/// Waits for both replicas to apply everything the primary has, then checks that every server
/// holds the same rows, that every row a client saw acknowledged is among them, and that every
/// row among them was written by a client.
fn assert_same_rows_everywhere(cluster: &Strong, written: &Written) {
    cluster.topology.wait_replicas_caught_up();
    let primary = rows(&cluster.topology.primary);
    let lost: Vec<_> = written
        .acked
        .iter()
        .filter(|row| !primary.contains(row))
        .collect();
    assert!(lost.is_empty(), "acknowledged rows missing: {lost:?}");
    let attempted: BTreeSet<_> = written.acked.iter().chain(&written.in_doubt).collect();
    let unknown: Vec<_> = primary.iter().filter(|r| !attempted.contains(r)).collect();
    assert!(unknown.is_empty(), "rows nobody wrote: {unknown:?}");
    let checksum = |server: &MariaDb| server.sql("CHECKSUM TABLE sbtest.t");
    for (i, replica) in cluster.topology.replicas.iter().enumerate() {
        assert!(
            rows(replica) == primary,
            "replica {i} differs from the primary"
        );
        assert_eq!(
            checksum(replica),
            checksum(&cluster.topology.primary),
            "replica {i}"
        );
    }
}

/// Every `(writer, seq)` on `server`.
fn rows(server: &MariaDb) -> BTreeSet<(u32, u32)> {
    server
        .query_rows("SELECT writer, seq FROM sbtest.t")
        .into_iter()
        .map(|row| (row[0].parse().unwrap(), row[1].parse().unwrap()))
        .collect()
}

// === impl Load ===

impl Load {
    fn start(cluster: &Strong, writers: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let opts = Opts::from_url(&cluster.proxy.url(APP_USER, APP_PASSWORD)).unwrap();
        let tasks = (0..writers)
            .map(|w| {
                let (opts, stop, ok) = (opts.clone(), Arc::clone(&stop), Arc::clone(&ok));
                tokio::spawn(write_rows(opts, w, stop, ok))
            })
            .collect();
        Load { stop, ok, tasks }
    }

    /// Waits until the clients have seen `n` more OKs.
    fn wait_for_more(&self, n: u64, what: &str) {
        let target = self.ok.load(Ordering::SeqCst) + n;
        wait_for(&format!("{n} more OKs {what}"), PATIENCE, || {
            self.ok.load(Ordering::SeqCst) >= target
        });
    }

    async fn stop(self) -> Written {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Written::default();
        for task in self.tasks {
            let written = joined(task).await;
            all.acked.extend(written.acked);
            all.in_doubt.extend(written.in_doubt);
            all.errors.extend(written.errors);
        }
        all
    }
}

/// One writer: rows `(writer, 0)`, `(writer, 1)`, … until `stop`.
async fn write_rows(opts: Opts, writer: u32, stop: Arc<AtomicBool>, ok: Arc<AtomicU64>) -> Written {
    let mut written = Written::default();
    let mut conn: Option<Conn> = None;
    let mut seq = 0;
    while !stop.load(Ordering::SeqCst) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::new(opts.clone()).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    written
                        .errors
                        .push(format!("writer {writer} connects: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let sql = format!("INSERT INTO t (writer, seq) VALUES ({writer}, {seq})");
        match c.query_drop(sql).await {
            Ok(()) => {
                written.acked.push((writer, seq));
                ok.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                written.in_doubt.push((writer, seq));
                written
                    .errors
                    .push(format!("writer {writer} row {seq}: {e}"));
                if !matches!(e, mysql_async::Error::Server(_)) {
                    conn = None;
                }
            }
        }
        seq += 1;
    }
    if let Some(conn) = conn {
        let _ = conn.disconnect().await;
    }
    written
}

/// Runs `sql` on a fresh connection in the background.
async fn spawn_statement(
    cluster: &Strong,
    sql: String,
) -> tokio::task::JoinHandle<mysql_async::Result<()>> {
    let mut conn = cluster.client().await;
    tokio::spawn(async move { conn.query_drop(sql).await })
}

/// The name of a series of `replica_ack_latency_seconds` for replica `server_id`: `"count"`,
/// `"sum"`, or a bucket's bound.
fn ack_latency(server_id: u32, series: &str) -> String {
    match series {
        "count" | "sum" => {
            format!("strongsync_replica_ack_latency_seconds_{series}{{server_id=\"{server_id}\"}}")
        }
        le => format!(
            "strongsync_replica_ack_latency_seconds_bucket{{server_id=\"{server_id}\",le=\"{le}\"}}"
        ),
    }
}

/// The cluster at quorum 2 under `on_timeout = degrade` (2 s), no replica delayed.
fn start_degrading() -> Strong {
    start(
        durability(2, OnTimeout::Degrade, Duration::from_secs(2)),
        None,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_under_load_with_quorum_one_of_two_costs_the_clients_nothing() {
    // A commit not acknowledged within the timeout would reach its client as an error.
    let mut cluster = start(
        durability(1, OnTimeout::Error, Duration::from_secs(20)),
        None,
    );
    let load = Load::start(&cluster, 8);
    load.wait_for_more(20, "before the kill");

    cluster.topology.replicas[0].kill();
    cluster.wait_semisync(1);
    load.wait_for_more(200, "with one replica dead");
    cluster.restart_replica(0);
    cluster.wait_semisync(2);
    load.wait_for_more(100, "after the restart");
    let written = load.stop().await;

    assert!(written.errors.is_empty(), "{:#?}", written.errors);
    let status = cluster.proxy.durability().status();
    assert_eq!(status.state, State::Strong);
    assert_eq!(
        status.released["quorum"],
        written.acked.len() as u64,
        "every commit released by its quorum: {status:?}"
    );
    assert_eq!(cluster.released_total(), written.acked.len() as u64);
    assert_recovered(&cluster, &written);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_under_load_with_quorum_two_degrades_then_strong_sync_resumes() {
    let mut cluster = start_degrading();
    let load = Load::start(&cluster, 8);
    load.wait_for_more(20, "before the kill");
    assert_eq!(cluster.state(), State::Strong);

    cluster.topology.replicas[1].kill();
    wait_for("DEGRADED", PATIENCE, || cluster.state() == State::Degraded);
    load.wait_for_more(200, "while DEGRADED");
    assert!(cluster.released("timeout") >= 1);
    assert!(cluster.released("degraded") >= 1, "commits stop waiting");

    cluster.restart_replica(1);
    wait_for("STRONG again", PATIENCE, || {
        cluster.state() == State::Strong
    });
    let quorum_before = cluster.released("quorum");
    wait_for("commits released by quorum again", PATIENCE, || {
        cluster.released("quorum") >= quorum_before + 20
    });
    let written = load.stop().await;

    assert!(written.errors.is_empty(), "{:#?}", written.errors);
    let status = cluster.proxy.durability().status();
    assert_eq!(
        cluster.released_total(),
        written.acked.len() as u64,
        "{status:?}"
    );
    assert_eq!(
        status.released["client_gone"] + status.released["unresolved"],
        0
    );
    let metrics = cluster.metrics();
    assert!(metrics.get("strongsync_durability_transitions_total{to=\"degraded\"}") >= 1.0);
    assert!(metrics.get("strongsync_durability_transitions_total{to=\"strong\"}") >= 1.0);
    assert_eq!(
        metrics.get("strongsync_durability_state{state=\"strong\"}"),
        1.0
    );
    assert_recovered(&cluster, &written);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_replica_network_parks_commits_under_block_until_it_flows_or_is_cut() {
    let cluster = start(
        durability(2, OnTimeout::Block, Duration::from_millis(300)),
        Some(1),
    );
    let relay = cluster.relay();
    let mut written = Written::default();
    let mut conn = cluster.client().await;
    conn.run("INSERT INTO t (writer, seq) VALUES (100, 0)")
        .await;
    written.acked.push((100, 0));

    // Stalled: the commits park, and stay parked through several timeouts. Their rows are
    // large, so the stalled pipe fills up.
    relay.stall();
    let forwarded = [Direction::ToTarget, Direction::FromTarget].map(|d| relay.forwarded(d));
    let mut inserts = Vec::new();
    for w in 0..8 {
        let sql = format!("INSERT INTO t VALUES ({w}, 0, REPEAT('x', 512 * 1024))");
        inserts.push(spawn_statement(&cluster, sql).await);
    }
    wait_for("8 parked commits", PATIENCE, || cluster.parked() == 8);
    // The replica that is not stalled has received every one of them meanwhile.
    let head = cluster.topology.primary.gtid_binlog_pos();
    wait_for("the other replica to receive them", PATIENCE, || {
        cluster.topology.replica_status(0)["Gtid_IO_Pos"] == head
    });
    wait_for(
        "the parked commits to outlast their ACK timeout",
        PATIENCE,
        || cluster.proxy.durability().status().parked_overdue == 8,
    );
    assert_eq!(cluster.parked(), 8);
    assert!(
        inserts.iter().all(|insert| !insert.is_finished()),
        "no OK while stalled"
    );
    assert_eq!(
        cluster.released_total(),
        1,
        "only the first commit was released"
    );
    assert_eq!(
        [Direction::ToTarget, Direction::FromTarget].map(|d| relay.forwarded(d)),
        forwarded,
        "nothing went through the stalled relay"
    );

    relay.resume();
    for (w, insert) in inserts.into_iter().enumerate() {
        joined(insert).await.unwrap();
        written.acked.push((w as u32, 0));
    }
    assert_eq!(cluster.released("quorum"), 9);

    // Stalled again, then cut: what was in flight is lost, the replica connects again through
    // the relay, and its commits are released.
    relay.stall();
    let mut inserts = Vec::new();
    for w in 0..4 {
        let sql = format!("INSERT INTO t (writer, seq) VALUES ({w}, 1)");
        inserts.push(spawn_statement(&cluster, sql).await);
    }
    wait_for("4 parked commits", PATIENCE, || cluster.parked() == 4);
    let accepted = relay.accepted();
    relay.cut();
    relay.resume();
    for (w, insert) in inserts.into_iter().enumerate() {
        joined(insert).await.unwrap();
        written.acked.push((w as u32, 1));
    }
    assert!(relay.accepted() > accepted, "the replica connected again");
    assert_eq!(cluster.released("quorum"), 13);
    assert_eq!(
        cluster.released_total(),
        13,
        "nothing released without quorum"
    );
    assert_eq!(cluster.state(), State::Strong);
    assert_recovered(&cluster, &written);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_replica_network_under_on_timeout_error_answers_an_error_naming_the_gtid() {
    let cluster = start(
        durability(2, OnTimeout::Error, Duration::from_secs(1)),
        Some(1),
    );
    let relay = cluster.relay();
    relay.stall();
    let mut conn = cluster.client().await;
    let err = conn
        .fails("INSERT INTO t (writer, seq) VALUES (0, 0)")
        .await;
    let gtid = cluster.topology.primary.gtid_binlog_pos();
    assert_not_acknowledged(&err, &gtid);
    // The connection goes on, and the transaction did commit.
    let n: u64 = conn.one("SELECT COUNT(*) FROM t WHERE writer = 0").await;
    assert_eq!(n, 1);
    assert_eq!(cluster.released("timeout"), 1);
    assert_eq!(cluster.state(), State::Strong, "error does not degrade");
    assert_eq!(cluster.parked(), 0);

    relay.resume();
    conn.query_drop("INSERT INTO t (writer, seq) VALUES (0, 1)")
        .await
        .expect("acknowledged by both once the relay flows");
    assert_eq!(cluster.released("quorum"), 1);
    let written = Written {
        acked: vec![(0, 0), (0, 1)],
        ..Written::default()
    };
    assert_recovered(&cluster, &written);
}

#[tokio::test(flavor = "multi_thread")]
async fn acks_delayed_on_their_way_back_delay_the_oks_and_nothing_is_released_without_quorum() {
    const DELAY: Duration = Duration::from_millis(200);
    let cluster = start(
        durability(2, OnTimeout::Error, Duration::from_secs(30)),
        Some(1),
    );
    let delayed = cluster.topology.replicas[1].server_id();
    let direct = cluster.topology.replicas[0].server_id();
    cluster.relay().set_delay(Direction::ToTarget, DELAY);
    let before = cluster.metrics();

    let load = Load::start(&cluster, 3);
    load.wait_for_more(30, "with delayed ACKs");
    let written = load.stop().await;

    assert!(written.errors.is_empty(), "{:#?}", written.errors);
    assert_eq!(cluster.released("quorum"), written.acked.len() as u64);
    assert_eq!(cluster.released_total(), written.acked.len() as u64);
    // Every ACK of the delayed replica took at least the delay; the other's came too.
    let after = cluster.metrics();
    let delta = |server_id, series| {
        let name = ack_latency(server_id, series);
        after.get(&name) - before.value(&name).unwrap_or(0.0)
    };
    let acks = delta(delayed, "count");
    assert!(acks > 0.0, "{}", after.0);
    assert_eq!(
        delta(delayed, "0.1"),
        0.0,
        "an ACK faster than the delay: {}",
        after.0
    );
    assert!(delta(delayed, "sum") / acks >= DELAY.as_secs_f64());
    assert!(delta(direct, "count") > 0.0);
    let status = cluster.proxy.durability().status();
    let replica = status
        .replicas
        .iter()
        .find(|r| r.server_id == delayed)
        .expect("the delayed replica is connected");
    assert!(replica.semisync && replica.acked.is_some(), "{replica:?}");
    assert_eq!(status.state, State::Strong);
    assert_recovered(&cluster, &written);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_restarted_cleanly_gets_its_replicas_and_clients_back_and_strong_sync_resumes() {
    let mut cluster = start_degrading();
    let load = Load::start(&cluster, 8);
    load.wait_for_more(20, "before the restart");
    let port = cluster.topology.primary.port();
    let file_before = cluster
        .proxy
        .durability()
        .status()
        .quorum_position
        .expect("a quorum position")
        .file_seq;

    cluster.topology.primary.restart();
    assert_eq!(cluster.topology.primary.port(), port);
    load.wait_for_more(20, "from clients that connected again");
    // The replicas' I/O threads come back through the proxy by themselves.
    for i in 0..cluster.topology.replicas.len() {
        cluster.topology.wait_replica_running(i);
    }
    cluster.wait_semisync(2);
    wait_for("STRONG", PATIENCE, || cluster.state() == State::Strong);
    let quorum_before = cluster.released("quorum");
    wait_for("commits released by a quorum of two", PATIENCE, || {
        cluster.released("quorum") >= quorum_before + 20
    });
    let written = load.stop().await;

    assert!(!written.acked.is_empty());
    eprintln!(
        "{} rows acknowledged, {} in doubt; errors: {:#?}",
        written.acked.len(),
        written.in_doubt.len(),
        written.errors
    );
    let status = cluster.proxy.durability().status();
    assert_eq!(status.state, State::Strong, "{status:?}");
    // The restarted primary writes a new binlog file: both replicas acknowledged in it.
    for replica in &status.replicas {
        let acked = replica.acked.expect("an acknowledged position");
        assert!(acked.file_seq > file_before, "{status:?}");
    }
    wait_for("the primary to be up again", PATIENCE, || {
        cluster.metrics().get("strongsync_primary_up") == 1.0
    });
    assert_recovered(&cluster, &written);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_parked_across_a_primary_restart_gets_its_ok_once_its_quorum_has_it() {
    let mut cluster = start(blocking(2), Some(1));
    cluster.relay().stall();
    let insert = spawn_statement(
        &cluster,
        "INSERT INTO t (writer, seq) VALUES (0, 0)".to_owned(),
    )
    .await;
    wait_for("the INSERT to park", PATIENCE, || cluster.parked() == 1);

    // The session's connection to the primary goes away with the primary; the commit it
    // reported stays parked, and is released by its quorum once the stalled replica flows.
    cluster.topology.primary.restart();
    assert_eq!(cluster.parked(), 1);
    assert!(!insert.is_finished());
    cluster.relay().resume();
    joined(insert)
        .await
        .expect("OK: the transaction is on the primary and on both replicas");
    let mut conn = cluster.client().await;
    conn.run("INSERT INTO t (writer, seq) VALUES (0, 1)").await;
    assert_eq!(cluster.released("quorum"), 2);
    assert_eq!(cluster.released_total(), 2);
    let written = Written {
        acked: vec![(0, 0), (0, 1)],
        ..Written::default()
    };
    assert_recovered(&cluster, &written);
}
