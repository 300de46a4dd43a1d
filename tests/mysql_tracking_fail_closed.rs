//! Commit tracking fails closed on MySQL 9.7. A client that switches GTID reports off — directly,
//! by taking the variable off the tracked list, in a procedure, in a prepared statement, in the
//! same batch as its commit, with a reset — still has its commits parked until their quorum,
//! proved by the replica's own `RECEIVED_TRANSACTION_SET` when the OK came. A response that
//! switched reports off may have committed unreported (the switch and the commit in one
//! batch or procedure): it is bounded by the primary's binlog position read after it.

use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::{OnTimeout, ProbeConfig};
use support::admin;
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::mysql_gtid::gtid_set_holds;
use support::mysql_topology::MySqlTopology;
use support::strong::{answered, durability, spawn_watched, Strong, PATIENCE};

type MySqlStrong = Strong<MySqlTopology>;

/// Ways of switching GTID reports off, each with the statements before and the statement that
/// then commits.
const WAYS: &[(&str, &[&str], &str)] = &[
    (
        "directly",
        &["SET SESSION session_track_gtids = OFF"],
        "INSERT INTO t (v) VALUES (1)",
    ),
    (
        "to its default",
        &["SET @@session.session_track_gtids = DEFAULT"],
        "INSERT INTO t (v) VALUES (1)",
    ),
    (
        "by taking it off the tracked list, then switching it off",
        &[
            "SET SESSION session_track_system_variables = ''",
            "SET SESSION session_track_gtids = OFF",
        ],
        "INSERT INTO t (v) VALUES (1)",
    ),
    (
        "with state-change reports off first",
        &[
            "SET SESSION session_track_state_change = OFF",
            "SET SESSION session_track_gtids = OFF",
        ],
        "INSERT INTO t (v) VALUES (1)",
    ),
    (
        "in an SQL prepared statement",
        &[
            "PREPARE off FROM 'SET SESSION session_track_gtids = OFF'",
            "EXECUTE off",
        ],
        "INSERT INTO t (v) VALUES (1)",
    ),
    (
        "in a procedure, then committing",
        &[],
        "CALL tracker_off_then_insert()",
    ),
    (
        "in the same batch as the commit",
        &[],
        "SET SESSION session_track_gtids = OFF; INSERT INTO t (v) VALUES (1)",
    ),
    (
        "with a SET_VAR hint (MySQL ignores it for this variable)",
        &[],
        "INSERT /*+ SET_VAR(session_track_gtids = OFF) */ INTO t (v) VALUES (1)",
    ),
];

const STORED_CODE: &[&str] = &["CREATE PROCEDURE tracker_off_then_insert() BEGIN \
       SET SESSION session_track_gtids = OFF; \
       INSERT INTO t (v) VALUES (1); END"];

/// One replica, waiting under `block`, with a probe account so that an unreported commit is
/// bounded by the primary's position.
async fn cluster() -> MySqlStrong {
    let s = MySqlStrong::launch(1, None, |config, topology| {
        topology
            .primary
            .sql("CREATE USER 'probe'@'%' IDENTIFIED BY 'probe-secret'; GRANT REPLICATION CLIENT ON *.* TO 'probe'@'%'");
        config.durability = durability(1, OnTimeout::Block, Duration::from_secs(3600));
        config.probe = ProbeConfig::account_of("probe", "probe-secret");
    });
    let url = s.topology.primary.url(APP_USER, APP_PASSWORD);
    let mut direct = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
        .await
        .unwrap();
    for sql in STORED_CODE {
        direct
            .query_drop(*sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    direct.disconnect().await.unwrap();
    s.topology.wait_replicas_caught_up();
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn with_gtid_reports_switched_off_in_any_way_a_commit_still_waits_for_its_quorum() {
    let s = cluster().await;
    for (way, setup, commit) in WAYS {
        // A response that switched reports off may have committed unreported, so it is
        // bounded by the primary's position too: with the replica up, the bound is held at
        // once.
        let mut conn = s.client().await;
        for sql in *setup {
            conn.query_drop(*sql)
                .await
                .unwrap_or_else(|e| panic!("{way}: {sql}: {e}"));
        }
        s.stop_io(0);
        s.wait_semisync(0);
        let before = s.topology.primary.gtid_executed();
        let watched = spawn_watched(conn, *commit, vec![s.witness(0)]);
        wait_for(&format!("the commit {way} to park"), PATIENCE, || {
            s.parked() == 1 && s.topology.primary.gtid_executed() != before
        });
        let gtid = s.topology.primary.newest_gtid();
        assert!(!watched.is_finished(), "{way}: answered without a replica");
        s.start_io(0);
        let watched = answered(watched).await;
        watched.result.unwrap_or_else(|e| panic!("{way}: {e}"));
        assert!(
            gtid_set_holds(&watched.received[0], &gtid),
            "{way}: the replica had received {:?} when the OK for {gtid} came",
            watched.received[0]
        );
        drop(watched.conn);
    }
    // Each commit, and each setup response that switched something (bounded as well).
    assert!(s.released("quorum") >= WAYS.len() as u64);
    assert_eq!(s.released("unresolved"), 0);
    // The primary's defaults track what strongsync needs (tests/support/src/mysql_launch.rs):
    // each way that left reports off was seen, and the session's responses bounded from then
    // on, with no statement of strongsync's to put its tracking back.
    let scrape = admin::metrics(s.proxy.admin_addr());
    assert!(
        scrape.get("strongsync_sessions_untrusted_total") >= 6.0,
        "each way that left reports off was found"
    );
    assert_eq!(
        scrape.get(r#"strongsync_session_statements_total{reason="restore"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_connection_or_a_change_of_user_sets_tracking_up_again() {
    let s = cluster().await;
    let mut conn = s.client().await;
    assert!(conn.reset().await.unwrap(), "COM_RESET_CONNECTION was sent");
    conn.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some(APP_USER.to_string()))
            .with_pass(Some(APP_PASSWORD.to_string()))
            .with_db_name(Some("sbtest".to_string())),
    )
    .await
    .unwrap();
    for step in ["after a reset and a change of user", "again"] {
        s.stop_io(0);
        s.wait_semisync(0);
        let watched = spawn_watched(conn, "INSERT INTO t (v) VALUES (2)", vec![s.witness(0)]);
        wait_for(&format!("the commit {step} to park"), PATIENCE, || {
            s.parked() == 1
        });
        let gtid = s.topology.primary.newest_gtid();
        s.start_io(0);
        let watched = answered(watched).await;
        watched.result.unwrap();
        assert!(
            gtid_set_holds(&watched.received[0], &gtid),
            "{step}: {:?}",
            watched.received
        );
        conn = watched.conn;
        assert!(conn.reset().await.unwrap(), "COM_RESET_CONNECTION was sent");
    }
    assert_eq!(s.released("unresolved"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn set_statement_for_is_not_mysql_syntax_and_commits_nothing() {
    let s = cluster().await;
    let before = s.topology.primary.gtid_executed();
    let mut conn = s.client().await;
    let err = conn
        .query_drop("SET STATEMENT session_track_gtids = OFF FOR INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1064),
        "{err:?}"
    );
    assert_eq!(s.topology.primary.gtid_executed(), before);
}
