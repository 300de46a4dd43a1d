//! The read barrier (`visibility = "quorum"`): no response a client gets reveals a transaction
//! the quorum does not hold. Proved from the replica's own record of what it had received
//! (`Gtid_IO_Pos`, `RECEIVED_TRANSACTION_SET`) at the moment a reader got its answer; the
//! control, `visibility = "commit"`, shows the same reader seeing what the replica does not
//! have. MySQL makes a transaction's rows visible to other sessions before its GTID is in
//! `gtid_executed`, never before it is in the binlog, so there the barrier bounds each response
//! by the primary's binlog position. The tests written over [`Cluster`] run on MariaDB 10.11
//! and MySQL 9.7; the others are MariaDB's, and say so.

use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::ProbeConfig;
use strongsync::config::{DurabilityConfig, OnTimeout, Visibility};
use support::admin;
use support::cluster::Cluster;
use support::each_server;
use support::mariadb::{wait_for, MariaDb};
use support::sql::Statements;
use support::strong::{durability, joined, position_holds, Strong, Witness, PATIENCE};
use support::topology::Topology;
use tokio::task::JoinHandle;

const PROBE_USER: &str = "probe";
const PROBE_PASSWORD: &str = "probe-secret";

/// One replica through a proxy with the read barrier on, waiting as long as it takes.
fn blocking_barrier<C: Cluster>() -> Strong<C> {
    barrier_as::<C>(
        Visibility::Quorum,
        OnTimeout::Block,
        Duration::from_secs(3600),
    )
}

/// One MariaDB replica through a proxy with the read barrier on and the given policy.
fn barrier(on_timeout: OnTimeout, ack_timeout: Duration) -> Strong {
    barrier_as::<Topology>(Visibility::Quorum, on_timeout, ack_timeout)
}

/// One replica through a proxy with the given visibility and policy. On MySQL the probe
/// account may read the binlog position (`REPLICATION CLIENT`); MariaDB's needs nothing.
fn barrier_as<C: Cluster>(
    visibility: Visibility,
    on_timeout: OnTimeout,
    ack_timeout: Duration,
) -> Strong<C> {
    Strong::<C>::launch(1, None, |config, topology| {
        topology.primary_sql(&format!(
            "CREATE USER '{PROBE_USER}'@'%' IDENTIFIED BY '{PROBE_PASSWORD}'"
        ));
        if C::MYSQL {
            topology.primary_sql(&format!(
                "GRANT REPLICATION CLIENT ON *.* TO '{PROBE_USER}'@'%'"
            ));
        }
        config.durability = DurabilityConfig {
            visibility,
            ..durability(1, on_timeout, ack_timeout)
        };
        config.probe = ProbeConfig::account_of(PROBE_USER, PROBE_PASSWORD);
    })
}

/// What a reader got, with what the witness had received the moment it got it.
struct Read {
    conn: mysql_async::Conn,
    result: mysql_async::Result<Vec<i64>>,
    received: String,
}

/// Runs `sql` (returning one integer column) on `conn` in the background; the moment its answer
/// arrives, reads what `witness` has received.
fn spawn_read(mut conn: mysql_async::Conn, sql: &str, witness: Witness) -> JoinHandle<Read> {
    let sql = sql.to_owned();
    tokio::spawn(async move {
        let result = conn.query::<i64, _>(sql).await;
        let received = tokio::task::spawn_blocking(move || witness.received())
            .await
            .expect("witness read");
        Read {
            conn,
            result,
            received,
        }
    })
}

async fn answer(read: JoinHandle<Read>) -> Read {
    joined(read).await
}

/// Commits on the primary itself (no proxy, so nothing waits for it) and returns its GTID.
fn commit_directly<C: Cluster>(s: &Strong<C>, v: i64) -> String {
    s.topology
        .primary_sql(&format!("INSERT INTO sbtest.t (v) VALUES ({v})"));
    s.topology.newest_gtid()
}

/// Reads the row of `sbtest.t` with value `v` on `conn`, answered whenever it is released.
async fn read_value<C: Cluster>(s: &Strong<C>, conn: mysql_async::Conn, v: i64) -> Read {
    answer(spawn_read(
        conn,
        &format!("SELECT v FROM sbtest.t WHERE v = {v}"),
        s.witness(0),
    ))
    .await
}

