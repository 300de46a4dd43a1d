//! The failover ledger against real MariaDB servers: writers commit through strongsync the
//! whole time; each round the primary is SIGKILLed, `promote` fences, picks a replica, makes it
//! the primary and follows it, the writers reconnect to the same address and go on, and the old
//! primary rejoins without its tail. Every acknowledged row is then on the final primary and
//! every replica, no replica holds a GTID the final primary lacks, and every commit cut off
//! with the fence's error names GTIDs the outcome call classifies as the unacknowledged tail.
//! The control promotes the replica that received the least, and loses rows. The rounds and the
//! control are `support::failover_rounds`, run on both servers (on MySQL the replica is stopped
//! and `RESET REPLICA ALL`, and the old primary rejoins from a copy of the new one's data, its
//! GTIDs reset to the copy's set); the rest of this file is MariaDB's.

use std::time::Duration;

use strongsync::config::ProbeConfig;
use support::admin;
use support::each_server;
use support::failover_rounds::{control, failover_rounds, replica_configs, LedgerCluster};
use support::mariadb::{APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER};
use support::sql::Statements;
use support::strong::Strong;

const TOKEN: &str = "promote-test-token-0123456789";

async fn five_failovers_lose_nothing_acknowledged_at_quorum_1<C: LedgerCluster>() {
    failover_rounds::<C>(1, 5).await;
}

async fn five_failovers_lose_nothing_acknowledged_at_quorum_2<C: LedgerCluster>() {
    failover_rounds::<C>(2, 5).await;
}

/// The control: promoting the replica that received the least loses acknowledged rows, so the
/// ledger above can fail. strongsync refuses to follow it (naming what it lacks) until forced.
async fn the_control_promoting_the_least_received_replica_loses_acknowledged_rows<
    C: LedgerCluster,
>() {
    control::<C>().await;
}

each_server!(
    five_failovers_lose_nothing_acknowledged_at_quorum_1,
    five_failovers_lose_nothing_acknowledged_at_quorum_2,
    the_control_promoting_the_least_received_replica_loses_acknowledged_rows,
);

/// Promote stopped midway (the chosen replica cannot apply in time: a session holds a lock its
/// SQL thread needs) changes nothing more and keeps the fence; run again once the lock is gone,
/// it finishes, on the same replica.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_promote_stopped_midway_keeps_the_fence_and_a_rerun_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Strong::start_with(2, |config, topology| {
        admin::with_token(config, dir.path(), TOKEN, 1);
        config.failover.promote_apply_timeout = Duration::from_secs(2);
        config.probe = ProbeConfig::account_of(REPL_USER, REPL_PASSWORD);
        config.failover.user = Some(APP_USER.into());
        config.failover.password = Some(strongsync::config::Secret(APP_PASSWORD.into()));
        config.replica = replica_configs(&topology.replicas);
    });
    // Replica 1 receives less: replica 0 is the one promote picks.
    s.stop_io(1);
    s.wait_semisync(1);
    let chosen = &s.topology.replicas[0];
    let mut lock = mysql_async::Conn::new(
        mysql_async::Opts::from_url(&chosen.url(APP_USER, APP_PASSWORD)).unwrap(),
    )
    .await
    .unwrap();
    lock.run("LOCK TABLES sbtest.t WRITE").await;
    s.commit_rows(20).await;
    s.topology.primary.kill();

    let stopped = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
    assert_eq!(stopped.status, 409, "{}", stopped.body);
    assert!(
        stopped
            .body
            .contains(&format!("promote stopped at server {}", chosen.server_id()))
            && stopped.body.contains("did not apply"),
        "{}",
        stopped.body
    );
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!((status.fenced, status.epoch), (true, 1));
    // (Its rows are not applied yet: the lock holds its SQL thread, as it would hold a read.)

    lock.run("UNLOCK TABLES").await;
    drop(lock);
    let finished = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
    assert_eq!(finished.status, 200, "{}", finished.body);
    let report: serde_json::Value = serde_json::from_str(&finished.body).unwrap();
    assert_eq!(report["server_id"], chosen.server_id(), "{report}");
    assert_eq!(report["epoch"], 2, "{report}");
    assert_eq!(chosen.sql("SELECT COUNT(*) FROM sbtest.t"), "20");
}
