//! The acknowledged-commit ledger across a cluster of three strongsync instances with one
//! leader by an etcd lease, on MariaDB 10.11 and MySQL 9.7 at quorum 1: five rounds that kill,
//! pause and cut off the leader (once with the primary), writers through HAProxy, no
//! acknowledged commit lost, and no commit released by two instances or by one without the
//! lease (`tests/support/src/cluster_ledger.rs`).

use support::cluster_ledger::five_rounds;
use support::topology::MySqlTopology;
use support::topology::Topology;

/// One cluster at a time: each runs nine servers and processes on a machine of two cores,
/// where leases of a few seconds must be renewed in time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_five_rounds_of_leader_loss_lose_nothing_acknowledged() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let report = five_rounds::<Topology>().await;
    eprintln!("MariaDB: {report:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_five_rounds_of_leader_loss_lose_nothing_acknowledged() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let report = five_rounds::<MySqlTopology>().await;
    eprintln!("MySQL: {report:?}");
}
