//! Strong sync end to end: a primary and two replicas replicating through the proxy with
//! semisync; commits acknowledged only once the quorum has them, each witnessed by the replicas'
//! own state (`Gtid_IO_Pos`, `RECEIVED_TRANSACTION_SET`) at the moment the client got its answer,
//! under each timeout policy, with replicas stopped and started under them. The tests written
//! over [`Cluster`] run on MariaDB 10.11 and MySQL 9.7; the others say which server they need.

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::Conn;
use mysql_common::constants::CapabilityFlags;
use strongsync::config::{OnTimeout, WithoutQuorum};
use strongsync::durability::State;
use support::admin;
use support::cluster::Cluster;
use support::each_server;
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::proxy::assert_not_acknowledged;
use support::rawclient::RawClient;
use support::sql::Statements;
use support::strong::{
    answered, blocking, durability, joined, position_holds, Strong, Watched, PATIENCE,
};
use support::sysbench::Sysbench;
use support::topology::MySqlTopology;

/// Waits for a parked statement's answer (once something has released it) and expects an OK.
async fn expect_ok(parked: tokio::task::JoinHandle<Watched>) -> Watched {
    let watched = answered(parked).await;
    watched.result.as_ref().unwrap();
    watched
}

/// What both replicas have received, read when a client gets its answer.
/// Two replicas, and commits released by `quorum` of them within `ack_timeout`, then under
/// `on_timeout`.
fn start<C: Cluster>(quorum: usize, on_timeout: OnTimeout, ack_timeout: Duration) -> Strong<C> {
    Strong::<C>::start_on(2, durability(quorum, on_timeout, ack_timeout))
}

/// Waits until `/readyz`, with the replicas gone, answers `status` saying `says`: what a load
/// balancer routing by it does with the policy in force.
fn readiness_without_replicas<C: Cluster>(s: &Strong<C>, status: u16, says: &str) {
    wait_for(&format!("/readyz {status} {says:?}"), PATIENCE, || {
        let ready = admin::get(s.proxy.admin_addr(), "/readyz");
        ready.status == status && ready.body.contains(says)
    });
}

// === Each server ===

async fn quorum_one_parks_until_a_replica_has_the_transaction<C: Cluster>() {
    let s = start::<C>(1, OnTimeout::Block, Duration::from_secs(3600));
    s.stop_all();
    let insert = s.park("INSERT INTO t (v) VALUES (1)", s.witnesses()).await;
    let gtid = s.topology.newest_gtid();
    // Parked: neither replica has it (each was stopped before the commit).
    assert!(!C::holds(&s.witness(0).received(), &gtid));
    assert!(!C::holds(&s.witness(1).received(), &gtid));
    s.start_io(0);
    let watched = expect_ok(insert).await;
    assert!(
        C::holds(&watched.received[0], &gtid),
        "{gtid} not in replica 0's RECEIVED_TRANSACTION_SET {:?} when the OK came",
        watched.received[0]
    );
    assert_eq!(s.released("quorum"), 1);
    assert_eq!(s.parked(), 0);
    // With one replica up, a commit goes through on its ACK.
    let mut conn = s.client().await;
    conn.run("INSERT INTO t (v) VALUES (2)").await;
    assert_eq!(s.released("quorum"), 2);
    assert!(C::holds(
        &s.witness(0).received(),
        &s.topology.newest_gtid()
    ));
}

async fn quorum_two_waits_for_the_second_replica_which_then_has_the_transaction<C: Cluster>() {
    let s = start::<C>(2, OnTimeout::Block, Duration::from_secs(3600));
    s.stop_io(1);
    s.wait_semisync(1);
    let insert = s.park("INSERT INTO t (v) VALUES (1)", s.witnesses()).await;
    let gtid = s.topology.newest_gtid();
    wait_for("replica 0 to receive the transaction", PATIENCE, || {
        C::holds(&s.witness(0).received(), &gtid)
    });
    assert_eq!(s.parked(), 1, "one replica of the two is not the quorum");
    s.start_io(1);
    let watched = expect_ok(insert).await;
    for (i, received) in watched.received.iter().enumerate() {
        assert!(
            C::holds(received, &gtid),
            "replica {i}: {gtid} not in {received:?}"
        );
    }
    assert_eq!(s.released("quorum"), 1);
}

async fn on_timeout_error_answers_an_error_naming_the_gtid_and_the_connection_goes_on<
    C: Cluster,
