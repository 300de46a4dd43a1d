//! Strong sync on MySQL 9.7 end to end: a primary and two MySQL replicas replicating through
//! the proxy with semisync (GTID auto-position); commits acknowledged only once the quorum has
//! them, each witnessed by the replicas' own `RECEIVED_TRANSACTION_SET` at the moment the
//! client got its answer, under each timeout policy, for XA and with the tracker switched off.

use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::{OnTimeout, WithoutQuorum};
use strongsync::durability::State;
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::mysql_gtid::gtid_set_holds;
use support::mysql_topology::MySqlTopology;
use support::proxy::assert_not_acknowledged;
use support::strong::{answered, durability, Strong, Watched, PATIENCE};
use support::sysbench::Sysbench;

type MySqlStrong = Strong<MySqlTopology>;

fn start(quorum: usize, on_timeout: OnTimeout, ack_timeout: Duration) -> MySqlStrong {
    MySqlStrong::start_on(2, durability(quorum, on_timeout, ack_timeout))
}

async fn expect_ok(parked: tokio::task::JoinHandle<Watched>) -> Watched {
    let watched = answered(parked).await;
    watched.result.as_ref().unwrap();
    watched
}

#[tokio::test(flavor = "multi_thread")]
async fn quorum_one_parks_until_a_replica_has_the_transaction() {
    let s = start(1, OnTimeout::Block, Duration::from_secs(3600));
    s.stop_all();
    let insert = s
        .park(
            "INSERT INTO t (v) VALUES (1)",
            vec![s.witness(0), s.witness(1)],
        )
        .await;
    let gtid = s.topology.primary.newest_gtid();
    // Parked: neither replica has it (each was stopped before the commit).
    assert!(!gtid_set_holds(&s.witness(0).received(), &gtid));
    assert!(!gtid_set_holds(&s.witness(1).received(), &gtid));
    s.start_io(0);
    let watched = expect_ok(insert).await;
    assert!(
        gtid_set_holds(&watched.received[0], &gtid),
        "{gtid} not in replica 0's RECEIVED_TRANSACTION_SET {:?} when the OK came",
        watched.received[0]
    );
    assert_eq!(s.released("quorum"), 1);
    assert_eq!(s.parked(), 0);
    // With one replica up, a commit goes through on its ACK.
    let mut conn = s.client().await;
    conn.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .unwrap();
    assert_eq!(s.released("quorum"), 2);
    assert!(gtid_set_holds(
        &s.witness(0).received(),
        &s.topology.primary.newest_gtid()
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn quorum_two_waits_for_the_second_replica_which_then_has_the_transaction() {
    let s = start(2, OnTimeout::Block, Duration::from_secs(3600));
    s.stop_io(1);
    s.wait_semisync(1);
    let insert = s
        .park(
            "INSERT INTO t (v) VALUES (1)",
            vec![s.witness(0), s.witness(1)],
        )
        .await;
    let gtid = s.topology.primary.newest_gtid();
    wait_for("replica 0 to receive the transaction", PATIENCE, || {
        gtid_set_holds(&s.witness(0).received(), &gtid)
    });
    assert_eq!(s.parked(), 1, "one replica of the two is not the quorum");
    s.start_io(1);
    let watched = expect_ok(insert).await;
    for (i, received) in watched.received.iter().enumerate() {
        assert!(
            gtid_set_holds(received, &gtid),
            "replica {i}: {gtid} not in {received:?}"
        );
    }
    assert_eq!(s.released("quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_timeout_error_answers_an_error_naming_the_gtid_and_the_connection_goes_on() {
    let s = start(1, OnTimeout::Error, Duration::from_secs(1));
    s.stop_all();
    let mut conn = s.client().await;
    let err = conn
        .query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap_err();
    let gtid = s.topology.primary.newest_gtid();
    assert_not_acknowledged(&err, &gtid);
    assert!(!gtid_set_holds(&s.witness(0).received(), &gtid));
    let n: u64 = conn
        .query_first("SELECT COUNT(*) FROM t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 1, "the transaction did commit on the primary");
    assert_eq!(s.released("timeout"), 1);
    assert_eq!(s.state(), State::Strong);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_timeout_degrade_releases_then_returns_to_strong_once_replicas_catch_up() {
    let s = start(1, OnTimeout::Degrade, Duration::from_secs(1));
    s.stop_all();
    let mut conn = s.client().await;
    conn.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap();
    assert_eq!(s.released("timeout"), 1);
    assert_eq!(s.state(), State::Degraded);
    conn.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .unwrap();
    assert_eq!(s.released("degraded"), 1);
    let released = s.proxy.durability().status().released_without_quorum;
    assert_eq!(released.count(), 2, "{released}");

    s.start_io(0);
    s.start_io(1);
    wait_for("STRONG again", PATIENCE, || s.state() == State::Strong);
    let gtid = s.topology.primary.newest_gtid();
    assert!(
        gtid_set_holds(&s.witness(0).received(), &gtid)
            || gtid_set_holds(&s.witness(1).received(), &gtid)
    );
    conn.query_drop("INSERT INTO t (v) VALUES (3)")
        .await
        .unwrap();
    assert_eq!(
        s.released("quorum"),
        1,
        "the next commit waited for its quorum"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_timeout_block_waits_through_timeouts_until_a_replica_returns() {
    let s = start(1, OnTimeout::Block, Duration::from_millis(300));
    s.stop_all();
    let insert = s
        .park("INSERT INTO t (v) VALUES (1)", vec![s.witness(1)])
        .await;
    wait_for("the commit to outlast its ACK timeout", PATIENCE, || {
        s.proxy.durability().status().parked_overdue == 1
    });
    assert!(!insert.is_finished());
    assert_eq!(s.released_total(), 0);
    let gtid = s.topology.primary.newest_gtid();
    s.start_io(1);
    let watched = expect_ok(insert).await;
    assert!(
        gtid_set_holds(&watched.received[0], &gtid),
        "{:?}",
        watched.received
    );
    assert_eq!(s.released("quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_quorum_immediate_applies_the_policy_at_once() {
    let mut config = durability(1, OnTimeout::Error, Duration::from_secs(3600));
    config.without_quorum = WithoutQuorum::Immediate;
    let s = MySqlStrong::start_on(2, config);
    s.stop_all();
    let mut conn = s.client().await;
    let result = tokio::time::timeout(PATIENCE, conn.query_drop("INSERT INTO t (v) VALUES (1)"))
        .await
        .expect("no waiting for the timeout");
    assert!(
        matches!(result, Err(mysql_async::Error::Server(ref e)) if e.code == 1105),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn xa_prepare_and_xa_commit_each_park_for_their_own_gtid() {
    let s = start(1, OnTimeout::Block, Duration::from_secs(3600));
    let mut xa = s.client().await;
    xa.query_drop("XA START 'x'").await.unwrap();
    xa.query_drop("INSERT INTO t (v) VALUES (1)").await.unwrap();
    xa.query_drop("XA END 'x'").await.unwrap();
    s.stop_all();
    let mut xa = Some(xa);
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
        let gtid = s.topology.primary.newest_gtid();
        assert!(!gtid_set_holds(&s.witness(0).received(), &gtid), "{sql}");
        s.start_io(0);
        let (conn, result, received) = tokio::time::timeout(PATIENCE, task)
            .await
            .expect("released")
            .unwrap();
        result.unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(
            gtid_set_holds(&received, &gtid),
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

#[test]
fn sysbench_write_only_through_the_proxy_leaves_three_identical_servers() {
    let s = start(1, OnTimeout::Error, Duration::from_secs(30));
    // libmariadb's caching_sha2_password takes the fast path once the server has cached the
    // account (a first login over the socket); the proxy's own full authentication is tested
    // with the clients that fetch the server's key.
    s.topology.primary.cache_password(APP_USER, APP_PASSWORD);
    let sysbench = Sysbench::new("oltp_write_only")
        .port(s.proxy.port())
        .threads(16)
        .tables(2)
        .table_size(2_000)
        .time(20);
    sysbench.prepare();
    let report = sysbench.run();
    assert_eq!(
        (report.errors, report.reconnects),
        (0, 0),
        "{}",
        report.summary()
    );
    assert!(report.transactions > 0);
    s.topology.wait_replicas_caught_up();
    let tables = "CHECKSUM TABLE sbtest.sbtest1, sbtest.sbtest2";
    let primary = s.topology.primary.sql(tables);
    for replica in &s.topology.replicas {
        assert_eq!(replica.sql(tables), primary);
        assert_eq!(replica.status_var("Rpl_semi_sync_replica_status"), "ON");
    }
    let status = s.proxy.durability().status();
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
