//! The acknowledged-commit ledger on MySQL 9.7: clients write through the proxy (autocommit
//! `INSERT`s and two-row `BEGIN … COMMIT`s) and record every id whose statement came back OK.
//! At a random moment the primary is killed with SIGKILL; each failover candidate then stops
//! receiving, applies everything it received (`RECEIVED_TRANSACTION_SET`), is cut loose with
//! `RESET REPLICA ALL`, and every acknowledged id must be on at least `quorum` of them — and on
//! each replica the proxy's `/status` names as a failover candidate. The same harness with the
//! proxy in passthrough must report losses (the control: the check can fail).
//!
//! Durable settings: the primary runs `sync_binlog=1` and `innodb_flush_log_at_trx_commit=1`
//! as a strong-sync deployment would (a SIGKILL alone loses nothing from the page cache, but
//! the restarted primary must still have what its replicas got for the next round). The
//! replicas run `sync_relay_log=1`: a MySQL semisync replica acknowledges an event once it is
//! in its relay log, and only with this setting once it is on disk there. That matters only if
//! the replica's own host crashes, which this test does not do, but it is what a deployment
//! that relies on the promise runs (and what `tests/ledger.rs` runs on MariaDB), and it makes
//! the replicas lag under load as real ones do.
//!
//! A longer run: `STRONGSYNC_LEDGER_KILLS=10 cargo test --test mysql_ledger -- --nocapture`
//! (`LEDGER_SEED` replays a run's random choices).

use std::thread;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strongsync::config::{DurabilityConfig, OnTimeout};
use support::ledger::{ids, Held, Ledger, Load, Style, TABLE};
use support::mysql::{
    sql_quote, wait_for, MySql, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER,
};
use support::proxy::TestProxy;
use support::replay;
use support::topology::{proxy_config, MySqlTopology};

/// Clients writing at once (the machine has two cores; the proxy and three servers share them).
const WRITERS: u64 = 16;
/// Primary kills per test, unless `STRONGSYNC_LEDGER_KILLS` says how many.
const PRIMARY_KILLS: u64 = 3;
/// Generous bound for "eventually" (a guard against hangs, not a timing expectation).
const PATIENCE: Duration = Duration::from_secs(90);
/// Seconds a replica may take to apply what it received.
const APPLY_TIMEOUT_SECS: u32 = 60;
/// Commits acknowledged after both replicas stopped receiving, in the control's last round.
const ACKED_WHILE_STOPPED: usize = 100;
/// Without XA: MySQL's XA has its own test in `strong_sync.rs`.
const STYLES: &[Style] = &[Style::Autocommit, Style::Explicit];

/// The outcome of one primary kill.
struct Round {
    ledger: Ledger,
    held: Vec<Held>,
    /// The replicas (by index) `/status` names as failover candidates after the kill (none
    /// when the proxy is in passthrough).
    candidates: Vec<usize>,
}

/// How a round ends.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Load before the kill (or before the replicas in `behind` stop).
    load: Duration,
    /// Stop these replicas' receivers before the kill: they fall behind, which is when
    /// asynchronous replication loses acknowledged commits.
    behind: &'static [usize],
    /// With replicas `behind`, commits to see acknowledged after they stopped before the kill.
    acked_after_stop: usize,
}

/// A primary and two replicas replicating through a proxy with semisync.
struct Servers {
    topology: MySqlTopology,
    proxy: TestProxy,
}

// === impl Servers ===

impl Servers {
    /// The servers with the durable settings of the header, the ledger table, and a proxy set
    /// up by `durability` in front of the primary, both replicas replicating through it with
    /// semisync on.
    fn start(durability: DurabilityConfig) -> Servers {
        let topology = MySqlTopology::start_durable(2);
        topology.primary.sql(TABLE);
        topology.wait_replicas_caught_up();
        let mut config = proxy_config(&topology.primary);
        config.durability = durability;
        let proxy = TestProxy::start_with(config);
        let servers = Servers { topology, proxy };
        for replica in &servers.topology.replicas {
            replica.sql("SET GLOBAL rpl_semi_sync_replica_enabled = ON");
        }
        servers.attach_replicas();
        servers
    }