/// Stops the replica's I/O thread and waits until the proxy has no semisync replica.
fn lose_quorum<C: Cluster>(s: &Strong<C>) {
    s.stop_io(0);
    s.wait_semisync(0);
}

fn reads_held<C: Cluster>(s: &Strong<C>) -> usize {
    s.proxy.durability().status().reads_parked
}

fn reads_released<C: Cluster>(s: &Strong<C>, outcome: &str) -> u64 {
    s.proxy.durability().status().reads_released[outcome]
}

/// Waits until the proxy's read barrier holds `n` responses.
fn wait_reads_held<C: Cluster>(s: &Strong<C>, n: usize) {
    wait_for(&format!("{n} held read(s)"), PATIENCE, || {
        reads_held(s) == n
    });
}

/// Runs `sql` on `conn` while the replica's I/O thread is stopped: the read barrier must hold it
/// until the thread runs again, and its answer must come only once the replica has `gtid`.
async fn held_until_replica_has<C: Cluster>(
    s: &Strong<C>,
    conn: mysql_async::Conn,
    sql: &str,
    gtid: &str,
) -> Read {
    // A statement of many MiB is named by its start.
    let what: String = sql.chars().take(80).collect();
    let reader = spawn_read(conn, sql, s.witness(0));
    wait_reads_held(s, 1);
    assert!(
        !reader.is_finished(),
        "{what}: answered before the replica ran"
    );
    s.start_io(0);
    let read = answer(reader).await;
    assert!(
        C::holds(&read.received, gtid),
        "{what}: answered when the replica had received only {}",
        read.received
    );
    read
}

async fn a_read_of_an_unacknowledged_write_is_held_until_the_quorum_has_it<C: Cluster>() {
    let s = blocking_barrier::<C>();
    // Connecting reads too: without its quorum, under `block`, it would wait as well.
    let conn = s.client().await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 42);

    let read = held_until_replica_has(&s, conn, "SELECT v FROM sbtest.t WHERE v = 42", &gtid).await;
    assert_eq!(read.result.expect("the read"), vec![42]);
    let status = s.proxy.durability().status();
    assert!(status.reads_queued >= 1, "the read never waited");
    assert_eq!(status.reads_released["unresolved"], 0);
}

async fn every_kind_of_response_waits_a_duplicate_key_error_and_affected_rows_in_a_transaction<
    C: Cluster,
>() {
    let s = blocking_barrier::<C>();
    s.topology
        .primary_sql("CREATE TABLE sbtest.u (id INT PRIMARY KEY, v INT)");
    s.topology.wait_replicas_caught_up();
    let mut conn = s.client().await;
    lose_quorum(&s);
    s.topology.primary_sql("INSERT INTO sbtest.u VALUES (7, 7)");
    let gtid = s.topology.newest_gtid();

    // A duplicate key reveals the row; the client's own statement commits nothing.
    let witness = s.witness(0);
    let duplicate = tokio::spawn(async move {
        let result = conn.query_drop("INSERT INTO sbtest.u VALUES (7, 8)").await;
        (result, witness.received())
    });
    wait_reads_held(&s, 1);
    s.start_io(0);
    let (result, received) = joined(duplicate).await;
    let error = result.expect_err("a duplicate key");
    assert!(error.to_string().contains("Duplicate entry"), "{error}");
    assert!(
        C::holds(&received, &gtid),
        "the duplicate key revealed {gtid} when the replica had only {received}"
    );

    // Inside a transaction, an UPDATE's affected rows reveal the row it found.
    let mut conn = s.client().await;
    conn.run("BEGIN").await;
    lose_quorum(&s);
    s.topology.primary_sql("INSERT INTO sbtest.u VALUES (8, 8)");
    let gtid = s.topology.newest_gtid();
    let witness = s.witness(0);
    let update = tokio::spawn(async move {
        conn.run("UPDATE sbtest.u SET v = 0 WHERE id = 8").await;
        let found = conn.affected_rows();
        let received = witness.received();
        conn.run("ROLLBACK").await;
        (found, received)
    });
    wait_reads_held(&s, 1);
    s.start_io(0);
    let (found, received) = joined(update).await;
    assert_eq!(found, 1);
    assert!(
        C::holds(&received, &gtid),
        "the UPDATE revealed {gtid} when the replica had only {received}"
    );
}

