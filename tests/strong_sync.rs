//! Strong sync end to end: a primary and two MariaDB replicas replicating through the proxy
//! with semisync; commits acknowledged only once the quorum has them, under each timeout
//! policy, with replicas stopped and started under them.

mod support;

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use mysql_common::constants::CapabilityFlags;
use strongsync::durability::{DurabilityConfig, OnTimeout, State, WithoutQuorum};
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::proxy::{assert_not_acknowledged, TestProxy};
use support::rawclient::RawClient;
use support::sysbench::Sysbench;
use support::topology::Topology;

const PATIENCE: Duration = Duration::from_secs(60);

/// Two replicas replicating through the proxy with semisync on, the proxy set up as given.
fn strong(durability: DurabilityConfig) -> (Topology, TestProxy) {
    strong_with(durability, Leg::Tcp)
}

/// How the proxy reaches the primary.
enum Leg {
    Tcp,
    UnixSocket,
}

fn strong_with(durability: DurabilityConfig, leg: Leg) -> (Topology, TestProxy) {
    let topology = Topology::start(2);
    topology
        .primary
        .sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
    let mut config = TestProxy::config(&topology.primary);
    if let Leg::UnixSocket = leg {
        config.primary = topology.primary.socket().to_str().unwrap().to_owned();
    }
    config.durability = durability;
    let proxy = TestProxy::start_with(config);
    for (i, replica) in topology.replicas.iter().enumerate() {
        replica.sql("SET GLOBAL rpl_semi_sync_slave_enabled = ON");
        topology.point_replica_at(i, "127.0.0.1", proxy.port());
    }
    for i in 0..topology.replicas.len() {
        topology.wait_replica_running(i);
    }
    wait_for_semisync_replicas(&proxy, 2);
    (topology, proxy)
}

fn config(quorum: usize, on_timeout: OnTimeout, ack_timeout: Duration) -> DurabilityConfig {
    DurabilityConfig {
        quorum,
        on_timeout,
        ack_timeout,
        ..DurabilityConfig::default()
    }
}

fn wait_for_semisync_replicas(proxy: &TestProxy, n: usize) {
    wait_for(&format!("{n} semisync replicas"), PATIENCE, || {
        proxy
            .durability()
            .status()
            .replicas
            .iter()
            .filter(|r| r.semisync)
            .count()
            == n
    });
}

fn stop_io(topology: &Topology, i: usize) {
    topology.replicas[i].sql("STOP SLAVE IO_THREAD");
}

/// Stops both replicas' I/O threads and waits until the proxy has no semisync replica left.
fn stop_all_replicas(topology: &Topology, proxy: &TestProxy) {
    stop_io(topology, 0);
    stop_io(topology, 1);
    wait_for_semisync_replicas(proxy, 0);
}

fn start_io(topology: &Topology, i: usize) {
    topology.replicas[i].sql("START SLAVE IO_THREAD");
}

fn parked(proxy: &TestProxy) -> usize {
    proxy.durability().status().parked
}

fn released(proxy: &TestProxy, outcome: &str) -> u64 {
    proxy.durability().status().released[outcome]
}

async fn client(proxy: &TestProxy) -> Conn {
    Conn::new(Opts::from_url(&proxy.url(APP_USER, APP_PASSWORD)).unwrap())
        .await
        .unwrap()
}

/// Runs `sql` on a fresh connection in the background and waits until it is parked.
async fn parked_statement(
    proxy: &TestProxy,
    sql: &'static str,
) -> tokio::task::JoinHandle<(Conn, mysql_async::Result<()>)> {
    let mut conn = client(proxy).await;
    let before = parked(proxy);
    let task = tokio::spawn(async move {
        let result = conn.query_drop(sql).await;
        (conn, result)
    });
    wait_for(&format!("{sql} to park"), PATIENCE, || {
        parked(proxy) == before + 1
    });
    task
}

/// Waits for a parked statement's answer (once something has released it) and expects an OK.
async fn expect_ok(parked: tokio::task::JoinHandle<(Conn, mysql_async::Result<()>)>) {
    let (_, result) = tokio::time::timeout(PATIENCE, parked)
        .await
        .expect("released")
        .unwrap();
    result.unwrap();
}