    /// Points both replicas at the proxy from scratch (after `RESET REPLICA ALL`, they have no
    /// source), with GTID auto-positioning, and waits until the proxy has both as semisync
    /// replicas.
    fn attach_replicas(&self) {
        for replica in &self.topology.replicas {
            replicate_from(replica, self.proxy.port());
        }
        for i in 0..self.topology.replicas.len() {
            self.topology.wait_replica_running(i);
        }
        wait_for("both replicas through the proxy", PATIENCE, || {
            let status = self.proxy.durability().status();
            status.replicas.iter().filter(|r| r.semisync).count() == 2
        });
    }

    /// Runs the load, kills the primary as `plan` says, then brings each replica to what it
    /// received and reads what it holds, as a failover tool would. Leaves the primary
    /// restarted and the replicas caught up with it through the proxy.
    fn primary_kill_round(&mut self, round: u64, plan: Plan) -> Round {
        let load = Load::start(
            &self.proxy.url(APP_USER, APP_PASSWORD),
            round,
            WRITERS,
            STYLES,
        );
        load.wait_running(3);
        thread::sleep(plan.load);
        for &i in plan.behind {
            // The applier first: a receiver stopped alone may leave a transaction half in
            // the relay log, and an applier inside it would make the failover's STOP REPLICA
            // wait a minute for its end (MySQL's grace for a group) before rolling it back.
            self.topology.replicas[i].sql("STOP REPLICA SQL_THREAD; STOP REPLICA IO_THREAD");
        }
        if !plan.behind.is_empty() {
            let stopped = load.acknowledged();
            wait_for("commits acknowledged after the stop", PATIENCE, || {
                load.acknowledged() >= stopped + plan.acked_after_stop
            });
        }
        self.topology.primary.kill();
        let ledger = load.finish(Duration::from_secs(5));
        let candidates = self.failover_candidates();
        let held = self.topology.replicas.iter().map(promote).collect();

        self.topology.primary.restart();
        self.attach_replicas();
        self.topology.wait_replicas_caught_up();
        Round {
            ledger,
            held,
            candidates,
        }
    }

    /// Once the primary is dead and both replica dumps have ended: the replicas (by index)
    /// the proxy's status names as safe to promote.
    fn failover_candidates(&self) -> Vec<usize> {
        wait_for("both replica dumps to end", PATIENCE, || {
            self.proxy.durability().status().replicas.is_empty()
        });
        let status = self.proxy.durability().status();
        self.topology
            .replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| status.failover_candidates.contains(&r.server_id()))
            .map(|(i, _)| i)
            .collect()
    }
}

/// Has `replica` replicate from the proxy on `port` from scratch: the account, plain text
/// (over TLS, as strongsync offers it; `GET_SOURCE_PUBLIC_KEY=1` would serve a plain one), GTID
/// auto-positioning, and retries for as long as a test may keep its source away.
fn replicate_from(replica: &MySql, port: u16) {
    replica.sql(&format!(
        "STOP REPLICA; \
         CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {port}, \
         SOURCE_USER = {}, SOURCE_PASSWORD = {}, SOURCE_AUTO_POSITION = 1, \
         SOURCE_SSL = 1, GET_SOURCE_PUBLIC_KEY = 1, \
         SOURCE_CONNECT_RETRY = 1, SOURCE_RETRY_COUNT = 86400; \
         START REPLICA",
        sql_quote(REPL_USER),
        sql_quote(REPL_PASSWORD)
    ));
}

/// Does to `replica` what a failover tool does to a candidate once its source is dead: no
/// more from the source, apply every transaction received (the SQL thread works through the
/// relay log until `gtid_executed` holds `RECEIVED_TRANSACTION_SET`, which leaves out a
/// transaction received only in part), `RESET REPLICA ALL`. Then reads the ids it holds.
fn promote(replica: &MySql) -> Held {
    replica.sql("STOP REPLICA IO_THREAD");
    let received = replica.received_transaction_set();
    let applying = replica.replica_status().get("Replica_SQL_Running") == Some(&"Yes".into());
    if !applying && !received.is_empty() {
        // Stopped before the kill: applied up to the last whole transaction received, and no
        // further, so that it never starts on one received in part.
        replica.sql(&format!(
            "START REPLICA SQL_THREAD UNTIL SQL_AFTER_GTIDS = {}",
            sql_quote(&received)
        ));
    }
    let timed_out = replica.sql(&format!(
        "SELECT WAIT_FOR_EXECUTED_GTID_SET({}, {APPLY_TIMEOUT_SECS})",
        sql_quote(&received)
    ));
    assert_eq!(
        timed_out,
        "0",
        "replica server_id={} did not apply what it received ({received}) within \
         {APPLY_TIMEOUT_SECS} s; it executed {}; {:?}",
        replica.server_id(),
        replica.gtid_executed(),
        replica.replica_status()
    );
    replica.sql("STOP REPLICA; RESET REPLICA ALL");
    Held {
        ids: ids(&replica.sql("SELECT id FROM sbtest.ledger")),
        ..Held::default()
    }
}