async fn the_control_with_visibility_commit_a_reader_sees_what_no_replica_has_and_a_reload_closes_it<
    C: Cluster,
>() {
    let s = blocking_barrier::<C>();
    let commit_visibility = DurabilityConfig {
        visibility: Visibility::Commit,
        ..s.proxy.durability().config()
    };
    s.proxy.durability().reconfigure(commit_visibility.clone());
    let conn = s.client().await;
    lose_quorum(&s);

    let gtid = commit_directly(&s, 5);
    let read = read_value(&s, conn, 5).await;
    assert_eq!(read.result.expect("the read"), vec![5]);
    assert!(
        !C::holds(&read.received, &gtid),
        "the control is void: the replica already had {gtid} ({})",
        read.received
    );

    // The same session, after a reload to `quorum`, cannot see the next one early.
    s.proxy.durability().reconfigure(DurabilityConfig {
        visibility: Visibility::Quorum,
        ..commit_visibility.clone()
    });
    let gtid = commit_directly(&s, 6);
    let read =
        held_until_replica_has(&s, read.conn, "SELECT v FROM sbtest.t WHERE v = 6", &gtid).await;
    assert_eq!(read.result.expect("the read"), vec![6]);

    // A reload back to `commit` lets a held read go at once.
    lose_quorum(&s);
    let gtid = commit_directly(&s, 7);
    let reader = spawn_read(
        read.conn,
        "SELECT v FROM sbtest.t WHERE v = 7",
        s.witness(0),
    );
    wait_reads_held(&s, 1);
    s.proxy.durability().reconfigure(commit_visibility.clone());
    let read = answer(reader).await;
    assert_eq!(read.result.expect("the read"), vec![7]);
    assert!(!C::holds(&read.received, &gtid), "{}", read.received);
    assert_eq!(reads_held(&s), 0);
}

async fn a_read_behind_a_commit_that_degraded_is_released_with_it<C: Cluster>() {
    let s = barrier_as::<C>(
        Visibility::Quorum,
        OnTimeout::Degrade,
        Duration::from_secs(2),
    );
    let writer = s.client().await;
    let reader = s.client().await;
    lose_quorum(&s);
    // The writer's commit parks (its OK waits), but the row is committed on the primary.
    let mut writer = writer;
    let write = tokio::spawn(async move {
        writer
            .query_drop("INSERT INTO sbtest.t (v) VALUES (9)")
            .await
    });
    s.wait_parked(1);
    let read = spawn_read(reader, "SELECT v FROM sbtest.t WHERE v = 9", s.witness(0));
    wait_reads_held(&s, 1);
    let read = answer(read).await;
    assert_eq!(read.result.expect("the read"), vec![9]);
    joined(write)
        .await
        .expect("degrade releases the commit with its OK");
    let status = s.proxy.durability().status();
    assert_eq!(status.state, strongsync::durability::State::Degraded);
    assert_eq!(status.released["timeout"], 1);
    // The read went with the commit, not by a timeout of its own.
    assert_eq!(
        status.reads_released["degraded"], 1,
        "{:?}",
        status.reads_released
    );
    assert_eq!(status.reads_released["timeout"], 0);
}

async fn under_error_a_read_whose_quorum_does_not_come_gets_an_error_instead_of_the_data<
    C: Cluster,
