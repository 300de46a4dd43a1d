//! The read barrier (`visibility = "quorum"`) on MySQL 9.7: no response a client gets reveals a
//! transaction the quorum does not hold. MySQL makes a transaction's rows visible to other
//! sessions before its GTID is in `gtid_executed`, never before it is in the binlog, so the
//! barrier bounds each response by the primary's binlog position. Proved from the replica's
//! own `RECEIVED_TRANSACTION_SET` at the moment a reader got its answer; the control,
//! `visibility = "commit"`, shows the same reader seeing what the replica does not have.

use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::{DurabilityConfig, OnTimeout, ProbeConfig, Visibility};
use support::mariadb::wait_for;
use support::mysql_gtid::gtid_set_holds;
use support::mysql_topology::MySqlTopology;
use support::strong::{durability, Strong, Witness, PATIENCE};
use tokio::task::JoinHandle;

type MySqlStrong = Strong<MySqlTopology>;

/// One replica through a proxy with the read barrier on, waiting under `block`; the probe
/// account may read the binlog position (`REPLICATION CLIENT`).
fn barrier() -> MySqlStrong {
    MySqlStrong::launch(1, None, |config, topology| {
        topology.primary.sql(
            "CREATE USER 'probe'@'%' IDENTIFIED BY 'probe-secret'; \
             GRANT REPLICATION CLIENT ON *.* TO 'probe'@'%'",
        );
        config.durability = DurabilityConfig {
            visibility: Visibility::Quorum,
            ..durability(1, OnTimeout::Block, Duration::from_secs(3600))
        };
        config.probe = ProbeConfig::account_of("probe", "probe-secret");
    })
}

struct Read {
    conn: mysql_async::Conn,
    result: mysql_async::Result<Vec<i64>>,
    received: String,
}

fn spawn_read(mut conn: mysql_async::Conn, sql: String, witness: Witness) -> JoinHandle<Read> {
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
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the reader was answered")
        .expect("the reader's task")
}

/// Commits on the primary itself (no proxy, so nothing waits for it); returns its GTID.
fn commit_directly(s: &MySqlStrong, v: i64) -> String {
    let primary = &s.topology.primary;
    primary.sql(&format!("INSERT INTO sbtest.t (v) VALUES ({v})"));
    primary.newest_gtid()
}

fn lose_quorum(s: &MySqlStrong) {
    s.stop_io(0);
    s.wait_semisync(0);
}

fn reads_held(s: &MySqlStrong) -> usize {
    s.proxy.durability().status().reads_parked
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_of_an_unacknowledged_write_is_held_until_the_quorum_has_it() {
    let s = barrier();
    let conn = s.client().await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 42);
    let reader = spawn_read(
        conn,
        "SELECT v FROM sbtest.t WHERE v = 42".into(),
        s.witness(0),
    );
    wait_for("the read to be held", PATIENCE, || reads_held(&s) == 1);
    assert!(!reader.is_finished(), "answered before the replica ran");
    s.start_io(0);
    let read = answer(reader).await;
    assert_eq!(read.result.expect("the read"), vec![42]);
    assert!(
        gtid_set_holds(&read.received, &gtid),
        "answered when the replica had received only {:?}",
        read.received
    );
    let status = s.proxy.durability().status();
    assert!(status.reads_queued >= 1, "the read never waited");
    assert_eq!(status.reads_released["unresolved"], 0);
    drop(read.conn);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_control_with_visibility_commit_a_reader_sees_what_no_replica_has() {
    let s = barrier();
    let commit_visibility = DurabilityConfig {
        visibility: Visibility::Commit,
        ..s.proxy.durability().config()
    };
    s.proxy.durability().reconfigure(commit_visibility.clone());
    let conn = s.client().await;
    lose_quorum(&s);
    let gtid = commit_directly(&s, 5);
    let read = answer(spawn_read(
        conn,
        "SELECT v FROM sbtest.t WHERE v = 5".into(),
        s.witness(0),
    ))
    .await;
    assert_eq!(read.result.expect("the read"), vec![5]);
    assert!(
        !gtid_set_holds(&read.received, &gtid),
        "the control is void: the replica already had {gtid} ({:?})",
        read.received
    );
    // After a reload to `quorum`, the same session cannot see the next one early.
    s.proxy.durability().reconfigure(DurabilityConfig {
        visibility: Visibility::Quorum,
        ..commit_visibility
    });
    let gtid = commit_directly(&s, 6);
    let reader = spawn_read(
        read.conn,
        "SELECT v FROM sbtest.t WHERE v = 6".into(),
        s.witness(0),
    );
    wait_for("the read to be held", PATIENCE, || reads_held(&s) == 1);
    s.start_io(0);
    let read = answer(reader).await;
    assert_eq!(read.result.expect("the read"), vec![6]);
    assert!(gtid_set_holds(&read.received, &gtid), "{:?}", read.received);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_write_in_flight_reads_go_after_the_probe_without_queueing() {
    let s = barrier();
    let mut conn = s.client().await;
    conn.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .unwrap();
    let queued = s.proxy.durability().status().reads_queued;
    for _ in 0..20 {
        let n: u64 = conn
            .query_first("SELECT COUNT(*) FROM t")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1);
    }
    let status = s.proxy.durability().status();
    assert_eq!(status.reads_queued, queued, "{status:?}");
    assert_eq!(status.reads_released["unresolved"], 0, "{status:?}");
}