#[test]
fn sysbench_write_only_through_the_proxy_leaves_three_identical_servers() {
    let (topology, proxy) = strong(DurabilityConfig::default());
    for replica in &topology.replicas {
        assert_eq!(replica.status_var("Rpl_semi_sync_slave_status"), "ON");
    }
    let sysbench = Sysbench::new("oltp_write_only")
        .port(proxy.port())
        .threads(64)
        .tables(4)
        .table_size(10_000)
        .time(60);
    sysbench.prepare();
    let report = sysbench.run();
    assert_eq!(
        (report.errors, report.reconnects),
        (0, 0),
        "{}",
        report.summary()
    );
    assert!(report.transactions > 0);
    topology.wait_replicas_caught_up();

    let checksum = |server: &support::mariadb::MariaDb| {
        server.sql("CHECKSUM TABLE sbtest.sbtest1, sbtest.sbtest2, sbtest.sbtest3, sbtest.sbtest4")
    };
    let primary = checksum(&topology.primary);
    for replica in &topology.replicas {
        assert_eq!(checksum(replica), primary);
        assert!(
            replica
                .status_var("Rpl_semi_sync_slave_send_ack")
                .parse::<u64>()
                .unwrap()
                > 0
        );
    }
    let status = proxy.durability().status();
    assert_eq!(status.state, State::Strong);
    assert!(
        status.released["quorum"] >= report.transactions,
        "{status:?}"
    );
    assert_eq!(
        status.released["timeout"] + status.released["degraded"],
        0,
        "{status:?}"
    );
    eprintln!("{}", report.summary());
}