>() {
    let s = start::<C>(1, OnTimeout::Error, Duration::from_secs(1));
    s.stop_all();
    // It cannot acknowledge a commit: not ready.
    readiness_without_replicas(&s, 503, "not ready: 0 semisync replica(s) connected");
    let mut conn = s.client().await;
    let err = conn.fails("INSERT INTO t (v) VALUES (1)").await;
    let gtid = s.topology.newest_gtid();
    assert_not_acknowledged(&err, &gtid);
    assert!(!C::holds(&s.witness(0).received(), &gtid));
    let n: u64 = conn.one("SELECT COUNT(*) FROM t").await;
    assert_eq!(n, 1, "the transaction did commit on the primary");
    assert_eq!(s.released("timeout"), 1);
    assert_eq!(s.state(), State::Strong);
}

async fn on_timeout_degrade_releases_then_returns_to_strong_once_replicas_catch_up<C: Cluster>() {
    let s = start::<C>(1, OnTimeout::Degrade, Duration::from_secs(1));
    s.stop_all();
    // Riding out the replicas' loss is what degrade is for: still ready, and saying why.
    readiness_without_replicas(&s, 200, "ready, degraded: 0 semisync replica(s) connected");
    let mut conn = s.client().await;
    conn.run("INSERT INTO t (v) VALUES (1)").await;
    assert_eq!(s.released("timeout"), 1);
    assert_eq!(s.state(), State::Degraded);
    conn.run("INSERT INTO t (v) VALUES (2)").await;
    assert_eq!(s.released("degraded"), 1);
    let released = s.proxy.durability().status().released_without_quorum;
    assert_eq!(released.count(), 2, "{released}");

    s.start_io(0);
    s.start_io(1);
    wait_for("STRONG again", PATIENCE, || s.state() == State::Strong);
    let gtid = s.topology.newest_gtid();
    assert!(C::holds(&s.witness(0).received(), &gtid) || C::holds(&s.witness(1).received(), &gtid));
    conn.run("INSERT INTO t (v) VALUES (3)").await;
    assert_eq!(
        s.released("quorum"),
        1,
        "the next commit waited for its quorum"
    );
}

async fn on_timeout_block_waits_through_timeouts_until_a_replica_returns<C: Cluster>() {
    let s = start::<C>(1, OnTimeout::Block, Duration::from_millis(300));
    s.stop_all();
    readiness_without_replicas(&s, 503, "not ready: 0 semisync replica(s) connected");
    let insert = s
        .park("INSERT INTO t (v) VALUES (1)", vec![s.witness(1)])
        .await;
    wait_for("the commit to outlast its ACK timeout", PATIENCE, || {
        s.proxy.durability().status().parked_overdue == 1
    });
    assert_eq!(s.parked(), 1);
    assert!(!insert.is_finished());
    assert_eq!(s.released_total(), 0);
    let gtid = s.topology.newest_gtid();
    s.start_io(1);
    let watched = expect_ok(insert).await;
    assert!(
        C::holds(&watched.received[0], &gtid),
        "{:?}",
        watched.received
    );
    assert_eq!(s.released("quorum"), 1);
}

async fn without_quorum_immediate_applies_the_policy_at_once<C: Cluster>() {
    let mut config = durability(1, OnTimeout::Error, Duration::from_secs(3600));
    config.without_quorum = WithoutQuorum::Immediate;
    let s = Strong::<C>::start_on(2, config);
    s.stop_all();
    let mut conn = s.client().await;
    // An hour-long ack timeout, yet the answer comes at once: there is no quorum to wait for.
    let result = tokio::time::timeout(PATIENCE, conn.query_drop("INSERT INTO t (v) VALUES (1)"))
        .await
        .expect("no waiting for the timeout");
    assert!(
        matches!(result, Err(mysql_async::Error::Server(ref e)) if e.code == 1105),
        "{result:?}"
    );
}

async fn a_commit_parked_when_the_primary_dies_gets_the_policys_error_not_an_ok<C: Cluster>() {
    let mut s = start::<C>(1, OnTimeout::Error, Duration::from_secs(2));
    s.stop_all();
    let insert = s.park("INSERT INTO t (v) VALUES (1)", vec![]).await;
    let gtid = s.topology.newest_gtid();
    s.topology.kill_primary();
    assert_not_acknowledged(&answered(insert).await.result.unwrap_err(), &gtid);
    assert_eq!(s.released("timeout"), 1);
    assert_eq!(s.released("quorum"), 0);
    assert_eq!(s.parked(), 0);
}

