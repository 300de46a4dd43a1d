//! The failover ledger on MySQL 9.7, as on MariaDB (`tests/promote.rs`): writers commit through
//! strongsync the whole time; each round the primary is SIGKILLed, `promote` fences, picks a
//! replica, stops it and runs `RESET REPLICA ALL`, makes it writable and follows it; the old
//! primary rejoins without its tail (its data replaced by a copy of the new primary's, its
//! binlog and GTIDs reset to the copy's set). Then every acknowledged row is on the final
//! primary and every replica, and no replica holds a GTID the final primary lacks. Both run
//! `support::failover_rounds`, with MySQL servers.

use support::failover_rounds::{control, failover_rounds};
use support::topology::MySqlTopology;

#[tokio::test(flavor = "multi_thread")]
async fn five_failovers_on_mysql_lose_nothing_acknowledged_at_quorum_1() {
    failover_rounds::<MySqlTopology>(1, 5).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn five_failovers_on_mysql_lose_nothing_acknowledged_at_quorum_2() {
    failover_rounds::<MySqlTopology>(2, 5).await;
}

/// The control on MySQL: the replica that received the least lacks acknowledged rows;
/// strongsync refuses to follow it, naming them, and a forced follow loses rows.
#[tokio::test(flavor = "multi_thread")]
async fn the_control_on_mysql_loses_rows_and_the_follow_check_names_them() {
    control::<MySqlTopology>().await;
}
