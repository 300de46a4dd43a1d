//! The failover ledger on MySQL 9.7, as on MariaDB (`tests/promote.rs`): writers commit through
//! strongsync the whole time; each round the primary is SIGKILLed, `promote` fences, picks a
//! replica, stops it and runs `RESET REPLICA ALL`, makes it writable and follows it; the old
//! primary rejoins without its tail (its data replaced by a copy of the new primary's, its
//! binlog and GTIDs reset to the copy's set). Then every acknowledged row is on the final
//! primary and every replica, and no replica holds a GTID the final primary lacks.

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use strongsync::config::{OnTimeout, ProbeConfig, ReplicaConfig};
use support::admin;
use support::failover::{ids_of, Writers, IDS};
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER};
use support::mysql::MySql;
use support::mysql_topology::MySqlTopology;
use support::strong::{durability, Strong, PATIENCE};

const TOKEN: &str = "mysql-failover-token-0123456789";
const WRITERS: u64 = 8;

fn server(s: &mut Strong<MySqlTopology>, server_id: u32) -> &mut MySql {
    if s.topology.primary.server_id() == server_id {
        return &mut s.topology.primary;
    }
    s.topology
        .replicas
        .iter_mut()
        .find(|r| r.server_id() == server_id)
        .expect("a server of the test")
}

/// Brings the killed `old` back as a replica of strongsync without its tail: a copy of the new
/// primary's ledger taken under a read lock with its `gtid_executed`, loaded without binlogging;
/// `RESET BINARY LOGS AND GTIDS` drops its binlog (which holds the tail) and `gtid_purged` says
/// it has what the copy has.
async fn rejoin(old: &mut MySql, new_url: &str, proxy_port: u16) {
    old.restart();
    let mut source = Conn::new(Opts::from_url(new_url).unwrap()).await.unwrap();
    source
        .query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .unwrap();
    let executed: String = source
        .query_first("SELECT @@global.gtid_executed")
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<u64> = source.query(IDS).await.unwrap();
    source.query_drop("UNLOCK TABLES").await.unwrap();
    drop(source);
    let mut target = Conn::new(Opts::from_url(&old.url(APP_USER, APP_PASSWORD)).unwrap())
        .await
        .unwrap();
    target
        .query_drop("STOP REPLICA; RESET REPLICA ALL; SET sql_log_bin = 0; TRUNCATE sbtest.ledger")
        .await
        .unwrap();
    for chunk in ids.chunks(1000) {
        let values: Vec<String> = chunk.iter().map(|id| format!("({id})")).collect();
        target
            .query_drop(format!(
                "INSERT INTO sbtest.ledger (id) VALUES {}",
                values.join(",")
            ))
            .await
            .unwrap();
    }
    target
        .query_drop(format!(
            "SET sql_log_bin = 1; RESET BINARY LOGS AND GTIDS; SET GLOBAL gtid_purged = '{executed}'"
        ))
        .await
        .unwrap();
    drop(target);
    if old
        .try_sql("SELECT @@global.rpl_semi_sync_replica_enabled")
        .is_err()
    {
        old.sql("INSTALL PLUGIN rpl_semi_sync_replica SONAME 'semisync_replica.so'");
    }
    old.sql(&format!(
        "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {proxy_port}, \
         SOURCE_USER = '{REPL_USER}', SOURCE_PASSWORD = '{REPL_PASSWORD}', \
         SOURCE_AUTO_POSITION = 1, SOURCE_SSL = 0, GET_SOURCE_PUBLIC_KEY = 1, \
         SOURCE_CONNECT_RETRY = 1; START REPLICA"
    ));
    old.set_semi_sync_replica(true);
}

