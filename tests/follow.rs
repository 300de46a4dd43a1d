//! Following a new primary without a restart, against real servers: a primary lacking an
//! acknowledged commit, a replica still replicating and a retired primary are refused; a
//! promoted replica is followed, the other replica goes on replicating through strongsync from
//! it, unchanged, and commits wait for its ACKs again.

use std::time::Duration;

use strongsync::config::ProbeConfig;
use support::admin;
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, REPL_PASSWORD, REPL_USER};
use support::sql::Statements;
use support::strong::{answered, newest_gtid, position_holds, spawn_watched, Strong, PATIENCE};

const TOKEN: &str = "follow-test-token-0123456789";

fn rows_101(server: &MariaDb) -> String {
    server.sql("SELECT COUNT(*) FROM sbtest.t WHERE v = 101")
}

fn follow(s: &Strong, primary: &str, extra: &str) -> admin::Response {
    let body = format!(r#"{{"primary": "{primary}"{extra}}}"#);
    admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_replica_is_followed_and_nothing_else_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Strong::start_with(2, |config, _| {
        admin::with_token(config, dir.path(), TOKEN, 1);
        config.failover.state_file = Some(support::admin::state_file(dir.path(), &config.primary));
        // The replication account can read a candidate's channels (SLAVE MONITOR).
        config.probe = ProbeConfig::account_of(REPL_USER, REPL_PASSWORD);
    });
    s.commit_rows(5).await;
    let acknowledged = newest_gtid(&s.topology.primary, 0);
    let old_primary = s.topology.primary.addr();

    // A replica that still replicates is refused before anything changes.
    let new_primary = &s.topology.replicas[0];
    let refused = follow(&s, &new_primary.addr(), "");
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains("still replicates") && refused.body.contains("nothing is fenced"),
        "{}",
        refused.body
    );
    assert_eq!(admin::epoch_and_fence(s.proxy.admin_addr()), (1, false));
    // A server that lacks the acknowledged commits is refused, and they are named. The
    // watermark is read once the old primary is fenced, so the fence stays.
    let empty = MariaDb::start(MariaDbOptions {
        server_id: 9,
        ..MariaDbOptions::default()
    });
    let refused = follow(&s, &empty.addr(), "");
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains("of the watermark")
            && refused.body.contains(&acknowledged)
            && refused.body.contains("epoch 1 is fenced"),
        "{}",
        refused.body
    );
    assert_eq!(admin::epoch_and_fence(s.proxy.admin_addr()), (1, true));

    // Promote replica 0 by hand, as a manager would, and follow it.
    assert_eq!(
        new_primary.sql(&format!("SELECT MASTER_GTID_WAIT('{acknowledged}', 60)")),
        "0"
    );
    new_primary.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0");
    let followed = follow(&s, &new_primary.addr(), "");
    assert_eq!(followed.status, 200, "{}", followed.body);
    let report: serde_json::Value = serde_json::from_str(&followed.body).unwrap();
    assert_eq!(report["epoch"], 2, "{report}");
    assert_eq!(report["retired"], old_primary.as_str(), "{report}");

    // Replica 1 was not touched: it reconnects through strongsync and replicates from the new
    // primary. A commit through strongsync waits for its ACK: when the OK comes, it holds it.
    s.wait_semisync(1);
    let conn = s.client().await;
    let watched = spawn_watched(
        conn,
        "INSERT INTO sbtest.t (v) VALUES (100)",
        vec![s.witness(1)],
    );
    let answer = answered(watched).await;
    answer.result.unwrap();
    let committed = newest_gtid(new_primary, 0);
    assert!(
        committed.starts_with("0-2-"),
        "written by the new primary: {committed}"
    );
    assert!(
        position_holds(&answer.received[0], &committed),
        "replica 1 had received {} when the OK for {committed} came",
        answer.received[0]
    );
    let rows = |server: &MariaDb| server.sql("SELECT COUNT(*) FROM sbtest.t WHERE v = 100");
    wait_for(
        "replica 1 to apply the new primary's commit",
        PATIENCE,
        || rows(&s.topology.replicas[1]) == "1",
    );
    assert_eq!(
        rows(&s.topology.primary),
        "0",
        "the old primary got nothing"
    );

    // Following it again (a manager's hook called twice) changes nothing.
    let again = follow(&s, &new_primary.addr(), "");
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("\"epoch\": 2"), "{}", again.body);
    // The old primary is alive and writable, and still never followed again.
    let refused = follow(&s, &old_primary, "");
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.body.contains("followed before"), "{}", refused.body);
    // Nor is it used again because a reloaded config file still names it.
    s.proxy.reload(|config| {
        config.primary = old_primary.clone();
        config.durability.ack_timeout = Duration::from_secs(3599);
    });
    let mut client = s.client().await;
    client.run("INSERT INTO sbtest.t (v) VALUES (101)").await;
    assert_eq!(
        rows_101(&s.topology.primary),
        "0",
        "the old primary got nothing"
    );
    assert_eq!(rows_101(new_primary), "1");
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!(status.epoch, 2);
    assert_eq!(status.primary.address, new_primary.addr());
    assert_eq!(status.watermark_gtid_position, newest_gtid(new_primary, 0));
}