/// A random round: some load, and before some kills one replica fallen behind (the other must
/// then hold everything acknowledged at quorum 1; at quorum 2 the commits park meanwhile).
fn random_plan(rng: &mut StdRng) -> Plan {
    const BEHIND: [&[usize]; 4] = [&[], &[], &[0], &[1]];
    Plan {
        load: Duration::from_millis(rng.random_range(300..2000)),
        behind: BEHIND[rng.random_range(0..BEHIND.len())],
        acked_after_stop: 0,
    }
}

/// Kills the primary [`PRIMARY_KILLS`] times under load (unless `STRONGSYNC_LEDGER_KILLS` says
/// otherwise), with strong sync at `quorum`; every acknowledged commit must be on `quorum`
/// replicas and on every failover candidate.
fn primary_kills(quorum: usize, on_timeout: OnTimeout) {
    let mut rng = StdRng::seed_from_u64(replay::seed("mysql ledger"));
    let mut servers = Servers::start(DurabilityConfig {
        passthrough: false,
        quorum,
        on_timeout,
        // Long enough never to time out here: a commit waits for its quorum or for the kill.
        ack_timeout: Duration::from_secs(600),
        ..DurabilityConfig::default()
    });
    let mut total = 0;
    for round in 1..=replay::kills(PRIMARY_KILLS) {
        let plan = random_plan(&mut rng);
        let r = servers.primary_kill_round(round, plan);
        let acked = r.ledger.committed.len();
        eprintln!(
            "mysql ledger quorum {quorum} round {round} {plan:?}: {acked} ids acknowledged \
             {:?}, {} writers ended on errors, candidates {:?}",
            r.ledger.oks,
            r.ledger.errors.len(),
            r.candidates
        );
        r.ledger.assert_every_style(STYLES, round);
        r.ledger
            .assert_survived(&r.held, &r.candidates, quorum, round);
        total += acked;
    }
    eprintln!(
        "mysql ledger quorum {quorum}: {total} acknowledged ids over {} kills, none lost",
        replay::kills(PRIMARY_KILLS)
    );
    assert_eq!(
        servers.proxy.durability().status().parked,
        0,
        "no waiter leaks"
    );
}

#[test]
fn every_acknowledged_commit_survives_primary_kills_at_quorum_1() {
    primary_kills(1, OnTimeout::Error);
}

#[test]
fn every_acknowledged_commit_survives_primary_kills_at_quorum_2() {
    primary_kills(2, OnTimeout::Error);
}

/// The control: the same load and kill through the proxy in passthrough (the replicas
/// replicate through it, but no OK waits for them). First the replicas merely lag under the
/// load (losses reported, not asserted: they depend on how far the replicas lag); then both
/// replicas' receivers stop and the kill comes only once more commits were acknowledged:
/// those are on no replica, and the check must say so.
#[test]
fn without_the_wait_the_ledger_finds_lost_commits() {
    let mut servers = Servers::start(DurabilityConfig {
        passthrough: true,
        ..DurabilityConfig::default()
    });
    let report = |how: &str, r: &Round| -> usize {
        let held: Vec<&Held> = r.held.iter().collect();
        let lost = r.ledger.lost(&held, 1).len();
        eprintln!(
            "mysql ledger without the wait, {how}: {lost} of {} acknowledged ids on no replica",
            r.ledger.committed.len()
        );
        lost
    };
    let lagging = Plan {
        load: Duration::from_millis(1000),
        behind: &[],
        acked_after_stop: 0,
    };
    let r = servers.primary_kill_round(1, lagging);
    report("replicas lagging", &r);
    let behind = Plan {
        behind: &[0, 1],
        acked_after_stop: ACKED_WHILE_STOPPED,
        ..lagging
    };
    let r = servers.primary_kill_round(2, behind);
    let lost = report("both replicas stopped before the last commits", &r);
    assert!(
        lost > 0,
        "passthrough lost nothing although {ACKED_WHILE_STOPPED} commits were acknowledged \
         after both replicas stopped receiving: the ledger cannot see losses"
    );
}