async fn failover_rounds(quorum: usize, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let state = dir.path().join("state.json");
    let mut s = Strong::<MySqlTopology>::launch(2, None, |config, topology| {
        topology.primary.sql(
            "CREATE USER 'probe'@'%' IDENTIFIED BY 'probe-secret'; \
             GRANT REPLICATION CLIENT ON *.* TO 'probe'@'%'",
        );
        config.durability = durability(quorum, OnTimeout::Block, Duration::from_secs(3600));
        config.failover.admin_token_file = Some(token);
        config.failover.state_file = Some(state);
        config.probe = ProbeConfig::account_of("probe", "probe-secret");
        config.failover.user = Some(APP_USER.into());
        config.failover.password = Some(strongsync::config::Secret(APP_PASSWORD.into()));
        config.replica = std::iter::once(&topology.primary)
            .chain(&topology.replicas)
            .map(|r| ReplicaConfig {
                server_id: r.server_id(),
                address: Some(r.addr()),
                ..ReplicaConfig::default()
            })
            .collect();
    });
    s.topology
        .primary
        .sql("CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY)");
    s.topology.wait_replicas_caught_up();
    let writers = Writers::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    let mut primary = s.topology.primary.server_id();
    for round in 0..rounds {
        let before = writers.acknowledged();
        wait_for(
            &format!("round {round}: more acknowledged rows"),
            PATIENCE,
            || writers.acknowledged() >= before + 100 + 50 * round,
        );
        server(&mut s, primary).kill();
        let answer = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
        assert_eq!(answer.status, 200, "round {round}: {}", answer.body);
        let report: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(report["epoch"], round as u64 + 2, "{report}");
        let chosen = report["server_id"].as_u64().unwrap() as u32;
        let port = s.proxy.port();
        let new_url = server(&mut s, chosen).url(APP_USER, APP_PASSWORD);
        rejoin(server(&mut s, primary), &new_url, port).await;
        let old_addr = server(&mut s, primary).addr();
        let body = format!(r#"{{"primary": "{old_addr}"}}"#);
        let reinstated = admin::post(s.proxy.admin_addr(), "/reinstate", Some(TOKEN), &body);
        assert_eq!(reinstated.status, 200, "{}", reinstated.body);
        wait_for(
            &format!("round {round}: the old primary to rejoin"),
            PATIENCE,
            || s.semisync_replicas() == 2,
        );
        let after = writers.acknowledged();
        wait_for(
            &format!("round {round}: writers going on"),
            PATIENCE,
            || writers.acknowledged() >= after + 50,
        );
        eprintln!(
            "mysql round {round}: killed {primary}, promoted {chosen}, {} acknowledged",
            writers.acknowledged()
        );
        primary = chosen;
    }
    let ledger = writers.stop().await;
    let final_primary = server(&mut s, primary);
    let executed = final_primary.gtid_executed();
    let on_primary = ids_of(final_primary.query_rows(IDS));
    let mut missing: Vec<(u32, u64)> = ledger
        .acknowledged
        .iter()
        .filter(|id| !on_primary.contains(id))
        .map(|id| (primary, *id))
        .collect();
    let others: Vec<u32> = std::iter::once(&s.topology.primary)
        .chain(&s.topology.replicas)
        .map(MySql::server_id)
        .filter(|id| *id != primary)
        .collect();
    for id in others {
        let replica = server(&mut s, id);
        assert_eq!(
            replica.sql(&format!(
                "SELECT WAIT_FOR_EXECUTED_GTID_SET('{executed}', 60)"
            )),
            "0"
        );
        let held = replica.gtid_executed();
        assert!(
            replica.gtid_subset(&held, &executed),
            "errant GTIDs on {id}: {held} is not within the final primary's {executed}"
        );
        let on = ids_of(replica.query_rows(IDS));
        missing.extend(
            ledger
                .acknowledged
                .iter()
                .filter(|i| !on.contains(i))
                .map(|i| (id, *i)),
        );
    }
    assert!(missing.is_empty(), "acknowledged rows lost: {missing:?}");
    for gtids in &ledger.cut_off {
        let outcome = admin::get(s.proxy.admin_addr(), &format!("/outcome?gtid={gtids}"));
        assert!(
            outcome.body.contains("\"unacknowledged_tail\""),
            "{gtids}: {}",
            outcome.body
        );
    }
    eprintln!(
        "mysql quorum {quorum}: {} acknowledged over {rounds} failovers, {} cut off by a fence",
        ledger.acknowledged.len(),
        ledger.cut_off.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn five_failovers_on_mysql_lose_nothing_acknowledged_at_quorum_1() {
    failover_rounds(1, 5).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn five_failovers_on_mysql_lose_nothing_acknowledged_at_quorum_2() {
    failover_rounds(2, 5).await;
}

/// The control on MySQL: the replica that received the least lacks acknowledged rows;
/// strongsync refuses to follow it, naming them, and a forced follow loses rows.
#[tokio::test(flavor = "multi_thread")]
async fn the_control_on_mysql_loses_rows_and_the_follow_check_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut s = Strong::<MySqlTopology>::launch(2, None, |config, topology| {
        topology.primary.sql(
            "CREATE USER 'probe'@'%' IDENTIFIED BY 'probe-secret'; \
             GRANT REPLICATION CLIENT ON *.* TO 'probe'@'%'",
        );
        config.durability = durability(1, OnTimeout::Block, Duration::from_secs(3600));
        config.failover.admin_token_file = Some(token);
        config.probe = ProbeConfig::account_of("probe", "probe-secret");
    });
    s.topology
        .primary
        .sql("CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY)");
    s.topology.wait_replicas_caught_up();
    s.stop_io(1);
    s.wait_semisync(1);
    let writers = Writers::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    wait_for("200 acknowledged rows", PATIENCE, || {
        writers.acknowledged() >= 200
    });
    s.topology.primary.kill();
    let ledger = writers.stop().await;
    let fenced = admin::post(s.proxy.admin_addr(), "/fence", Some(TOKEN), "");
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    let least = &s.topology.replicas[1];
    least.sql("STOP REPLICA; RESET REPLICA ALL; SET GLOBAL read_only = 0");
    let body = format!(r#"{{"primary": "{}"}}"#, least.addr());
    let refused = admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body);
    assert_eq!(refused.status, 409, "{}", refused.body);
    let acknowledged = admin::status(s.proxy.admin_addr())["acknowledged_gtid_position"]
        .as_str()
        .unwrap()
        .to_owned();
    let source = acknowledged.split(':').next().unwrap();
    assert!(
        refused.body.contains("lacks acknowledged") && refused.body.contains(source),
        "{}",
        refused.body
    );
    let body = format!(r#"{{"primary": "{}", "force": true}}"#, least.addr());
    let forced = admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body);
    assert_eq!(forced.status, 200, "{}", forced.body);
    let on_least = ids_of(least.query_rows(IDS));
    let lost = ledger
        .acknowledged
        .iter()
        .filter(|id| !on_least.contains(id))
        .count();
    assert!(
        lost > 0,
        "the control lost nothing: the ledger could not fail"
    );
    eprintln!(
        "mysql control: {lost} of {} acknowledged rows lost",
        ledger.acknowledged.len()
    );
}
