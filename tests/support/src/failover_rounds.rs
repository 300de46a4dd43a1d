//! The failover ledger and its control, on either flavour (`tests/promote.rs` runs them on
//! MariaDB and on MySQL 9.7). What differs between the two (how a killed
//! primary rejoins without its tail, how a server says what it executed and whether it holds a
//! GTID the final primary lacks) is a [`LedgerServer`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use rand::{Rng, SeedableRng};
use strongsync::config::{Config, ProbeConfig, ReplicaConfig, Secret};

use crate::admin;
use crate::cluster::Cluster;
use crate::failover::{ids_of, PooledWriters, Writers, IDS};
use crate::mariadb::{wait_for, MariaDb, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER};
use crate::mysql::MySql;
use crate::sql::Statements;
use crate::strong::{blocking, position_holds, Strong, PATIENCE};
use crate::tcp_relay::TcpRelay;
use crate::topology::MySqlTopology;
use crate::topology::Topology;

pub const TOKEN: &str = "failover-test-token-0123456789";
const WRITERS: u64 = 8;
/// Ids of the rows written straight to a fenced primary: above every writer's (`writer << 32`).
const TAIL_IDS: u64 = 1 << 62;

/// Where a rejoining server copies the new primary's data from.
pub struct CopySource {
    pub socket: PathBuf,
    pub url: String,
}

/// A server of the ledger, of either flavour.
#[allow(
    async_fn_in_trait,
    reason = "test support: called generically from the test's own task, never boxed or spawned"
)]
pub trait LedgerServer {
    fn server_id(&self) -> u32;
    fn addr(&self) -> String;
    fn kill(&mut self);
    /// Pid of its server process, for signals a test sends it (SIGSTOP, SIGCONT).
    fn pid(&self) -> u32;
    fn sql(&self, sql: &str) -> String;
    fn query_rows(&self, sql: &str) -> Vec<Vec<String>>;
    fn copy_source(&self) -> CopySource;
    /// What it has executed: `gtid_binlog_pos` on MariaDB, `gtid_executed` on MySQL.
    fn executed(&self) -> String;
    /// Waits until it has applied `executed` (the final primary's), then fails the test if it
    /// holds a GTID that `executed` lacks: an errant transaction.
    fn assert_caught_up_without_errant(&self, executed: &str);
    /// Brings this killed server back as a replica of strongsync at `proxy_port` without its
    /// tail: its ledger replaced by a consistent copy of `source`'s, its binlog (which holds
    /// the tail) reset, replicating from the copy's position.
    async fn rejoin(&mut self, source: &CopySource, proxy_port: u16, dir: &Path);
    /// Inserts `id` into the ledger straight on this server (nothing else writes to it: it is
    /// fenced) and returns the GTID the write got.
    fn write_around(&self, id: u64) -> String;
    /// Whether this server has logged `gtid`: MariaDB's positions keep only the newest GTID of
    /// each domain, so there its binlogs are read; MySQL's `gtid_executed` is exact.
    fn logged(&self, gtid: &str) -> bool;
    /// The source of the first GTID in `position`, as a follow refusal names it.
    fn source_of(position: &str) -> String;
    /// What its replication receiver last failed with (`Last_IO_Error`).
    fn io_error(&self) -> String;
    /// Whether its receiver has received `gtid` (by identity: MariaDB's `Gtid_IO_Pos` names
    /// the newest of a domain, MySQL's `RECEIVED_TRANSACTION_SET` every one).
    fn received(&self, gtid: &str) -> bool;
    /// Stops its receiver.
    fn stop_io(&self);
    /// Makes its receiver wait `secs` for its source before it gives up on a silent
    /// connection, from its next connection on (it reconnects now).
    fn set_net_timeout(&self, secs: u32);
    /// Makes it a primary by hand, as a failover manager would: replication stopped and
    /// forgotten, writable.
    fn make_primary_by_hand(&self);
    /// Inserts `id` into the ledger straight on it with a GTID of a history of its own
    /// (MariaDB: numbered far ahead; MySQL: a foreign source) and returns that GTID.
    fn write_diverged(&self, id: u64) -> String;
    /// Sessions of strongsync's application account on it now.
    fn app_sessions(&self) -> usize {
        self.sql(&format!(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE user = '{APP_USER}'"
        ))
        .parse()
        .unwrap_or(usize::MAX)
    }
}

