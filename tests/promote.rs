//! `strongsync promote` against real servers: writers commit through strongsync the whole
//! time; the primary is SIGKILLed; promote fences, picks a replica, makes it the primary and
//! follows it; the writers reconnect to the same address and go on. Every acknowledged row is
//! then on the new primary and on the other replica, which holds nothing the new primary lacks,
//! and every commit cut off with the fence's error names GTIDs the outcome call classifies as
//! the unacknowledged tail.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use strongsync::config::{OnTimeout, ProbeAccount, ProbeConfig, ReplicaConfig};
use support::admin;
use support::mariadb::{wait_for, MariaDb, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER};
use support::strong::{durability, position_holds, Strong, PATIENCE};

const TOKEN: &str = "promote-test-token-0123456789";
const WRITERS: u64 = 8;

#[derive(Default)]
struct Ledger {
    /// Ids whose INSERT came back OK.
    acknowledged: Vec<u64>,
    /// The fence's errors (1180): the GTIDs each named.
    cut_off: Vec<String>,
    /// OKs since the promote.
    after: u64,
}

/// Inserts until `stop`, reconnecting after any error (the kill, the fence, the refusals while
/// fenced).
async fn writer(
    url: String,
    writer: u64,
    ledger: Arc<Mutex<Ledger>>,
    promoted: Arc<std::sync::atomic::AtomicBool>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut seq = 0;
    while !stop.is_cancelled() {
        let Ok(mut conn) = Conn::new(Opts::from_url(&url).unwrap()).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !stop.is_cancelled() {
            seq += 1;
            let id = writer << 32 | seq;
            match conn
                .query_drop(format!("INSERT INTO sbtest.ledger (id) VALUES ({id})"))
                .await
            {
                Ok(()) => {
                    let mut l = ledger.lock().unwrap();
                    l.acknowledged.push(id);
                    if promoted.load(std::sync::atomic::Ordering::SeqCst) {
                        l.after += 1;
                    }
                }
                Err(mysql_async::Error::Server(e)) if e.code == 1180 => {
                    let gtids = e
                        .message
                        .split("transaction ")
                        .nth(1)
                        .and_then(|rest| rest.split(' ').next())
                        .unwrap_or_default()
                        .to_owned();
                    ledger.lock().unwrap().cut_off.push(gtids);
                }
                Err(_) => break,
            }
        }
    }
}

fn ids(server: &MariaDb) -> std::collections::HashSet<u64> {
    server
        .sql("SELECT GROUP_CONCAT(id) FROM sbtest.ledger")
        .split(',')
        .filter_map(|id| id.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn promote_after_a_primary_kill_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let state = dir.path().join("state.json");
    let mut s = Strong::start_with(2, |config, topology| {
        config.durability = durability(1, OnTimeout::Block, Duration::from_secs(3600));
        config.failover.admin_token_file = Some(token);
        config.failover.state_file = Some(state);
        config.probe = ProbeConfig::account_of(REPL_USER, REPL_PASSWORD);
        let account = ProbeAccount {
            user: APP_USER.into(),
            password: APP_PASSWORD.into(),
        };
        config.failover.user = Some(account.user.clone());
        config.failover.password = Some(strongsync::config::Secret(account.password));
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
    s.topology
        .primary
        .sql("CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY)");
    s.topology.wait_replicas_caught_up();

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let promoted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = tokio_util::sync::CancellationToken::new();
    let url = s.proxy.url(APP_USER, APP_PASSWORD);
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(writer(
                url.clone(),
                w,
                Arc::clone(&ledger),
                Arc::clone(&promoted),
                stop.clone(),
            ))
        })
        .collect();
    wait_for("200 acknowledged rows", PATIENCE, || {
        ledger.lock().unwrap().acknowledged.len() >= 200
    });
    let old_primary = s.topology.primary.addr();
    s.topology.primary.kill();

    let answer = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
    assert_eq!(answer.status, 200, "{}", answer.body);
    promoted.store(true, std::sync::atomic::Ordering::SeqCst);
    let report: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(report["epoch"], 2, "{report}");
    assert_eq!(report["retired"], old_primary.as_str(), "{report}");
    let chosen = report["server_id"].as_u64().unwrap() as u32;
    let (new_primary, other) = match s
        .topology
        .replicas
        .iter()
        .position(|r| r.server_id() == chosen)
    {
        Some(0) => (&s.topology.replicas[0], &s.topology.replicas[1]),
        Some(_) => (&s.topology.replicas[1], &s.topology.replicas[0]),
        None => panic!("promoted an unknown server {chosen}"),
    };

    // The writers reconnect to the same address and go on, on the new primary.
    wait_for("100 acknowledged rows after the promote", PATIENCE, || {
        ledger.lock().unwrap().after >= 100
    });
    stop.cancel();
    for w in writers {
        w.await.unwrap();
    }
    let ledger = ledger.lock().unwrap();
    let on_primary = ids(new_primary);
    let pos = new_primary.gtid_binlog_pos();
    assert_eq!(
        other.sql(&format!("SELECT MASTER_GTID_WAIT('{pos}', 60)")),
        "0",
        "the other replica follows the new primary through strongsync"
    );
    let on_other = ids(other);
    let lost: Vec<u64> = ledger
        .acknowledged
        .iter()
        .copied()
        .filter(|id| !on_primary.contains(id) || !on_other.contains(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    // Nothing errant: every GTID the other replica holds, the new primary holds.
    let held = other.gtid_slave_pos();
    for gtid in held.split(',').filter(|g| !g.is_empty()) {
        assert!(
            position_holds(&pos, gtid),
            "{gtid} of {held} is not in the new primary's {pos}"
        );
    }
    for gtids in &ledger.cut_off {
        let outcome = admin::get(s.proxy.admin_addr(), &format!("/outcome?gtid={gtids}"));
        assert!(
            outcome.body.contains("\"unacknowledged_tail\""),
            "{gtids}: {}",
            outcome.body
        );
    }
    eprintln!(
        "acknowledged {}, {} after the promote, {} cut off by the fence",
        ledger.acknowledged.len(),
        ledger.after,
        ledger.cut_off.len()
    );
}
