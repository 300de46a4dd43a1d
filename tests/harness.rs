//! Tests of the test harness itself: real MariaDB servers, users, replication, crash and stop.

use support::clientlib::retry_ed25519;

use std::net::TcpStream;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use support::mariadb::{
    timed, wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER, ED_PASSWORD, ED_USER,
    REPL_PASSWORD, REPL_USER,
};
use support::server_process::{assert_process_gone, rows};
use support::topology::Topology;

const ER_ACCESS_DENIED_ERROR: u16 = 1045;

#[test]
fn primary_and_two_replicas_replicate_with_gtid() {
    let topology = Topology::start_with_three_rows();
    let primary_pos = topology.primary.gtid_binlog_pos();
    assert_eq!(primary_pos, "0-1-2", "one GTID each for CREATE and INSERT");
    for (idx, replica) in topology.replicas.iter().enumerate() {
        let status = topology.replica_status(idx);
        assert_eq!(
            status.get("Using_Gtid").map(String::as_str),
            Some("Slave_Pos"),
            "Using_Gtid of replica {idx}"
        );
        assert_eq!(
            replica.gtid_slave_pos(),
            primary_pos,
            "gtid_slave_pos of replica {idx}"
        );
    }
}

async fn current_user(db: &MariaDb, user: &str, password: &str) -> String {
    let mut conn = retry_ed25519(|| Conn::from_url(db.url(user, password)))
        .await
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    let current: Option<String> = conn
        .query_first("SELECT CURRENT_USER()")
        .await
        .unwrap_or_else(|e| panic!("SELECT CURRENT_USER() as {user}: {e}"));
    conn.disconnect().await.expect("disconnect");
    current.expect("CURRENT_USER() returned a row")
}