/// A raw client, so that it can vanish mid-command.
async fn a_client_that_leaves_while_parked_leaves_no_waiter_behind<C: Cluster>() {
    let s = start::<C>(1, OnTimeout::Block, Duration::from_secs(3600));
    s.topology.cache_password(APP_USER, APP_PASSWORD);
    s.stop_all();
    let mut client = RawClient::connect(
        s.proxy.addr(),
        APP_USER,
        APP_PASSWORD,
        CapabilityFlags::empty(),
    );
    client.send(b"\x03INSERT INTO t (v) VALUES (1)");
    wait_for("the INSERT to park", PATIENCE, || s.parked() == 1);
    drop(client);
    wait_for("the waiter to go", PATIENCE, || s.parked() == 0);
    assert_eq!(s.released("client_gone"), 1);
}

async fn over_the_primarys_unix_socket_sessions_and_replica_streams_work_as_over_tcp<C: Cluster>() {
    let s = Strong::<C>::launch(2, None, |config, topology| {
        config.durability = blocking(2);
        config.primary = topology.primary_socket().to_str().unwrap().to_owned();
    });
    let mut conn = s.client().await;
    // The primary sees the session arrive over its socket, not over TCP.
    let host: String = conn
        .one("SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()")
        .await;
    assert_eq!(host, "localhost");
    // Both replica streams come over the socket too, so a commit waits for both and is
    // released by its quorum of two.
    s.stop_io(1);
    s.wait_semisync(1);
    let insert = s.park("INSERT INTO t (v) VALUES (1)", vec![]).await;
    s.start_io(1);
    expect_ok(insert).await;
    assert_eq!(s.released("quorum"), 1);
    conn.run("INSERT INTO t (v) VALUES (2)").await;
    assert_eq!(s.released("quorum"), 2);
    let primary_sum = s.topology.primary_sql("SELECT SUM(v) FROM sbtest.t");
    assert_eq!(primary_sum, "3");
}

/// The row is compared by `SHA2`: on MySQL 9.7 here `MD5(b)` fails with 1046 (looked up as a
/// stored function), SHA2 works on both.
async fn a_transaction_larger_than_a_packet_is_rechunked_and_held_by_both_replicas<C: Cluster>() {
    let s = start::<C>(2, OnTimeout::Error, Duration::from_secs(60));
    let mut conn = s.client().await;
    conn.run("CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)")
        .await;
    // Its rows event is over 16 MiB: spread over two packets, which the semisync header
    // shifts, so the proxy must put it back together and split it again.
    conn.query_drop("INSERT INTO big VALUES (1, REPEAT('x', 17 * 1024 * 1024))")
        .await
        .expect("held by both replicas");
    assert_eq!(s.released("timeout"), 0);
    s.topology.wait_replicas_caught_up();
    const DIGEST: &str = "SELECT SHA2(b, 256) FROM sbtest.big";
    let want = s.topology.primary_sql(DIGEST);
    assert_eq!(want.len(), 64, "{want}");
    for i in 0..2 {
        assert_eq!(s.topology.replica_sql(i, DIGEST), want, "replica {i}");
        s.topology.wait_replica_running(i);
    }
}

/// sysbench's libmariadb takes `caching_sha2_password`'s fast path once MySQL has cached the
/// account (a first login over the socket); the proxy's own full authentication is tested with
/// the clients that fetch the server's key.
async fn sysbench_write_only_through_the_proxy_leaves_three_identical_servers<C: Cluster>() {
    let s = start::<C>(1, OnTimeout::Error, Duration::from_secs(30));
    s.topology.cache_password(APP_USER, APP_PASSWORD);
    for i in 0..2 {
        assert!(s.topology.replica_semisync_on(i), "replica {i}");
    }
    let sysbench = Sysbench::new("oltp_write_only")
        .port(s.proxy.port())
        .threads(64)
        .tables(4)
        .table_size(10_000)
        .time(30);
    let report = tokio::task::spawn_blocking(move || {
        sysbench.prepare();
        sysbench.run()
    })
    .await
    .unwrap();
    assert_eq!(
        (report.errors, report.reconnects),
        (0, 0),
        "{}",
        report.summary()
    );
    assert!(report.transactions > 0);
    s.topology.wait_replicas_caught_up();
    const CHECKSUM: &str =
        "CHECKSUM TABLE sbtest.sbtest1, sbtest.sbtest2, sbtest.sbtest3, sbtest.sbtest4";
    let primary = s.topology.primary_sql(CHECKSUM);
    for i in 0..2 {
        assert_eq!(s.topology.replica_sql(i, CHECKSUM), primary, "replica {i}");
        assert!(s.topology.replica_semisync_on(i), "replica {i}");
        if let Some(acks) = s.topology.replica_acks_sent(i) {
            assert!(acks > 0, "replica {i} sent no ACK");
        }
    }
    let status = s.proxy.durability().status();
    assert_eq!(status.state, State::Strong);
    assert!(
        status.released["quorum"] >= report.transactions,
        "{status:?}"
    );
    assert_eq!(status.released["unresolved"], 0, "{status:?}");
    assert_eq!(
        status.released["timeout"] + status.released["degraded"],
        0,
        "{status:?}"
    );
    eprintln!("{}", report.summary());
}

