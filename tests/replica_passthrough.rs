//! A real replica replicating through the proxy, with and without semisync (which the proxy
//! answers itself), and `STOP SLAVE` ending its dump on the primary: with semisync the replica
//! kills its dump thread by id through the proxy.

use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::proxy::TestProxy;
use support::topology::Topology;

use std::time::Duration;

#[test]
fn a_replica_replicates_through_the_proxy_and_stops_cleanly() {
    let topology = Topology::start(1);
    let proxy = TestProxy::start(&topology.primary);
    topology.point_replica_at(0, "127.0.0.1", proxy.port());
    topology.wait_replica_running(0);

    for semisync in [false, true] {
        topology.replicas[0].set_semi_sync_replica(semisync);
        topology.wait_replica_running(0);
        // Writes through the proxy reach the replica through the proxy.
        let out = support::cli::mariadb(proxy.port(), APP_USER, APP_PASSWORD)
            .arg("sbtest")
            .execute(&format!(
                "CREATE TABLE IF NOT EXISTS r (id INT PRIMARY KEY); INSERT INTO r VALUES ({})",
                u8::from(semisync)
            ));
        assert!(out.success(), "{out}");
        topology.wait_replicas_caught_up();
        let replica = &topology.replicas[0];
        assert_eq!(
            replica.sql(&format!(
                "SELECT COUNT(*) FROM sbtest.r WHERE id = {}",
                u8::from(semisync)
            )),
            "1"
        );
        let status = topology.replica_status(0);
        assert_eq!(status["Master_Port"], proxy.port().to_string());
        assert_eq!(status["Using_Gtid"], "Slave_Pos");

        // STOP SLAVE: with semisync the replica KILLs its dump thread through the proxy;
        // without, it only closes its socket, and the primary's dump thread ends at its next
        // write (as it would with a direct replica), so give it one.
        replica.sql("STOP SLAVE");
        if !semisync {
            topology.primary.sql("FLUSH BINARY LOGS");
        }
        wait_for(
            "the dump thread to end on the primary",
            Duration::from_secs(30),
            || {
                topology
                .primary
                .sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
                == "0"
            },
        );
        replica.sql("START SLAVE");
        topology.wait_replica_running(0);
    }
}