#[tokio::test(flavor = "multi_thread")]
async fn quorum_one_survives_one_replica_and_parks_without_both() {
    let (topology, proxy) = strong(config(1, OnTimeout::Block, Duration::from_secs(3600)));
    stop_io(&topology, 0);
    wait_for_semisync_replicas(&proxy, 1);
    let mut conn = client(&proxy).await;
    conn.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap();
    assert_eq!(
        released(&proxy, "quorum"),
        1,
        "acknowledged by the replica still up"
    );

    stop_io(&topology, 1);
    wait_for_semisync_replicas(&proxy, 0);
    let insert = parked_statement(&proxy, "INSERT INTO t (v) VALUES (2)").await;
    start_io(&topology, 0);
    expect_ok(insert).await;
    assert_eq!(released(&proxy, "quorum"), 2);
    assert_eq!(parked(&proxy), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_timeout_error_answers_an_error_naming_the_gtid_and_the_connection_goes_on() {
    let (topology, proxy) = strong(config(1, OnTimeout::Error, Duration::from_secs(1)));
    stop_all_replicas(&topology, &proxy);
    let mut conn = client(&proxy).await;
    let err = conn
        .query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap_err();
    let gtid = topology.primary.gtid_binlog_pos();
    assert_not_acknowledged(&err, &gtid);
    // The transaction did commit, and the connection is still usable.
    let n: u64 = conn
        .query_first("SELECT COUNT(*) FROM t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(released(&proxy, "timeout"), 1);
    assert_eq!(
        proxy.durability().status().state,
        State::Strong,
        "error does not degrade"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_parked_when_the_primary_dies_gets_the_policys_error_not_an_ok() {
    let (mut topology, proxy) = strong(config(1, OnTimeout::Error, Duration::from_secs(2)));
    stop_all_replicas(&topology, &proxy);
    let insert = parked_statement(&proxy, "INSERT INTO t (v) VALUES (1)").await;
    let gtid = topology.primary.gtid_binlog_pos();
    topology.primary.kill();
    let (_, result) = tokio::time::timeout(PATIENCE, insert)
        .await
        .expect("released")
        .unwrap();
    assert_not_acknowledged(&result.unwrap_err(), &gtid);
    assert_eq!(released(&proxy, "timeout"), 1);
    assert_eq!(released(&proxy, "quorum"), 0);
    assert_eq!(parked(&proxy), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_timeout_degrade_releases_then_returns_to_strong_once_replicas_catch_up() {
    let (topology, proxy) = strong(config(1, OnTimeout::Degrade, Duration::from_secs(1)));
    stop_all_replicas(&topology, &proxy);
    let mut conn = client(&proxy).await;
    conn.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap();
    assert_eq!(released(&proxy, "timeout"), 1);
    assert_eq!(proxy.durability().status().state, State::Degraded);
    // DEGRADED: commits do not wait.
    conn.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .unwrap();
    assert_eq!(released(&proxy, "degraded"), 1);

    start_io(&topology, 0);
    start_io(&topology, 1);
    wait_for("STRONG again", PATIENCE, || {
        proxy.durability().status().state == State::Strong
    });
    topology.wait_replicas_caught_up();
    conn.query_drop("INSERT INTO t (v) VALUES (3)")
        .await
        .unwrap();
    assert_eq!(
        released(&proxy, "quorum"),
        1,
        "the next commit waited for its quorum"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_timeout_block_waits_through_timeouts_until_a_replica_returns() {
    let (topology, proxy) = strong(config(1, OnTimeout::Block, Duration::from_millis(300)));
    stop_all_replicas(&topology, &proxy);
    let insert = parked_statement(&proxy, "INSERT INTO t (v) VALUES (1)").await;
    // Its timeout passes; the commit stays parked.
    wait_for("the commit to outlast its ACK timeout", PATIENCE, || {
        proxy.durability().status().parked_overdue == 1
    });
    assert_eq!(parked(&proxy), 1);
    assert!(!insert.is_finished());
    assert_eq!(
        proxy.durability().status().released.values().sum::<u64>(),
        0
    );
    start_io(&topology, 1);
    expect_ok(insert).await;
    assert_eq!(released(&proxy, "quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_quorum_immediate_applies_the_policy_at_once() {
    let mut durability = config(1, OnTimeout::Error, Duration::from_secs(3600));
    durability.without_quorum = WithoutQuorum::Immediate;
    let (topology, proxy) = strong(durability);
    stop_all_replicas(&topology, &proxy);
    let mut conn = client(&proxy).await;
    // An hour-long ack timeout, yet the answer comes at once: there is no quorum to wait for.
    let result = tokio::time::timeout(PATIENCE, conn.query_drop("INSERT INTO t (v) VALUES (1)"))
        .await
        .expect("no waiting for the timeout");
    assert!(
        matches!(result, Err(mysql_async::Error::Server(ref e)) if e.code == 1105),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn quorum_two_waits_for_the_second_replica_which_then_has_the_transaction() {
    let (topology, proxy) = strong(config(2, OnTimeout::Block, Duration::from_secs(3600)));
    stop_io(&topology, 1);
    wait_for_semisync_replicas(&proxy, 1);
    let insert = parked_statement(&proxy, "INSERT INTO t (v) VALUES (1)").await;
    let gtid = topology.primary.gtid_binlog_pos();
    start_io(&topology, 1);
    expect_ok(insert).await;
    // At the moment of the OK, the second replica has received the transaction.
    let io_pos = topology.replica_status(1)["Gtid_IO_Pos"].clone();
    assert!(
        io_pos.split(',').any(|g| g.trim() == gtid),
        "{gtid} not in Gtid_IO_Pos {io_pos}"
    );
    assert_eq!(released(&proxy, "quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_primarys_unix_socket_sessions_and_replica_streams_work_as_over_tcp() {
    let (topology, proxy) = strong_with(
        config(2, OnTimeout::Block, Duration::from_secs(3600)),
        Leg::UnixSocket,
    );
    let mut conn = client(&proxy).await;
    // The primary sees the session arrive over its socket, not over TCP.
    let host: String = conn
        .query_first("SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(host, "localhost");
    // Both replica streams come over the socket too, so a commit waits for both and is
    // released by its quorum of two.
    stop_io(&topology, 1);
    wait_for_semisync_replicas(&proxy, 1);
    let insert = parked_statement(&proxy, "INSERT INTO t (v) VALUES (1)").await;
    start_io(&topology, 1);
    expect_ok(insert).await;
    assert_eq!(released(&proxy, "quorum"), 1);
    conn.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .unwrap();
    assert_eq!(released(&proxy, "quorum"), 2);
    let primary_sum = topology.primary.sql("SELECT SUM(v) FROM sbtest.t");
    assert_eq!(primary_sum, "3");
}

#[tokio::test(flavor = "multi_thread")]
async fn xa_procedures_and_batches_each_park_and_wait_for_their_last_gtid() {
    let (topology, proxy) = strong(config(1, OnTimeout::Block, Duration::from_secs(3600)));
    let mut setup = client(&proxy).await;
    setup
        .query_drop("CREATE PROCEDURE two_commits() BEGIN INSERT INTO t (v) VALUES (10); INSERT INTO t (v) VALUES (11); END")
        .await
        .unwrap();
    let mut xa = client(&proxy).await;
    xa.query_drop("XA START 'x'").await.unwrap();
    xa.query_drop("INSERT INTO t (v) VALUES (1)").await.unwrap();
    xa.query_drop("XA END 'x'").await.unwrap();
    stop_all_replicas(&topology, &proxy);

    // Each statement parks until a replica is back, then the replica goes away again.
    let mut xa = Some(xa);
    for sql in [
        "XA PREPARE 'x'",
        "XA COMMIT 'x'",
        "CALL two_commits()",
        "INSERT INTO t (v) VALUES (20); INSERT INTO t (v) VALUES (21)",
    ] {
        let mut conn = match sql.starts_with("XA") {
            true => xa.take().unwrap(),
            false => client(&proxy).await,
        };
        let id = conn.id();
        let before = parked(&proxy);
        let task = tokio::spawn(async move {
            let result = conn.query_drop(sql).await;
            (conn, result)
        });
        wait_for(&format!("{sql} to park"), PATIENCE, || {
            parked(&proxy) == before + 1
        });
        let last = topology.primary.gtid_binlog_pos();
        start_io(&topology, 0);
        let (conn, result) = tokio::time::timeout(PATIENCE, task)
            .await
            .expect("released")
            .unwrap();
        result.unwrap_or_else(|e| panic!("{sql}: {e}"));
        if sql.starts_with("XA") {
            xa = Some(conn);
        }
        // The commit waited for the last GTID the statement wrote.
        let reported = proxy.recorder.gtids_of(id);
        assert_eq!(reported.last(), Some(&last), "{sql}");
        stop_io(&topology, 0);
        wait_for_semisync_replicas(&proxy, 0);
    }
    // The CREATE PROCEDURE, then each statement (a batch may park once per OK it reports).
    let status = proxy.durability().status();
    assert!(status.released["quorum"] >= 5, "{status:?}");
    assert_eq!(
        status.released["timeout"] + status.released["degraded"],
        0,
        "{status:?}"
    );
}

#[test]
fn a_client_that_leaves_while_parked_leaves_no_waiter_behind() {
    let (topology, proxy) = strong(config(1, OnTimeout::Block, Duration::from_secs(3600)));
    stop_all_replicas(&topology, &proxy);
    let mut client = RawClient::connect(
        proxy.addr(),
        APP_USER,
        APP_PASSWORD,
        CapabilityFlags::empty(),
    );
    client.send(b"\x03INSERT INTO t (v) VALUES (1)");
    wait_for("the INSERT to park", PATIENCE, || parked(&proxy) == 1);
    drop(client);
    wait_for("the waiter to go", PATIENCE, || parked(&proxy) == 0);
    assert_eq!(released(&proxy, "client_gone"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_parked_commits_do_not_stop_reads_on_other_connections() {
    raise_open_files_limit();
    let (topology, proxy) = strong(config(1, OnTimeout::Block, Duration::from_secs(3600)));
    stop_all_replicas(&topology, &proxy);

    const PARKED: usize = 1000;
    let mut commits = Vec::with_capacity(PARKED);
    for i in 0..PARKED {
        let mut conn = client(&proxy).await;
        commits.push(tokio::spawn(async move {
            conn.exec_drop("INSERT INTO t (v) VALUES (?)", (i,))
                .await
                .map(|()| conn)
        }));
    }
    wait_for("1000 parked commits", PATIENCE, || parked(&proxy) == PARKED);

    // Meanwhile 16 other connections run point selects.
    let mut readers = Vec::new();
    for _ in 0..16 {
        let mut conn = client(&proxy).await;
        readers.push(tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            for id in 0..200u32 {
                let _: Option<u32> = conn
                    .exec_first("SELECT v FROM t WHERE id = ?", (id,))
                    .await
                    .unwrap();
            }
            started.elapsed()
        }));
    }
    for reader in readers {
        let took = tokio::time::timeout(PATIENCE, reader)
            .await
            .expect("reads are served")
            .unwrap();
        eprintln!("200 point selects while 1000 commits are parked: {took:?}");
    }
    assert_eq!(
        parked(&proxy),
        PARKED,
        "the commits stayed parked throughout"
    );

    start_io(&topology, 0);
    for commit in commits {
        tokio::time::timeout(PATIENCE, commit)
            .await
            .expect("released")
            .unwrap()
            .unwrap();
    }
    assert_eq!(parked(&proxy), 0);
    assert_eq!(released(&proxy, "quorum"), PARKED as u64);
}

/// 1000 clients through an in-process proxy hold 3000 sockets in this process.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_larger_than_a_packet_is_rechunked_and_acknowledged_by_both_replicas() {
    let (topology, proxy) = strong(config(2, OnTimeout::Error, Duration::from_secs(60)));
    let mut conn = client(&proxy).await;
    conn.query_drop("CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)")
        .await
        .unwrap();
    // Its rows event is over 16 MiB: spread over two packets, which the semisync header
    // shifts, so the proxy must put it back together and split it again.
    conn.query_drop("INSERT INTO big VALUES (1, REPEAT('x', 17 * 1024 * 1024))")
        .await
        .expect("acknowledged by both replicas");
    assert_eq!(released(&proxy, "timeout"), 0);
    topology.wait_replicas_caught_up();
    let want = topology.primary.sql("SELECT MD5(b) FROM sbtest.big");
    for replica in &topology.replicas {
        assert_eq!(replica.sql("SELECT MD5(b) FROM sbtest.big"), want);
        assert_eq!(replica.slave_status()["Slave_IO_Running"], "Yes");
    }
}