each_server!(
    sysbench_write_only_through_the_proxy_leaves_three_identical_servers,
    a_transaction_larger_than_a_packet_is_rechunked_and_held_by_both_replicas,
    over_the_primarys_unix_socket_sessions_and_replica_streams_work_as_over_tcp,
    a_client_that_leaves_while_parked_leaves_no_waiter_behind,
    a_commit_parked_when_the_primary_dies_gets_the_policys_error_not_an_ok,
    quorum_one_parks_until_a_replica_has_the_transaction,
    quorum_two_waits_for_the_second_replica_which_then_has_the_transaction,
    on_timeout_error_answers_an_error_naming_the_gtid_and_the_connection_goes_on,
    on_timeout_degrade_releases_then_returns_to_strong_once_replicas_catch_up,
    on_timeout_block_waits_through_timeouts_until_a_replica_returns,
    without_quorum_immediate_applies_the_policy_at_once,
);

// === MySQL ===

/// MySQL gives `XA PREPARE` a GTID of its own (MariaDB does not: its XA is in
/// [`mariadb_xa_procedures_and_batches_each_park_and_wait_for_their_last_gtid`]).
#[tokio::test(flavor = "multi_thread")]
async fn mysql_xa_prepare_and_xa_commit_each_park_for_their_own_gtid() {
    let s = start::<MySqlTopology>(1, OnTimeout::Block, Duration::from_secs(3600));
    let mut xa = Some(xa_ended(&s).await);
    let mut gtids = Vec::new();
    for sql in ["XA PREPARE 'x'", "XA COMMIT 'x'"] {
        let mut conn = xa.take().unwrap();
        let witness = s.witness(0);
        let before = s.parked();
        let task = tokio::spawn(async move {
            let result = conn.query_drop(sql).await;
            let received = tokio::task::spawn_blocking(move || witness.received())
                .await
                .unwrap();
            (conn, result, received)
        });
        wait_for(&format!("{sql} to park"), PATIENCE, || {
            s.parked() == before + 1
        });
        let gtid = s.topology.newest_gtid();
        assert!(
            !MySqlTopology::holds(&s.witness(0).received(), &gtid),
            "{sql}"
        );
        s.start_io(0);
        let (conn, result, received) = joined(task).await;
        result.unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(
            MySqlTopology::holds(&received, &gtid),
            "{sql}: {gtid} not in {received:?}"
        );
        gtids.push(gtid);
        xa = Some(conn);
        s.stop_io(0);
        s.wait_semisync(0);
    }
    assert_ne!(
        gtids[0], gtids[1],
        "XA PREPARE and XA COMMIT each have a GTID"
    );
    assert_eq!(s.released("quorum"), 2);
}

/// A session whose XA branch 'x' inserted a row and ended, ready to prepare, with every
/// replica stopped.
async fn xa_ended<C: Cluster>(s: &Strong<C>) -> Conn {
    let mut xa = s.client().await;
    xa.run("XA START 'x'").await;
    xa.run("INSERT INTO t (v) VALUES (1)").await;
    xa.run("XA END 'x'").await;
    s.stop_all();
    xa
}

