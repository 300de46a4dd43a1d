//! The failover ledger against real MariaDB servers: writers commit through strongsync the
//! whole time; each round the primary is SIGKILLed, `promote` fences, picks a replica, makes it
//! the primary and follows it, the writers reconnect to the same address and go on, and the old
//! primary rejoins without its tail. Every acknowledged row is then on the final primary and
//! every replica, no replica holds a GTID the final primary lacks, and every commit cut off
//! with the fence's error names GTIDs the outcome call classifies as the unacknowledged tail.
//! The control promotes the replica that received the least, and loses rows.

use std::time::Duration;

use strongsync::config::{OnTimeout, ProbeConfig, ReplicaConfig};
use support::admin;
use support::failover::{ids_of, Writers, IDS};
use support::mariadb::{wait_for, MariaDb, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER};
use support::strong::{durability, position_holds, Strong, PATIENCE};

const TOKEN: &str = "promote-test-token-0123456789";
const WRITERS: u64 = 8;

fn ids(server: &MariaDb) -> std::collections::HashSet<u64> {
    ids_of(server.query_rows(IDS))
}

/// The server with `server_id` (1 the first primary, 2 and 3 its replicas).
fn server(s: &mut Strong, server_id: u32) -> &mut MariaDb {
    if s.topology.primary.server_id() == server_id {
        return &mut s.topology.primary;
    }
    s.topology
        .replicas
        .iter_mut()
        .find(|r| r.server_id() == server_id)
        .expect("a server of the test")
}

