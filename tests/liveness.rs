//! No commit waits forever for a transaction no replica will ever be sent, and DEGRADED ends
//! once the quorum holds what was released without it — even when the replicas got those
//! transactions elsewhere and come back already holding them, so that nothing is relayed or
//! acknowledged through the proxy again.

use std::time::Duration;

use strongsync::config::OnTimeout;
use strongsync::durability::State;
use strongsync::status::DomainName;
use support::admin;
use support::mariadb::wait_for;
use support::sql::Statements;
use support::strong::{
    answered, blocking, durability, newest_gtid, position_holds, Strong, PATIENCE,
};

/// Both replicas fetch what they lack straight from the primary, until they hold `gtid`,
/// then replicate through the proxy again.
fn fetch_elsewhere_and_come_back(s: &Strong, gtid: &str) {
    for i in 0..2 {
        s.detach(i);
    }
    wait_for(&format!("both replicas to hold {gtid}"), PATIENCE, || {
        s.topology
            .replicas
            .iter()
            .all(|r| position_holds(&r.gtid_slave_pos(), gtid))
    });
    for i in 0..2 {
        s.attach(i, true);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_never_relayed_is_released_once_its_replicas_come_back_holding_it() {
    let s = Strong::start(2, blocking(2));
    s.stop_io(0);
    s.stop_io(1);
    s.wait_semisync(0);
    let commit = s.park("INSERT INTO t (v) VALUES (1)", s.witnesses()).await;
    let gtid = newest_gtid(&s.topology.primary, 0);
    fetch_elsewhere_and_come_back(&s, &gtid);
    let watched = answered(commit).await;
    watched.result.expect("OK");
    for received in &watched.received {
        assert!(position_holds(received, &gtid), "{received} lacks {gtid}");
    }
    assert_eq!(s.released("quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn degraded_ends_once_returning_replicas_hold_what_was_released_without_a_new_write() {
    let s = Strong::start(
        2,
        durability(2, OnTimeout::Degrade, Duration::from_millis(500)),
    );
    s.stop_io(0);
    s.stop_io(1);
    s.wait_semisync(0);
    let mut conn = s.client().await;
    conn.run("INSERT INTO t (v) VALUES (1)").await;
    conn.run("INSERT INTO t (v) VALUES (2)").await;
    let status = s.proxy.durability().status();
    assert_eq!(status.state, State::Degraded);
    assert_eq!(
        (status.released["timeout"], status.released["degraded"]),
        (1, 1)
    );
    let gtid = newest_gtid(&s.topology.primary, 0);
    let listed = admin::status(s.proxy.admin_addr());
    let released = &listed.released_without_quorum[0];
    assert_eq!(
        (&released.domain, &released.last, released.count),
        (&DomainName::Maria(0), &gtid, 2),
        "{listed:#?}"
    );
    let binlog = s.topology.primary.gtid_binlog_pos();
    fetch_elsewhere_and_come_back(&s, &gtid);
    wait_for("STRONG again", PATIENCE, || {
        s.proxy.durability().status().state == State::Strong
    });
    assert_eq!(
        s.topology.primary.gtid_binlog_pos(),
        binlog,
        "nothing was written meanwhile"
    );
    let listed = admin::status(s.proxy.admin_addr());
    assert_eq!(listed.released_without_quorum, []);
}