>() {
    let s = barrier_as::<C>(Visibility::Quorum, OnTimeout::Error, Duration::from_secs(2));
    let reader = s.client().await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 11);
    let read = read_value(&s, reader, 11).await;
    let error = read.result.expect_err("an error instead of the row");
    let text = error.to_string();
    assert!(text.contains("response withheld"), "{text}");
    // The error names the bound: the GTID on MariaDB, the binlog position MySQL's bound is.
    if C::MYSQL {
        assert!(
            text.contains("binlog "),
            "the error names a binlog position: {text}"
        );
    } else {
        assert!(text.contains(&gtid), "the error names {gtid}: {text}");
    }
    assert!(!C::holds(&read.received, &gtid));
    // The session goes on: once the quorum holds it, the same read is answered.
    let mut conn = read.conn;
    s.start_io(0);
    let rows: Vec<i64> = conn
        .query("SELECT v FROM sbtest.t WHERE v = 11")
        .await
        .expect("the session is usable");
    assert_eq!(rows, vec![11]);
    assert_eq!(s.proxy.durability().status().reads_released["timeout"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_the_probe_connection_lost_is_opened_again_and_while_it_cannot_be_reads_wait() {
    let s = barrier(OnTimeout::Block, Duration::from_secs(3600));
    let primary = &s.topology.primary;
    let mut conn = s.client().await;
    let rows: Vec<i64> = conn.query("SELECT COUNT(*) FROM sbtest.t").await.unwrap();
    assert_eq!(rows, vec![0]);
    let probe_ids = || {
        primary.sql(&format!(
            "SELECT GROUP_CONCAT(id) FROM information_schema.processlist WHERE user = '{PROBE_USER}'"
        ))
    };
    // The probe's account also holds the watch of the primary: kill every connection it has.
    let kill_all = |ids: &str| {
        for id in ids.split(',') {
            primary.sql(&format!("KILL {id}"));
        }
    };
    let first = probe_ids();
    assert!(
        !first.is_empty() && first != "NULL",
        "the probe is connected"
    );

    // Lost: the next reading fails, and the probe reconnects.
    kill_all(&first);
    let rows: Vec<i64> = conn.query("SELECT COUNT(*) FROM sbtest.t").await.unwrap();
    assert_eq!(rows, vec![0]);
    let second = probe_ids();
    assert!(
        !second.is_empty() && second != "NULL" && second != first,
        "{first} then {second}"
    );

    // While it cannot reconnect, a read waits (under `block`, for as long as that lasts).
    let failed = |s: &Strong| {
        admin::metrics(s.proxy.admin_addr())
            .get(r#"strongsync_probe_bounds_total{result="failed"}"#)
    };
    primary.sql(&format!("ALTER USER '{PROBE_USER}'@'%' ACCOUNT LOCK"));
    kill_all(&second);
    let before = failed(&s);
    let reader = spawn_read(conn, "SELECT COUNT(*) FROM sbtest.t", s.witness(0));
    wait_for("the probe to fail twice", PATIENCE, || {
        failed(&s) >= before + 2.0
    });
    assert!(!reader.is_finished(), "the read went without a bound");
    primary.sql(&format!("ALTER USER '{PROBE_USER}'@'%' ACCOUNT UNLOCK"));
    let read = answer(reader).await;
    assert_eq!(read.result.expect("the read"), vec![0]);
    assert_eq!(
        s.proxy.durability().status().reads_released["unresolved"],
        0
    );
}

async fn with_no_write_in_flight_a_read_goes_after_the_probe_without_queueing<C: Cluster>() {
    let s = blocking_barrier::<C>();
    s.topology
        .primary_sql("INSERT INTO sbtest.t (v) VALUES (1)");
    let gtid = s.topology.newest_gtid();
    let mut conn = s.client().await;
    wait_for("the replica to ACK the insert", PATIENCE, || {
        let status = s.proxy.durability().status();
        status
            .replicas
            .iter()
            .all(|r| C::holds(&r.held.to_string(), &gtid))
    });
    let queued_before = s.proxy.durability().status().reads_queued;
    let released_before = reads_released(&s, "quorum");
    for _ in 0..50 {
        let rows: Vec<i64> = conn.query("SELECT v FROM sbtest.t").await.unwrap();
        assert_eq!(rows, vec![1]);
    }
    let status = s.proxy.durability().status();
    assert_eq!(status.reads_released["quorum"], released_before + 50);
    assert_eq!(
        status.reads_queued, queued_before,
        "a read waited although the quorum held everything it could reveal"
    );
    let scrape = admin::metrics(s.proxy.admin_addr());
    assert!(scrape.get(r#"strongsync_probe_bounds_total{result="ok"}"#) >= 50.0);
}

async fn begin_rollback_ping_and_reset_reveal_nothing_and_go_at_once_while_anything_else_waits<
    C: Cluster,
>() {
    let s = blocking_barrier::<C>();
    let mut conn = s.client().await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 3);
    // Not held (the quorum is gone for good until the replica is back): they return.
    conn.run("BEGIN").await;
    conn.run("ROLLBACK").await;
    // Nor do a ping or a reset (connection pools check and recycle their connections so).
    conn.ping().await.unwrap();
    conn.reset().await.unwrap();
    assert_eq!(reads_held(&s), 0);
    // Anything else waits, however harmless it looks.
    let read = held_until_replica_has(&s, conn, "SELECT 1", &gtid).await;
    assert_eq!(read.result.expect("the read"), vec![1]);
}

async fn everything_a_session_does_works_under_the_barrier<C: Cluster>() {
    let s = blocking_barrier::<C>();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.csv");
    let rows: String = (0..5_000).map(|i| format!("{i},{}\n", i * 2)).collect();
    std::fs::write(&path, rows).unwrap();
    let path = path.display().to_string();
    let opts = mysql_async::OptsBuilder::from_opts(
        mysql_async::Opts::from_url(
            &s.proxy
                .url(support::mariadb::APP_USER, support::mariadb::APP_PASSWORD),
        )
        .unwrap(),
    )
    .max_allowed_packet(Some(64 << 20))
    .local_infile_handler(Some(mysql_async::WhiteListFsHandler::new(
        &[path.as_str()][..],
    )));
    let mut conn = mysql_async::Conn::new(opts).await.unwrap();
    let reads_before = s.proxy.durability().status().reads_released["quorum"];

    // LOCAL INFILE: the file request goes out after its bound, the upload follows.
    conn.run("CREATE TABLE sbtest.loaded (id INT PRIMARY KEY, v INT)")
        .await;
    conn.run(format!(
        "LOAD DATA LOCAL INFILE '{path}' INTO TABLE sbtest.loaded FIELDS TERMINATED BY ','"
    ))
    .await;
    assert_eq!(conn.affected_rows(), 5_000);

    // Prepared statements, in the binary protocol.
    let stmt = conn
        .prep("SELECT v FROM sbtest.loaded WHERE id = ?")
        .await
        .unwrap();
    let v: Option<i64> = conn.exec_first(&stmt, (21,)).await.unwrap();
    assert_eq!(v, Some(42));

    // Several results in one response.
    let mut results = conn
        .query_iter("SELECT COUNT(*) FROM sbtest.loaded; SELECT MAX(v) FROM sbtest.loaded")
        .await
        .unwrap();
    let count: Vec<i64> = results.collect().await.unwrap();
    let max: Vec<i64> = results.collect().await.unwrap();
    drop(results);
    assert_eq!((count, max), (vec![5_000], vec![9_998]));

    // A result set of several MiB goes in parts, each bounded when it goes.
    let probes_before =
        admin::metrics(s.proxy.admin_addr()).get(r#"strongsync_probe_bounds_total{result="ok"}"#);
    let big: Vec<(i64, String)> = conn
        .query("SELECT id, REPEAT('x', 1000) FROM sbtest.loaded ORDER BY id")
        .await
        .unwrap();
    assert_eq!(big.len(), 5_000);
    assert!(big
        .iter()
        .enumerate()
        .all(|(i, (id, x))| *id == i as i64 && x.len() == 1000));
    let probes =
        admin::metrics(s.proxy.admin_addr()).get(r#"strongsync_probe_bounds_total{result="ok"}"#);
    assert!(
        probes - probes_before >= 4.0,
        "a 5 MB result set was bounded {} time(s)",
        probes - probes_before
    );

    // The mariadb command-line client, whose own start-up queries go through the barrier too.
    let port = s.proxy.port();
    let out = tokio::task::spawn_blocking(move || {
        support::cli::mariadb(
            port,
            support::mariadb::APP_USER,
            support::mariadb::APP_PASSWORD,
        )
        .args(["--batch", "--skip-column-names"])
        .execute("SELECT COUNT(*) FROM sbtest.loaded; SHOW WARNINGS")
        .expect_success()
    })
    .await
    .unwrap();
    assert_eq!(out.stdout.trim(), "5000");

    let status = s.proxy.durability().status();
    assert!(status.reads_released["quorum"] > reads_before);
    assert_eq!(status.reads_released["unresolved"], 0);
    assert_eq!(status.reads_parked, 0);
}

/// [`barrier`] with `visibility = "snapshot"`, `innodb_snapshot_isolation = ON` for every new
/// session on the primary, a secondary index on `sbtest.t.v`, and a MyISAM table beside the
/// InnoDB ones.
fn snapshot_barrier() -> Strong {
    snapshot_isolation(barrier_as(
        Visibility::Snapshot,
        OnTimeout::Block,
        Duration::from_secs(3600),
    ))
}

fn snapshot_isolation(s: Strong) -> Strong {
    let primary = &s.topology.primary;
    primary.sql("SET GLOBAL innodb_snapshot_isolation = ON");
    primary.sql("ALTER TABLE sbtest.t ADD INDEX (v)");
    primary.sql("CREATE TABLE sbtest.m (v INT) ENGINE=MyISAM");
    primary.sql("CREATE TABLE sbtest.u (id INT PRIMARY KEY, k INT UNIQUE)");
    primary.sql("CREATE TABLE sbtest.log (id INT AUTO_INCREMENT PRIMARY KEY)");
    primary.sql(
        "DELIMITER //\nCREATE FUNCTION sbtest.logged() RETURNS INT DETERMINISTIC MODIFIES SQL DATA \
         BEGIN INSERT INTO sbtest.log VALUES (); RETURN 1; END//",
    );
    s.topology.wait_replicas_caught_up();
    s
}

fn reads_in_snapshot(s: &Strong) -> u64 {
    s.proxy.durability().status().reads_in_snapshot
}

/// On a new session: `before`, then `BEGIN`, a first read (bounded as usual), then `inside`.
async fn open_snapshot(s: &Strong, before: &[&str], inside: &[&str]) -> mysql_async::Conn {
    let mut conn = s.client().await;
    for sql in before {
        conn.run(*sql).await;
    }
    conn.run("BEGIN").await;
    let _: Vec<i64> = conn.query("SELECT COUNT(*) FROM sbtest.t").await.unwrap();
    for sql in inside {
        conn.run(*sql).await;
    }
    conn
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_reads_of_a_bounded_snapshot_go_at_once_and_what_it_cannot_show_stays_held() {
    let s = snapshot_barrier();
    let mut conn = open_snapshot(&s, &[], &[]).await;
    let stmt = conn
        .prep("SELECT COUNT(*) FROM sbtest.t WHERE v = ?")
        .await
        .unwrap();
    lose_quorum(&s);
    let gtid = commit_directly(&s, 42);

    // The snapshot predates the write: reading it reveals nothing, so it goes, under `block`
    // with no quorum, before the replica has the write. A prepared statement too.
    let read = answer(spawn_read(
        conn,
        "SELECT COUNT(*) FROM sbtest.t WHERE v = 42",
        s.witness(0),
    ))
    .await;
    assert_eq!(read.result.expect("the read"), vec![0]);
    assert!(
        !position_holds(&read.received, &gtid),
        "the replica already had {gtid}: the test proves nothing"
    );
    let mut conn = read.conn;
    let count: Option<i64> = conn.exec_first(&stmt, (42,)).await.unwrap();
    assert_eq!(count, Some(0));
    assert!(reads_in_snapshot(&s) >= 2);

    // A locking read meets the newer row: the error it gets (and the rollback) says a row
    // changed, so it waits for the quorum like any other revealing answer.
    let read = held_until_replica_has(
        &s,
        conn,
        "SELECT COUNT(*) FROM sbtest.t WHERE v = 42 FOR UPDATE",
        &gtid,
    )
    .await;
    let error = read.result.expect_err("a row changed since the snapshot");
    assert!(
        matches!(&error, mysql_async::Error::Server(e) if e.code == 1020),
        "{error}"
    );

    // The error ended the transaction: the next read is bounded again.
    s.wait_semisync(1);
    lose_quorum(&s);
    let gtid = commit_directly(&s, 43);
    let read = held_until_replica_has(
        &s,
        read.conn,
        "SELECT COUNT(*) FROM sbtest.t WHERE v = 43",
        &gtid,
    )
    .await;
    assert_eq!(read.result.expect("the read"), vec![1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_transaction_that_may_see_past_its_snapshot_is_bounded_statement_by_statement() {
    let s = snapshot_barrier();
    // (what the session did before BEGIN, what it did in the transaction after its first read,
    // the statement that must then wait for the quorum)
    let cases: [(&[&str], &[&str], &str); 11] = [
        // It wrote (a unique index is checked against rows deleted since the snapshot).
        (
            &[],
            &["INSERT INTO sbtest.u VALUES (1, 1)"],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        // A SELECT wrote, through a function.
        (
            &[],
            &["SELECT sbtest.logged()"],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        // It read a non-transactional table.
        (
            &[],
            &["SELECT COUNT(*) FROM sbtest.m"],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        // Isolation without one snapshot per transaction, for the session or the next one.
        (
            &["SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"],
            &[],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        (
            &["SET TRANSACTION ISOLATION LEVEL READ COMMITTED"],
            &[],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        // A locking read through a secondary index shows newer rows without error 1020.
        (
            &[],
            &[],
            "SELECT COUNT(*) FROM sbtest.t WHERE v = 7 LOCK IN SHARE MODE",
        ),
        // Locking reads through the clustered index would show newer rows too.
        (
            &["SET SESSION innodb_snapshot_isolation = OFF"],
            &[],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        // A transaction not started by BEGIN (the next one, without autocommit).
        (
            &["SET autocommit = 0"],
            &["COMMIT"],
            "SELECT COUNT(*) FROM sbtest.t",
        ),
        // Statements whose answers do not come from the snapshot, in a covered transaction.
        (
            &[],
            &[],
            "SELECT COUNT(*) FROM information_schema.innodb_trx",
        ),
        (&[], &[], "SELECT LENGTH(@@global.gtid_binlog_pos)"),
        (&[], &[], "SELECT LENGTH(LOAD_FILE('/etc/hostname'))"),
    ];
    for (before, inside, held) in cases {
        eprintln!("case: {before:?} {inside:?} {held}");
        let conn = open_snapshot(&s, before, inside).await;
        lose_quorum(&s);
        let gtid = commit_directly(&s, 7);
        let read = held_until_replica_has(&s, conn, held, &gtid).await;
        read.result
            .unwrap_or_else(|e| panic!("{before:?} {inside:?} {held}: {e}"));
        s.wait_semisync(1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_the_begin_of_a_snapshot_waits_for_what_the_snapshot_holds_and_its_reads_then_go() {
    let s = snapshot_barrier();
    let conn = s.client().await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 42);
    // The snapshot is taken at BEGIN and holds the write: BEGIN's OK waits for the quorum.
    let begun = held_until_replica_has(&s, conn, "BEGIN", &gtid).await;
    begun.result.expect("BEGIN");
    // Its reads need no bound of their own.
    let before = reads_in_snapshot(&s);
    let read = read_value(&s, begun.conn, 42).await;
    assert_eq!(read.result.expect("the read"), vec![42]);
    assert_eq!(reads_in_snapshot(&s), before + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_statement_of_16_mib_or_more_is_bounded_even_in_a_snapshot() {
    let s = snapshot_barrier();
    let opts = mysql_async::OptsBuilder::from_opts(
        mysql_async::Opts::from_url(
            &s.proxy
                .url(support::mariadb::APP_USER, support::mariadb::APP_PASSWORD),
        )
        .unwrap(),
    )
    .max_allowed_packet(Some(64 << 20));
    let mut conn = mysql_async::Conn::new(opts).await.unwrap();
    conn.run("BEGIN").await;
    let _: Vec<i64> = conn.query("SELECT COUNT(*) FROM sbtest.t").await.unwrap();
    lose_quorum(&s);
    let gtid = commit_directly(&s, 9);
    // What reveals the write comes after the first 16 MiB packet of the statement.
    let padding = "x".repeat(17 << 20);
    let sql = format!("SELECT LENGTH('{padding}') + LENGTH(@@global.gtid_binlog_pos)");
    let read = held_until_replica_has(&s, conn, &sql, &gtid).await;
    read.result.expect("the read");
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_with_visibility_quorum_every_read_of_a_transaction_is_bounded_even_under_snapshot_isolation(
) {
    let s = snapshot_isolation(barrier(OnTimeout::Block, Duration::from_secs(3600)));
    let conn = open_snapshot(&s, &[], &[]).await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 5);
    let read = held_until_replica_has(&s, conn, "SELECT COUNT(*) FROM sbtest.t", &gtid).await;
    read.result.expect("the read");
    assert_eq!(reads_in_snapshot(&s), 0);
}

/// A probe of `db` alone, as the replication account (which may read the binlog's status).
fn probe_of(
    db: &MariaDb,
) -> (
    strongsync::probe::Probe,
    tokio::sync::watch::Sender<(u64, String)>,
) {
    use support::mariadb::{REPL_PASSWORD, REPL_USER};
    let (primary, upstream) = tokio::sync::watch::channel((1, db.addr()));
    let account = strongsync::config::ProbeAccount {
        user: REPL_USER.into(),
        password: REPL_PASSWORD.into(),
        tls: strongsync::config::PrimaryTls::Preferred,
        tls_ca: None,
    };
    (
        strongsync::probe::Probe::new(upstream, &account, PATIENCE),
        primary,
    )
}

/// The reading MariaDB answers most often (every read under the barrier waits for one) is
/// prepared once per probe connection, so that the primary parses it once, not per reading.
#[tokio::test(flavor = "multi_thread")]
async fn the_mariadb_bound_is_prepared_once_and_executed_for_each_reading() {
    use strongsync::flavour::Flavour;
    use support::mariadb::MariaDbOptions;

    let db = MariaDb::start(MariaDbOptions::default());
    let (probe, _primary) = probe_of(&db);
    let counters = || {
        let count = |name: &str| -> u64 { db.status_var(name).parse().unwrap() };
        (count("Com_stmt_prepare"), count("Com_stmt_execute"))
    };
    let before = counters();
    for round in 0..3 {
        db.sql(&format!("CREATE DATABASE prepared_{round}"));
        let reading = probe.binlog_position(Flavour::MariaDb).await.unwrap();
        assert_eq!(
            *reading,
            strongsync_proto::gtid::GtidPosition::parse(db.gtid_binlog_pos().as_bytes()).unwrap(),
            "round {round}"
        );
    }
    let after = counters();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 3),
        "prepared once, executed three times"
    );
}

/// A primary that does not know `SHOW BINARY LOG STATUS` (MySQL before 8.2, which has only
/// `SHOW MASTER STATUS`) is asked the older statement, on the same connection from then on.
/// MariaDB 10.11 stands in for it: it rejects the new name with a parse error and answers the
/// old one with the same `File` and `Position` columns, so it is probed here as a MySQL primary.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_primary_without_show_binary_log_status_is_bounded_by_show_master_status() {
    use strongsync::flavour::Flavour;
    use strongsync_proto::gtid::GtidPosition;
    use strongsync_proto::position::Position;
    use support::mariadb::{MariaDbOptions, REPL_USER};

    let db = MariaDb::start(MariaDbOptions::default());
    let refused = db
        .try_sql("SHOW BINARY LOG STATUS")
        .expect_err("MariaDB 10.11 does not know SHOW BINARY LOG STATUS");
    assert!(refused.contains("1064"), "{refused}");

    let (probe, _primary) = probe_of(&db);
    let probe_ids = || {
        db.sql(&format!(
            "SELECT GROUP_CONCAT(id) FROM information_schema.processlist WHERE user = '{REPL_USER}'"
        ))
    };
    let mut connection = None;
    for round in 0..3 {
        // A new file and a new offset each round: the reading must follow both.
        db.sql(&format!(
            "FLUSH BINARY LOGS; CREATE DATABASE probe_fallback_{round}"
        ));
        let status = db.query_rows("SHOW MASTER STATUS");
        let (file, offset) = (&status[0][0], status[0][1].parse().unwrap());
        let expected =
            GtidPosition::binlog_end(Position::in_file(file.as_bytes(), offset).unwrap());
        let reading = probe
            .binlog_position(Flavour::MySql)
            .await
            .unwrap_or_else(|e| panic!("round {round}: the probe failed: {e}"));
        assert_eq!(*reading, expected, "round {round}: {file}:{offset}");
        let id = probe_ids();
        if let Some(first) = &connection {
            assert_eq!(&id, first, "round {round}: the probe connected again");
        }
        connection = Some(id);
    }
}

each_server!(
    every_kind_of_response_waits_a_duplicate_key_error_and_affected_rows_in_a_transaction,
    everything_a_session_does_works_under_the_barrier,
    a_read_behind_a_commit_that_degraded_is_released_with_it,
    under_error_a_read_whose_quorum_does_not_come_gets_an_error_instead_of_the_data,
    begin_rollback_ping_and_reset_reveal_nothing_and_go_at_once_while_anything_else_waits,
    a_read_of_an_unacknowledged_write_is_held_until_the_quorum_has_it,
    the_control_with_visibility_commit_a_reader_sees_what_no_replica_has_and_a_reload_closes_it,
    with_no_write_in_flight_a_read_goes_after_the_probe_without_queueing,
);