/// Server `old` rejoins without its tail: its data replaced by a copy of server `from`'s, it
/// replicates through the proxy of `s` (`dir` holds what the copy needs).
pub async fn rejoin<C: LedgerCluster>(s: &mut Strong<C>, old: u32, from: u32, dir: &Path) {
    let source = s.topology.server_mut(from).copy_source();
    let port = s.proxy.port();
    s.topology.server_mut(old).rejoin(&source, port, dir).await;
}

/// `[[replica]]` entries for `servers`, each at its own address.
pub fn replica_configs<'a, S: LedgerServer + 'a>(
    servers: impl IntoIterator<Item = &'a S>,
) -> Vec<ReplicaConfig> {
    servers
        .into_iter()
        .map(|r| ReplicaConfig {
            server_id: r.server_id(),
            address: Some(r.addr()),
            ..ReplicaConfig::default()
        })
        .collect()
}

/// The servers of a ledger topology.
pub trait LedgerCluster: Cluster {
    type Server: LedgerServer;
    fn servers(&self) -> Vec<&Self::Server>;
    fn server_mut(&mut self, server_id: u32) -> &mut Self::Server;
    /// The probe's account on this primary (created here where the replication account will
    /// not do).
    fn probe_account(&self) -> ProbeConfig;
    /// Waits until every replica has applied what the primary has.
    fn wait_caught_up(&self);
}

pub fn ids(server: &impl LedgerServer) -> HashSet<u64> {
    ids_of(server.query_rows(IDS))
}

/// strongsync in front of `C` with an admin token, the probe, the failover account and (with
/// `replicas_configured`) every server as a promote candidate.
pub fn start<C: LedgerCluster>(
    quorum: usize,
    dir: &Path,
    replicas_configured: bool,
    adjust: impl FnOnce(&mut Config),
) -> Strong<C> {
    start_with::<C>(quorum, dir, |config, topology| {
        if replicas_configured {
            config.replica = replica_configs(topology.servers());
        }
        adjust(config);
    })
}

/// [`start`], with `adjust` seeing the servers.
pub fn start_with<C: LedgerCluster>(
    quorum: usize,
    dir: &Path,
    adjust: impl FnOnce(&mut Config, &C),
) -> Strong<C> {
    let token = crate::admin::token_file(dir, TOKEN);
    let s = Strong::<C>::launch(2, None, |config, topology| {
        config.durability = blocking(quorum);
        config.failover.admin_token_file = Some(token);
        config.probe = topology.probe_account();
        config.failover.user = Some(APP_USER.into());
        config.failover.password = Some(Secret(APP_PASSWORD.into()));
        adjust(config, topology);
    });
    s.topology
        .primary_sql("CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY)");
    s
}

/// The servers' relays: strongsync reaches every server through one of its own (sessions,
/// dumps, the probe, promote's looks), so that a partition can cut any primary off from it
/// while the server lives on.
pub struct Relays(HashMap<u32, TcpRelay>);

impl Relays {
    /// The address strongsync knows server `server_id` by.
    pub fn addr(&self, server_id: u32) -> String {
        self.relay(server_id).addr().to_string()
    }

    /// The relay in front of server `server_id`.
    pub fn relay(&self, server_id: u32) -> &TcpRelay {
        &self.0[&server_id]
    }
}

/// Like [`start`], with every server behind a [`TcpRelay`] (strongsync's primary is the
/// relay of the first) and listed as a promote candidate by its relay's address.
pub fn launch_relayed<C: LedgerCluster>(
    quorum: usize,
    dir: &Path,
    adjust: impl FnOnce(&mut Config),
) -> (Strong<C>, Relays) {
    let mut relays = HashMap::new();
    let s = start_with::<C>(quorum, dir, |config, topology| {
        for server in topology.servers() {
            let target = server.addr().parse().expect("a server's TCP address");
            relays.insert(server.server_id(), TcpRelay::start(target));
        }
        let first = topology.servers()[0].server_id();
        config.primary = relays[&first].addr().to_string();
        config.replica = topology
            .servers()
            .into_iter()
            .map(|r| ReplicaConfig {
                server_id: r.server_id(),
                address: Some(relays[&r.server_id()].addr().to_string()),
                ..ReplicaConfig::default()
            })
            .collect();
        // A partitioned server is looked at (and given up on) within this.
        config.timeouts.primary_connect = Duration::from_secs(2);
        adjust(config);
    });
    (s, Relays(relays))
}