// === MariaDB ===

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_xa_procedures_and_batches_each_park_and_wait_for_their_last_gtid() {
    let s = Strong::start(2, blocking(1));
    let mut setup = s.client().await;
    setup
        .run("CREATE PROCEDURE two_commits() BEGIN INSERT INTO t (v) VALUES (10); INSERT INTO t (v) VALUES (11); END").await;
    let mut xa = Some(xa_ended(&s).await);

    // Each statement parks until a replica is back, then the replica goes away again.
    for sql in [
        "XA PREPARE 'x'",
        "XA COMMIT 'x'",
        "CALL two_commits()",
        "INSERT INTO t (v) VALUES (20); INSERT INTO t (v) VALUES (21)",
    ] {
        let mut conn = match sql.starts_with("XA") {
            true => xa.take().unwrap(),
            false => s.client().await,
        };
        let id = conn.id();
        let before = s.parked();
        let task = tokio::spawn(async move {
            let result = conn.query_drop(sql).await;
            (conn, result)
        });
        wait_for(&format!("{sql} to park"), PATIENCE, || {
            s.parked() == before + 1
        });
        let last = s.topology.primary.gtid_binlog_pos();
        s.start_io(0);
        let (conn, result) = joined(task).await;
        result.unwrap_or_else(|e| panic!("{sql}: {e}"));
        if sql.starts_with("XA") {
            xa = Some(conn);
        }
        // The commit waited for the last GTID the statement wrote.
        let reported = s.proxy.recorder.gtids_of(id);
        assert_eq!(reported.last(), Some(&last), "{sql}");
        s.stop_io(0);
        s.wait_semisync(0);
    }
    // The CREATE PROCEDURE, then each statement (a batch may park once per OK it reports).
    let status = s.proxy.durability().status();
    assert!(status.released["quorum"] >= 5, "{status:?}");
    assert_eq!(
        status.released["timeout"] + status.released["degraded"],
        0,
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_thousand_parked_commits_do_not_stop_reads_on_other_connections() {
    raise_open_files_limit();
    let s = Strong::start(2, blocking(1));
    s.stop_all();

    const PARKED: usize = 1000;
    let mut commits = Vec::with_capacity(PARKED);
    for i in 0..PARKED {
        let mut conn = s.client().await;
        commits.push(tokio::spawn(async move {
            conn.exec_drop("INSERT INTO t (v) VALUES (?)", (i,))
                .await
                .map(|()| conn)
        }));
    }
    wait_for("1000 parked commits", PATIENCE, || s.parked() == PARKED);

    // Meanwhile 16 other connections run point selects.
    let mut readers = Vec::new();
    for _ in 0..16 {
        let mut conn = s.client().await;
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
        let took = joined(reader).await;
        eprintln!("200 point selects while 1000 commits are parked: {took:?}");
    }
    assert_eq!(s.parked(), PARKED, "the commits stayed parked throughout");

    s.start_io(0);
    for commit in commits {
        joined(commit).await.unwrap();
    }
    assert_eq!(s.parked(), 0);
    assert_eq!(s.released("quorum"), PARKED as u64);
}

/// 1000 clients through an in-process proxy hold 3000 sockets in this process.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_batch_that_ends_inside_a_large_transaction_asks_for_the_ack_with_a_heartbeat() {
    let s = Strong::start(1, blocking(1));
    let replica = &s.topology.replicas[0];
    s.stop_all();
    // A small transaction, then one of about 8 MiB of row events, already in the binlog when
    // the replica comes back: its dump reads the small one's end together with the start of
    // the large one, and the batch ends inside the large one.
    let primary = &s.topology.primary;
    primary.sql(
        "SET SESSION max_recursive_iterations = 100000;
         CREATE TABLE sbtest.big (id INT PRIMARY KEY, pad VARCHAR(255));
         INSERT INTO sbtest.t (v) VALUES (1);
         INSERT INTO sbtest.big
             WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000)
             SELECT i, REPEAT('x', 250) FROM n;",
    );
    let heartbeats = |r: &support::mariadb::MariaDb| -> u64 {
        r.status_var("Slave_received_heartbeats").parse().unwrap()
    };
    let before = heartbeats(replica);
    s.start_io(0);
    s.wait_semisync(1);
    let target = primary.gtid_binlog_pos();
    wait_for("the replica to receive everything", PATIENCE, || {
        position_holds(&replica.slave_status()["Gtid_IO_Pos"], &target)
    });
    let status = replica.slave_status();
    assert_eq!(status["Slave_IO_Running"], "Yes", "{status:?}");
    assert_eq!(status["Last_IO_Errno"], "0", "{status:?}");
    assert!(
        heartbeats(replica) > before,
        "the ACK of the small transaction was asked for by a heartbeat inside the large one"
    );
    // The replica's ACKs count: a commit through the proxy gets its OK.
    let mut conn = s.client().await;
    conn.run("INSERT INTO sbtest.t (v) VALUES (2)").await;
    wait_for("the replica to apply everything", PATIENCE, || {
        replica.sql("SELECT COUNT(*) FROM sbtest.big") == "30000"
    });
}