/// Brings a killed primary back as a replica of strongsync without its tail: its data is
/// replaced by a consistent dump of the new primary, its binlog (which holds the tail) is
/// reset, and it replicates through strongsync from the dump's GTID position.
fn rejoin(old: &mut MariaDb, new_socket: &std::path::Path, proxy_port: u16, dir: &std::path::Path) {
    old.restart();
    let dump = dir.join(format!("rejoin-{}.sql", old.server_id()));
    let out = std::process::Command::new("mariadb-dump")
        .arg("--no-defaults")
        .arg(format!("--socket={}", new_socket.display()))
        .args([
            "--user=root",
            "--single-transaction",
            "--gtid",
            "--master-data=2",
            "sbtest",
        ])
        .output()
        .expect("run mariadb-dump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let pos = text
        .split("gtid_slave_pos='")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the dump names its GTID position")
        .to_owned();
    std::fs::write(&dump, &text).unwrap();
    old.sql(&format!(
        "STOP SLAVE; RESET SLAVE ALL; SET sql_log_bin = 0; DROP DATABASE sbtest; \
         CREATE DATABASE sbtest; USE sbtest; SOURCE {}; SET sql_log_bin = 1; \
         RESET MASTER; SET GLOBAL gtid_slave_pos = '{pos}'",
        dump.display()
    ));
    old.sql(&format!(
        "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {proxy_port}, \
         MASTER_USER = '{REPL_USER}', MASTER_PASSWORD = '{REPL_PASSWORD}', \
         MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE"
    ));
    old.set_semi_sync_replica(true);
}

/// Rounds of: writers commit all along; the primary is SIGKILLed after a random number of
/// acknowledged rows; promote; the old primary rejoins. Then every acknowledged row is on the
/// final primary and every replica, no replica holds a GTID the final primary lacks, and every
/// commit the fence cut off names GTIDs the outcome call calls the tail.
async fn failover_rounds(quorum: usize, rounds: usize) {
    use rand::{Rng, SeedableRng};
    let seed = std::env::var("LEDGER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("failover ledger: quorum {quorum}, seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let state = dir.path().join("state.json");
    let mut s = Strong::start_with(2, |config, topology| {
        config.durability = durability(quorum, OnTimeout::Block, Duration::from_secs(3600));
        config.failover.admin_token_file = Some(token);
        config.failover.state_file = Some(state);
        config.probe = ProbeConfig::account_of(REPL_USER, REPL_PASSWORD);
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
    let mut primary = 1;
    for round in 0..rounds {
        let before = writers.acknowledged();
        let more = rng.random_range(50..400);
        wait_for(
            &format!("round {round}: {more} more acknowledged rows"),
            PATIENCE,
            || writers.acknowledged() >= before + more,
        );
        let old_addr = server(&mut s, primary).addr();
        server(&mut s, primary).kill();
        let answer = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
        assert_eq!(answer.status, 200, "round {round}: {}", answer.body);
        let report: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(report["epoch"], round as u64 + 2, "{report}");
        assert_eq!(report["retired"], old_addr.as_str(), "{report}");
        let chosen = report["server_id"].as_u64().unwrap() as u32;
        let new_socket = server(&mut s, chosen).socket().to_owned();
        let port = s.proxy.port();
        rejoin(server(&mut s, primary), &new_socket, port, dir.path());
        // The operator says it rejoined without its tail: it may be promoted again.
        let body = format!(r#"{{"primary": "{old_addr}"}}"#);
        let reinstated = admin::post(s.proxy.admin_addr(), "/reinstate", Some(TOKEN), &body);
        assert_eq!(reinstated.status, 200, "{}", reinstated.body);
        wait_for(
            &format!("round {round}: the old primary to rejoin"),
            PATIENCE,
            || s.semisync_replicas() == 2,
        );
        // The writers go on through the same address (at quorum 2 once the old primary is back).
        let after = writers.acknowledged();
        wait_for(
            &format!("round {round}: writers going on"),
            PATIENCE,
            || writers.acknowledged() >= after + 50,
        );
        eprintln!(
            "round {round}: killed {primary}, promoted {chosen}, {} acknowledged",
            writers.acknowledged()
        );
        primary = chosen;
    }
    let ledger = writers.stop().await;
    let final_primary = server(&mut s, primary);
    let pos = final_primary.gtid_binlog_pos();
    let on_primary = ids(final_primary);
    let mut missing = Vec::new();
    for id in [1u32, 2, 3].into_iter().filter(|id| *id != primary) {
        let replica = server(&mut s, id);
        assert_eq!(
            replica.sql(&format!("SELECT MASTER_GTID_WAIT('{pos}', 60)")),
            "0"
        );
        let held = replica.gtid_slave_pos();
        for gtid in held.split(',').filter(|g| !g.is_empty()) {
            assert!(
                position_holds(&pos, gtid),
                "errant {gtid} on {id}: {held} vs {pos}"
            );
        }
        let on = ids(replica);
        missing.extend(
            ledger
                .acknowledged
                .iter()
                .filter(|i| !on.contains(i))
                .map(|i| (id, *i)),
        );
    }
    missing.extend(
        ledger
            .acknowledged
            .iter()
            .filter(|i| !on_primary.contains(i))
            .map(|i| (primary, *i)),
    );
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
        "quorum {quorum}: {} acknowledged over {rounds} failovers, {} cut off by a fence",
        ledger.acknowledged.len(),
        ledger.cut_off.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn five_failovers_lose_nothing_acknowledged_at_quorum_1() {
    failover_rounds(1, 5).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn five_failovers_lose_nothing_acknowledged_at_quorum_2() {
    failover_rounds(2, 5).await;
}

/// The control: promoting the replica that received the least loses acknowledged rows, so the
/// ledger above can fail. strongsync refuses to follow it (naming what it lacks) until forced.
#[tokio::test(flavor = "multi_thread")]
async fn the_control_promoting_the_least_received_replica_loses_acknowledged_rows() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut s = Strong::start_with(2, |config, _| {
        config.durability = durability(1, OnTimeout::Block, Duration::from_secs(3600));
        config.failover.admin_token_file = Some(token);
        config.probe = ProbeConfig::account_of(REPL_USER, REPL_PASSWORD);
    });
    s.topology
        .primary
        .sql("CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY)");
    s.topology.wait_replicas_caught_up();
    // Replica 1 stops receiving; replica 0 acknowledges alone (quorum 1).
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
    least.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0");
    let body = format!(r#"{{"primary": "{}"}}"#, least.addr());
    let refused = admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains("lacks acknowledged"),
        "{}",
        refused.body
    );
    let body = format!(r#"{{"primary": "{}", "force": true}}"#, least.addr());
    let forced = admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body);
    assert_eq!(forced.status, 200, "{}", forced.body);
    assert_eq!(s.metrics().get("strongsync_forced_follows_total"), 1.0);
    let on_least = ids(least);
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
        "control: {lost} of {} acknowledged rows lost",
        ledger.acknowledged.len()
    );
}

/// Promote stopped midway (the chosen replica cannot apply in time: a session holds a lock its
/// SQL thread needs) changes nothing more and keeps the fence; run again once the lock is gone,
/// it finishes, on the same replica.
#[tokio::test(flavor = "multi_thread")]
async fn promote_stopped_midway_keeps_the_fence_and_a_rerun_finishes_it() {
    use mysql_async::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut s = Strong::start_with(2, |config, topology| {
        config.durability = durability(1, OnTimeout::Block, Duration::from_secs(3600));
        config.failover.admin_token_file = Some(token);
        config.failover.promote_apply_timeout = Duration::from_secs(2);
        config.probe = ProbeConfig::account_of(REPL_USER, REPL_PASSWORD);
        config.failover.user = Some(APP_USER.into());
        config.failover.password = Some(strongsync::config::Secret(APP_PASSWORD.into()));
        config.replica = topology
            .replicas
            .iter()
            .map(|r| ReplicaConfig {
                server_id: r.server_id(),
                address: Some(r.addr()),
                ..ReplicaConfig::default()
            })
            .collect();
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
    lock.query_drop("LOCK TABLES sbtest.t WRITE").await.unwrap();
    let mut client = s.client().await;
    for v in 0..20 {
        client
            .query_drop(format!("INSERT INTO sbtest.t (v) VALUES ({v})"))
            .await
            .unwrap();
    }
    drop(client);
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
    assert_eq!(
        (status["fenced"].as_bool(), status["epoch"].as_u64()),
        (Some(true), Some(1))
    );
    // (Its rows are not applied yet: the lock holds its SQL thread, as it would hold a read.)

    lock.query_drop("UNLOCK TABLES").await.unwrap();
    drop(lock);
    let finished = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
    assert_eq!(finished.status, 200, "{}", finished.body);
    let report: serde_json::Value = serde_json::from_str(&finished.body).unwrap();
    assert_eq!(report["server_id"], chosen.server_id(), "{report}");
    assert_eq!(report["epoch"], 2, "{report}");
    assert_eq!(chosen.sql("SELECT COUNT(*) FROM sbtest.t"), "20");
}