/// How the primary of a round goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// SIGKILLed.
    Kill,
    /// Fenced and switched over while it lives on (and takes a write around strongsync).
    Planned,
    /// Cut off from strongsync by a partition, switched over, and back once it heals (it
    /// takes a write around strongsync meanwhile).
    Partition,
}

/// The rounds' kinds, in turn.
const ROUNDS: [Round; 3] = [Round::Kill, Round::Planned, Round::Partition];

/// Rounds of: eight writers on pooled connections commit all along; after a random number of
/// acknowledged rows the primary goes — SIGKILLed, switched over while alive, or cut off by a
/// partition that heals after the switch (in turn) —; promote; the writers go on through the
/// same address; the old primary rejoins without its tail. An old primary that lives gets no
/// row sent after it was fenced (or cut off), and its tail (a write around strongsync) reaches
/// no server. Then every acknowledged row is on the final primary and every replica, no server
/// holds a tail row, no replica holds a GTID the final primary lacks, and every commit the
/// fence cut off names GTIDs the outcome call calls the tail.
pub async fn failover_rounds<C: LedgerCluster>(quorum: usize, rounds: usize) {
    let seed = crate::replay::seed(&format!("failover ledger, quorum {quorum}"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let (mut s, relays) = launch_relayed::<C>(quorum, dir.path(), |config| {
        config.failover.state_file = Some(crate::admin::state_file(dir.path(), &config.primary));
    });
    s.topology.wait_caught_up();
    let writers = PooledWriters::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    let mut primary = s.topology.servers()[0].server_id();
    let mut tail_rows = Vec::new();
    let mut on_retired = 0usize;
    for round in 0..rounds {
        let kind = ROUNDS[round % ROUNDS.len()];
        let before = writers.acknowledged();
        let more = rng.random_range(50..400);
        wait_for(
            &format!("round {round}: {more} more acknowledged rows"),
            PATIENCE,
            || writers.acknowledged() >= before + more,
        );
        let old_addr = relays.addr(primary);
        // Statements sent from this moment on must never reach the old primary.
        let cut = round as u32 * 2 + 1;
        let mut tail = None;
        match kind {
            Round::Kill => s.topology.server_mut(primary).kill(),
            Round::Planned | Round::Partition => {
                if kind == Round::Partition {
                    relays.relay(primary).partition();
                    writers.enter(cut);
                }
                let fenced = admin::post(s.proxy.admin_addr(), "/fence", Some(TOKEN), "");
                assert_eq!(fenced.status, 200, "round {round}: {}", fenced.body);
                writers.enter(cut);
                let id = TAIL_IDS | round as u64;
                let gtid = s.topology.server_mut(primary).write_around(id);
                assert!(
                    !gtid.is_empty(),
                    "round {round}: the write around strongsync got no GTID"
                );
                tail_rows.push(id);
                tail = Some(gtid);
            }
        }
        let answer = admin::post(s.proxy.admin_addr(), "/promote", Some(TOKEN), "{}");
        assert_eq!(answer.status, 200, "round {round}: {}", answer.body);
        writers.enter(cut + 1);
        let report: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(report["epoch"], round as u64 + 2, "{report}");
        assert_eq!(report["retired"], old_addr.as_str(), "{report}");
        let chosen = report["server_id"].as_u64().unwrap() as u32;
        assert_ne!(chosen, primary, "round {round}: promoted the old primary");
        if kind == Round::Partition {
            relays.relay(primary).heal();
        }
        if kind != Round::Kill {
            // The old primary lives: once strongsync's connections to it are gone (closed at
            // the follow), nothing sent after the cut is on it.
            let old = s.topology.server_mut(primary);
            wait_for(
                &format!("round {round}: no session of strongsync's left on the old primary"),
                PATIENCE,
                || old.app_sessions() == 0,
            );
            let on_old = ids(old);
            let late = writers.ledger.lock().unwrap().sent_from(cut);
            let reached: Vec<_> = late.iter().filter(|id| on_old.contains(id)).collect();
            assert!(
                reached.is_empty(),
                "round {round} ({kind:?}): the retired primary got rows sent after the cut: {reached:?}"
            );
            on_retired += reached.len();
        }
        rejoin(&mut s, primary, chosen, dir.path()).await;
        // The operator says it rejoined without its tail: it may be promoted again.
        let body = format!(r#"{{"primary": "{old_addr}"}}"#);
        let reinstated = admin::post(s.proxy.admin_addr(), "/reinstate", Some(TOKEN), &body);
        assert_eq!(reinstated.status, 200, "{}", reinstated.body);
        wait_for(
            &format!("round {round}: the old primary to rejoin"),
            PATIENCE,
            || s.semisync_replicas() == 2,
        );
        // Checked now: once the old primary is promoted again, MySQL gives its next write the
        // lowest number its own source lacks, which may be the removed tail's.
        if let Some(gtid) = tail {
            for server in s.topology.servers() {
                let id = server.server_id();
                assert!(
                    !server.logged(&gtid),
                    "round {round}: {id} holds the tail {gtid}"
                );
            }
        }
        // The writers go on through the same address (at quorum 2 once the old primary is back).
        let after = writers.acknowledged();
        wait_for(
            &format!("round {round}: writers going on"),
            PATIENCE,
            || writers.acknowledged() >= after + 50,
        );
        eprintln!(
            "round {round}: {kind:?} of {primary}, promoted {chosen}, {} acknowledged",
            writers.acknowledged()
        );
        primary = chosen;
    }
    let ledger = writers.stop().await;
    let acknowledged = ledger.acknowledged();
    let final_primary = s.topology.server_mut(primary);
    let executed = final_primary.executed();
    let mut missing = Vec::new();
    for server in s.topology.servers() {
        let id = server.server_id();
        if id != primary {
            server.assert_caught_up_without_errant(&executed);
        }
        let on = ids(server);
        let held: Vec<_> = tail_rows.iter().filter(|row| on.contains(row)).collect();
        assert!(held.is_empty(), "server {id} holds tail rows {held:?}");
        missing.extend(
            acknowledged
                .iter()
                .filter(|i| !on.contains(i))
                .map(|i| (id, *i)),
        );
    }
    assert!(missing.is_empty(), "acknowledged rows lost: {missing:?}");
    for gtids in ledger.cut_off.iter().filter(|g| !g.is_empty()) {
        let outcome = admin::get(s.proxy.admin_addr(), &format!("/outcome?gtid={gtids}"));
        assert!(
            outcome.body.contains("\"unacknowledged_tail\""),
            "{gtids}: {}",
            outcome.body
        );
    }
    eprintln!(
        "quorum {quorum}: {} acknowledged over {rounds} failovers ({:?}), 0 lost, {on_retired} rows on a retired primary after its cut, {} cut off by a fence",
        acknowledged.len(),
        &ROUNDS[..rounds.min(ROUNDS.len())],
        ledger.cut_off.len()
    );
}

/// The control: promoting the replica that received the least loses acknowledged rows, so the
/// ledger above can fail. strongsync refuses to follow it, naming the source of what it lacks,
/// until forced, and counts the forced follow.
pub async fn control<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start::<C>(1, dir.path(), false, |_| {});
    s.topology.wait_caught_up();
    // Replica 1 stops receiving; replica 0 acknowledges alone (quorum 1).
    s.stop_io(1);
    s.wait_semisync(1);
    let writers = Writers::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    wait_for("200 acknowledged rows", PATIENCE, || {
        writers.acknowledged() >= 200
    });
    let first = s.topology.servers()[0].server_id();
    s.topology.server_mut(first).kill();
    // Fenced before the writers stop: a commit parked when the primary died, whose events no
    // replica received, waits (`on_timeout = block`) until the fence answers it.
    let fenced = admin::post(s.proxy.admin_addr(), "/fence", Some(TOKEN), "");
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    let ledger = writers.stop().await;
    let least = s.topology.servers()[2];
    least.sql("STOP REPLICA; RESET REPLICA ALL; SET GLOBAL read_only = 0");
    let body = format!(r#"{{"primary": "{}"}}"#, least.addr());
    let refused = admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body);
    assert_eq!(refused.status, 409, "{}", refused.body);
    let acknowledged = admin::status(s.proxy.admin_addr()).watermark_gtid_position;
    let source = C::Server::source_of(&acknowledged);
    assert!(
        refused.body.contains("of the watermark") && refused.body.contains(&source),
        "{source}: {}",
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

// === MariaDB ===

impl LedgerServer for MariaDb {
    fn server_id(&self) -> u32 {
        MariaDb::server_id(self)
    }

    fn addr(&self) -> String {
        MariaDb::addr(self)
    }

    fn kill(&mut self) {
        MariaDb::kill(self)
    }

    fn pid(&self) -> u32 {
        MariaDb::pid(self)
    }

    fn sql(&self, sql: &str) -> String {
        MariaDb::sql(self, sql)
    }

    fn query_rows(&self, sql: &str) -> Vec<Vec<String>> {
        MariaDb::query_rows(self, sql)
    }

    fn copy_source(&self) -> CopySource {
        CopySource {
            socket: self.socket().to_owned(),
            url: self.url(APP_USER, APP_PASSWORD),
        }
    }

    fn executed(&self) -> String {
        self.gtid_binlog_pos()
    }

    fn assert_caught_up_without_errant(&self, executed: &str) {
        let id = self.server_id();
        // gtid_strict_mode (deploy/sandbox/mariadb.cnf) stops the SQL thread at a GTID that
        // is out of order with one a replica's binlog already has: an errant one.
        let waited = self.sql(&format!("SELECT MASTER_GTID_WAIT('{executed}', 60)"));
        assert_eq!(
            waited,
            "0",
            "server {id} did not apply {executed}: {:?}",
            self.slave_status().get("Last_SQL_Error")
        );
        let held = self.gtid_slave_pos();
        for gtid in held.split(',').filter(|g| !g.is_empty()) {
            assert!(
                position_holds(executed, gtid),
                "errant {gtid} on {id}: {held} vs {executed}"
            );
        }
    }

    /// From a `mariadb-dump --gtid` of the new primary, loaded without binlogging, then
    /// `RESET MASTER` and `gtid_slave_pos` at the dump's position.
    async fn rejoin(&mut self, source: &CopySource, proxy_port: u16, dir: &Path) {
        self.restart();
        let dump = dir.join(format!("rejoin-{}.sql", self.server_id()));
        let out = std::process::Command::new("mariadb-dump")
            .arg("--no-defaults")
            .arg(format!("--socket={}", source.socket.display()))
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
        self.sql(&format!(
            "STOP SLAVE; RESET SLAVE ALL; SET sql_log_bin = 0; DROP DATABASE sbtest; \
             CREATE DATABASE sbtest; USE sbtest; SOURCE {}; SET sql_log_bin = 1; \
             RESET MASTER; SET GLOBAL gtid_slave_pos = '{pos}'",
            dump.display()
        ));
        self.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {proxy_port}, \
             MASTER_USER = '{REPL_USER}', MASTER_PASSWORD = '{REPL_PASSWORD}', \
             MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE"
        ));
        self.set_semi_sync_replica(true);
    }

    fn write_around(&self, id: u64) -> String {
        self.sql(&format!(
            "INSERT INTO sbtest.ledger (id) VALUES ({id}); SELECT @@last_gtid"
        ))
    }

    fn logged(&self, gtid: &str) -> bool {
        self.query_rows("SHOW BINARY LOGS").iter().any(|log| {
            let events = self.query_rows(&format!("SHOW BINLOG EVENTS IN '{}'", log[0]));
            // A GTID event's Info: `BEGIN GTID 0-1-5` (or `GTID 0-1-5` for DDL).
            events.iter().any(|event| {
                let mut words = event.get(5).map(String::as_str).unwrap_or("").split(' ');
                words.any(|w| w == "GTID") && words.next() == Some(gtid)
            })
        })
    }

    fn io_error(&self) -> String {
        self.slave_status()
            .get("Last_IO_Error")
            .cloned()
            .unwrap_or_default()
    }

    fn received(&self, gtid: &str) -> bool {
        let (source, seq) = gtid.rsplit_once('-').expect("a MariaDB GTID");
        let seq: u64 = seq.parse().expect("a sequence number");
        let io_pos = self
            .slave_status()
            .get("Gtid_IO_Pos")
            .cloned()
            .unwrap_or_default();
        io_pos.split(',').any(|g| {
            g.trim()
                .rsplit_once('-')
                .is_some_and(|(s, n)| s == source && n.parse::<u64>().is_ok_and(|n| n >= seq))
        })
    }

    fn stop_io(&self) {
        self.sql("STOP SLAVE IO_THREAD");
    }

    fn set_net_timeout(&self, secs: u32) {
        self.sql(&format!(
            "STOP SLAVE IO_THREAD; SET GLOBAL slave_net_timeout = {secs}; START SLAVE IO_THREAD"
        ));
    }

    fn make_primary_by_hand(&self) {
        self.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0");
    }

    fn write_diverged(&self, id: u64) -> String {
        self.sql(&format!(
            "SET gtid_seq_no = 1000000; INSERT INTO sbtest.ledger (id) VALUES ({id}); SELECT @@last_gtid"
        ))
    }

    /// `domain-server` of `domain-server-seq`.
    fn source_of(position: &str) -> String {
        let first = position.split(',').next().unwrap_or_default();
        first
            .rsplit_once('-')
            .map_or(first, |(source, _)| source)
            .to_owned()
    }
}

impl LedgerCluster for Topology {
    type Server = MariaDb;

    fn wait_caught_up(&self) {
        Topology::wait_replicas_caught_up(self)
    }

    fn servers(&self) -> Vec<&MariaDb> {
        std::iter::once(&self.primary)
            .chain(&self.replicas)
            .collect()
    }

    fn server_mut(&mut self, server_id: u32) -> &mut MariaDb {
        std::iter::once(&mut self.primary)
            .chain(&mut self.replicas)
            .find(|r| r.server_id() == server_id)
            .expect("a server of the test")
    }

    /// The replication account: it may read the binlog position and, with SLAVE MONITOR, a
    /// candidate's replication state.
    fn probe_account(&self) -> ProbeConfig {
        ProbeConfig::account_of(REPL_USER, REPL_PASSWORD)
    }
}

// === MySQL ===

impl LedgerServer for MySql {
    fn server_id(&self) -> u32 {
        MySql::server_id(self)
    }

    fn addr(&self) -> String {
        MySql::addr(self)
    }

    fn kill(&mut self) {
        MySql::kill(self)
    }

    fn pid(&self) -> u32 {
        MySql::pid(self)
    }

    fn sql(&self, sql: &str) -> String {
        MySql::sql(self, sql)
    }

    fn query_rows(&self, sql: &str) -> Vec<Vec<String>> {
        MySql::query_rows(self, sql)
    }

    fn copy_source(&self) -> CopySource {
        CopySource {
            socket: self.socket(),
            url: self.url(APP_USER, APP_PASSWORD),
        }
    }

    fn executed(&self) -> String {
        self.gtid_executed()
    }

    fn assert_caught_up_without_errant(&self, executed: &str) {
        let id = self.server_id();
        let waited = self.sql(&format!(
            "SELECT WAIT_FOR_EXECUTED_GTID_SET('{executed}', 60)"
        ));
        assert_eq!(
            waited,
            "0",
            "server {id} did not apply {executed}: {:?}",
            self.replica_status().get("Last_SQL_Error")
        );
        let held = self.gtid_executed();
        assert!(
            self.gtid_subset(&held, executed),
            "errant GTIDs on {id}: {held} is not within the final primary's {executed}"
        );
    }

    /// From a copy of the new primary's ledger taken under a read lock with its
    /// `gtid_executed`, loaded without binlogging; `RESET BINARY LOGS AND GTIDS` drops the
    /// binlog and `gtid_purged` says it has what the copy has.
    async fn rejoin(&mut self, source: &CopySource, proxy_port: u16, _dir: &Path) {
        self.restart();
        let mut from = Conn::new(Opts::from_url(&source.url).unwrap())
            .await
            .unwrap();
        from.run("FLUSH TABLES WITH READ LOCK").await;
        let executed: String = from.one("SELECT @@global.gtid_executed").await;
        let ids: Vec<u64> = from.query(IDS).await.unwrap();
        from.run("UNLOCK TABLES").await;
        drop(from);
        let mut target = Conn::new(Opts::from_url(&self.url(APP_USER, APP_PASSWORD)).unwrap())
            .await
            .unwrap();
        target
            .run("STOP REPLICA; RESET REPLICA ALL; SET sql_log_bin = 0; TRUNCATE sbtest.ledger")
            .await;
        for chunk in ids.chunks(1000) {
            let values: Vec<String> = chunk.iter().map(|id| format!("({id})")).collect();
            target
                .run(format!(
                    "INSERT INTO sbtest.ledger (id) VALUES {}",
                    values.join(",")
                ))
                .await;
        }
        target
            .run(format!(
                "SET sql_log_bin = 1; RESET BINARY LOGS AND GTIDS; \
                 SET GLOBAL gtid_purged = '{executed}'"
            ))
            .await;
        drop(target);
        if self
            .try_sql("SELECT @@global.rpl_semi_sync_replica_enabled")
            .is_err()
        {
            self.sql("INSTALL PLUGIN rpl_semi_sync_replica SONAME 'semisync_replica.so'");
        }
        self.sql(&format!(
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {proxy_port}, \
             SOURCE_USER = '{REPL_USER}', SOURCE_PASSWORD = '{REPL_PASSWORD}', \
             SOURCE_AUTO_POSITION = 1, SOURCE_SSL = 1, GET_SOURCE_PUBLIC_KEY = 1, \
             SOURCE_CONNECT_RETRY = 1; START REPLICA"
        ));
        self.set_semi_sync_replica(true);
    }

    fn write_around(&self, id: u64) -> String {
        self.sql(&format!(
            "SET @before = @@global.gtid_executed; INSERT INTO sbtest.ledger (id) VALUES ({id}); \
             SELECT GTID_SUBTRACT(@@global.gtid_executed, @before)"
        ))
    }

    fn logged(&self, gtid: &str) -> bool {
        self.sql(&format!(
            "SELECT GTID_SUBSET('{gtid}', @@global.gtid_executed)"
        )) == "1"
    }

    fn io_error(&self) -> String {
        self.replica_status()
            .get("Last_IO_Error")
            .cloned()
            .unwrap_or_default()
    }

    fn received(&self, gtid: &str) -> bool {
        let received = self.received_transaction_set();
        self.gtid_subset(gtid, &received)
    }

    fn stop_io(&self) {
        self.sql("STOP REPLICA IO_THREAD");
    }

    fn set_net_timeout(&self, secs: u32) {
        self.sql(&format!(
            "STOP REPLICA IO_THREAD; SET GLOBAL replica_net_timeout = {secs}; START REPLICA IO_THREAD"
        ));
    }

    fn make_primary_by_hand(&self) {
        self.sql(
            "STOP REPLICA; RESET REPLICA ALL; SET GLOBAL super_read_only = 0; SET GLOBAL read_only = 0",
        );
    }

    fn write_diverged(&self, id: u64) -> String {
        let gtid = "bbbbbbbb-0000-4000-8000-000000000001:1";
        self.sql(&format!(
            "SET gtid_next = '{gtid}'; INSERT INTO sbtest.ledger (id) VALUES ({id}); SET gtid_next = 'AUTOMATIC'"
        ));
        gtid.to_owned()
    }

    /// The UUID of `uuid:interval…`.
    fn source_of(position: &str) -> String {
        position.split(':').next().unwrap_or_default().to_owned()
    }
}

impl LedgerCluster for MySqlTopology {
    type Server = MySql;

    fn wait_caught_up(&self) {
        MySqlTopology::wait_replicas_caught_up(self)
    }

    fn servers(&self) -> Vec<&MySql> {
        std::iter::once(&self.primary)
            .chain(&self.replicas)
            .collect()
    }

    fn server_mut(&mut self, server_id: u32) -> &mut MySql {
        std::iter::once(&mut self.primary)
            .chain(&mut self.replicas)
            .find(|r| r.server_id() == server_id)
            .expect("a server of the test")
    }

    /// An account of its own with `REPLICATION CLIENT`, which `SHOW BINARY LOG STATUS` and a
    /// candidate's `SHOW REPLICA STATUS` need on MySQL.
    fn probe_account(&self) -> ProbeConfig {
        self.primary.sql(
            "CREATE USER 'probe'@'%' IDENTIFIED BY 'probe-secret'; \
             GRANT REPLICATION CLIENT ON *.* TO 'probe'@'%'",
        );
        ProbeConfig::account_of("probe", "probe-secret")
    }
}