async fn assert_access_denied(db: &MariaDb, user: &str, password: &str) {
    match Conn::from_url(db.url(user, password)).await {
        Err(mysql_async::Error::Server(e)) => assert_eq!(
            e.code, ER_ACCESS_DENIED_ERROR,
            "{user} with password {password:?}: {e}"
        ),
        Err(e) => panic!("{user} with password {password:?}: unexpected error {e}"),
        Ok(_) => panic!("{user} logged in with the wrong password {password:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn users_can_log_in_over_tcp() {
    let (db, took) = timed(|| MariaDb::start(MariaDbOptions::default()));
    eprintln!("MariaDb::start took {took:?}");

    assert_eq!(current_user(&db, APP_USER, APP_PASSWORD).await, "app@%");
    assert_eq!(current_user(&db, ED_USER, ED_PASSWORD).await, "eduser@%");
    assert_access_denied(&db, APP_USER, "wrong").await;
    assert_access_denied(&db, ED_USER, "wrong").await;

    // The replication user must be able to monitor a replica.
    let mut repl = Conn::from_url(db.url_without_db(REPL_USER, REPL_PASSWORD))
        .await
        .expect("connect as repl");
    repl.query_drop("SHOW SLAVE STATUS")
        .await
        .expect("SHOW SLAVE STATUS as repl");
    repl.disconnect().await.expect("disconnect");
}

#[test]
fn semi_sync_replica_helper_makes_the_replica_acknowledge() {
    let primary = MariaDbOptions {
        extra_cnf: vec!["rpl_semi_sync_master_enabled=ON".into()],
        ..MariaDbOptions::default()
    };
    let topology = Topology::start_with(primary, MariaDbOptions::default(), 1);
    assert_eq!(
        topology.primary.status_var("Rpl_semi_sync_master_clients"),
        "0"
    );

    topology.replicas[0].set_semi_sync_replica(true);
    wait_for(
        "a semi-sync client on the primary",
        Duration::from_secs(30),
        || topology.primary.status_var("Rpl_semi_sync_master_clients") == "1",
    );
    topology.wait_replica_running(0);
    assert_eq!(
        topology.replicas[0].status_var("Rpl_semi_sync_slave_status"),
        "ON"
    );

    topology
        .primary
        .sql("CREATE TABLE sbtest.t (id INT PRIMARY KEY)");
    assert_eq!(
        topology.primary.status_var("Rpl_semi_sync_master_yes_tx"),
        "1",
        "the commit was acknowledged by the replica"
    );
}

#[test]
fn kill_and_restart_keeps_data() {
    let mut db = MariaDb::start(MariaDbOptions {
        extra_cnf: vec!["innodb_flush_log_at_trx_commit=1".into()],
        ..MariaDbOptions::default()
    });
    db.sql(
        "CREATE TABLE sbtest.t (id INT PRIMARY KEY); \
         INSERT INTO sbtest.t VALUES (1), (2), (3)",
    );
    let (old_pid, port, pos) = (db.pid(), db.port(), db.gtid_binlog_pos());

    db.kill();
    assert_process_gone(old_pid);
    let ((), took) = timed(|| db.restart());
    eprintln!("restart after SIGKILL took {took:?}");

    assert_ne!(db.pid(), old_pid);
    assert_eq!(db.port(), port);
    assert_eq!(db.sql("SELECT @@port"), port.to_string());
    TcpStream::connect(db.addr()).expect("TCP connect after restart");
    assert_eq!(
        db.query_rows("SELECT id FROM sbtest.t ORDER BY id"),
        rows(&[&["1"], &["2"], &["3"]])
    );
    assert_eq!(db.gtid_binlog_pos(), pos, "binlog survives the crash");
    db.sql("INSERT INTO sbtest.t VALUES (4)");
}

/// A server restarted after a crash deletes every `#sql*` file in its tmpdir (MariaDB's
/// internal temporary tables): with a tmpdir shared by every test server that took a
/// concurrent test's table away ("Error on delete of '/tmp/#sql-temptable-…'").
#[test]
fn each_server_has_a_tmpdir_of_its_own_that_a_crashed_neighbour_leaves_alone() {
    let quiet = MariaDb::start(MariaDbOptions::default());
    let mut crashing = MariaDb::start(MariaDbOptions {
        server_id: 2,
        ..MariaDbOptions::default()
    });
    for db in [&quiet, &crashing] {
        assert_eq!(db.sql("SELECT @@tmpdir"), db.tmpdir().display().to_string());
    }
    assert_ne!(quiet.tmpdir(), crashing.tmpdir());
    // The shared options (deploy/sandbox/mariadb.cnf) apply, and the tests' own come after.
    assert_eq!(
        crashing.sql("SELECT @@gtid_strict_mode, @@binlog_format, @@max_connections"),
        "1\tROW\t4000"
    );

    let table = |db: &MariaDb| db.tmpdir().join("#sql-temptable-1-2-3.MAI");
    for db in [&quiet, &crashing] {
        std::fs::write(table(db), b"").unwrap();
    }
    crashing.kill();
    crashing.restart();
    assert!(
        !table(&crashing).exists(),
        "a server restarted after a crash clears its own tmpdir (what made the shared one fail)"
    );
    assert!(
        table(&quiet).exists(),
        "the crashed server left the other's tmpdir alone"
    );
}

#[test]
fn drop_stops_the_server() {
    let (db, took) = timed(|| MariaDb::start(MariaDbOptions::default()));
    eprintln!("MariaDb::start took {took:?}");
    let pid = db.pid();
    let datadir = db.datadir().to_path_buf();
    assert!(datadir.is_dir());

    let ((), took) = timed(|| drop(db));
    eprintln!("drop (clean shutdown) took {took:?}");

    assert_process_gone(pid);
    assert!(!datadir.exists(), "{} was not removed", datadir.display());
}

#[test]
fn failed_start_panics_with_the_error_log() {
    let result = std::panic::catch_unwind(|| {
        MariaDb::start(MariaDbOptions {
            extra_cnf: vec!["no_such_variable=1".into()],
            ..MariaDbOptions::default()
        })
    });
    let payload = result.expect_err("start with an unknown variable must fail");
    let message = payload
        .downcast_ref::<String>()
        .expect("panic message is a String");
    assert!(
        message.contains("unknown variable 'no_such_variable=1'"),
        "panic message lacks the error log: {message}"
    );
}
