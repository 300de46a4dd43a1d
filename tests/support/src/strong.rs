//! A primary and replicas replicating through an in-process proxy with semisync, for the tests
//! of strong sync: start it, park commits, and read what the replicas themselves received —
//! the proof, from outside the proxy, that a client's OK came after its quorum had the
//! transaction.

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use strongsync::config::{DurabilityConfig, OnTimeout};
use strongsync::durability::State;
use strongsync::Config;

use super::admin;
pub use super::cluster::{Cluster, Witness};
use super::mariadb::{wait_for, MariaDb, APP_PASSWORD, APP_USER};
use super::proxy::TestProxy;
use super::sql::Statements;
use super::tcp_relay::TcpRelay;
use super::topology::Topology;

/// How long a test waits for something it expects to happen.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The servers and the proxy.
pub struct Strong<C: Cluster = Topology> {
    pub topology: C,
    pub proxy: TestProxy,
    /// The relay one replica reaches the proxy through, if it was started with one.
    relay: Option<(usize, TcpRelay)>,
}

/// A statement's answer, with what the witnesses had received when it came.
pub struct Watched {
    pub conn: Conn,
    pub result: mysql_async::Result<()>,
    /// Per witness, what it had received, read as soon as the answer arrived.
    pub received: Vec<String>,
}

// === impl Strong ===

impl Strong {
    /// `replicas` MariaDB replicas replicating through a proxy set up with `durability`
    /// (semisync on), and a table `sbtest.t (id AUTO_INCREMENT, v INT)`.
    pub fn start(replicas: usize, durability: DurabilityConfig) -> Strong {
        Strong::start_with(replicas, |config, _| config.durability = durability)
    }

    /// Like [`start`](Strong::start), with the proxy's configuration adjusted by `adjust`
    /// (which sees the servers).
    pub fn start_with(replicas: usize, adjust: impl FnOnce(&mut Config, &Topology)) -> Strong {
        Strong::launch(replicas, None, adjust)
    }

    /// Like [`start_with`](Self::start_with); replica `relayed` (if any) reaches the proxy
    /// through a [`TcpRelay`] the test controls (see [`relay`](Self::relay)).
    pub fn start_relayed(
        replicas: usize,
        relayed: Option<usize>,
        adjust: impl FnOnce(&mut Config, &Topology),
    ) -> Strong {
        Strong::launch(replicas, relayed, adjust)
    }
}

impl<C: Cluster> Strong<C> {
    /// Like [`Strong::start`], on servers of any kind (`Strong::<MySqlTopology>::start_on`).
    pub fn start_on(replicas: usize, durability: DurabilityConfig) -> Strong<C> {
        Strong::launch(replicas, None, |config, _| config.durability = durability)
    }

    /// Like [`Strong::start_relayed`], on servers of any kind.
    pub fn launch(
        replicas: usize,
        relayed: Option<usize>,
        adjust: impl FnOnce(&mut Config, &C),
    ) -> Strong<C> {
        let topology = C::start(replicas);
        let mut config = topology.proxy_config();
        config.durability.passthrough = false;
        adjust(&mut config, &topology);
        let proxy = TestProxy::start_with(config);
        let relay = relayed.map(|i| (i, TcpRelay::start(proxy.addr())));
        let strong = Strong {
            topology,
            proxy,
            relay,
        };
        for i in 0..replicas {
            strong.attach(i, true);
        }
        strong.wait_semisync(replicas);
        strong
    }

    /// The relay between the relayed replica and the proxy.
    ///
    /// # Panics
    /// If the servers were started without one.
    pub fn relay(&self) -> &TcpRelay {
        &self.relay.as_ref().expect("started with a relay").1
    }

    /// Points replica `i` at the proxy (through the relay, if it is the relayed one), with
    /// semisync on or off, and waits until it runs.
    pub fn attach(&self, i: usize, semisync: bool) {
        self.topology.set_semisync(i, semisync);
        let port = match &self.relay {
            Some((relayed, relay)) if *relayed == i => relay.port(),
            _ => self.proxy.port(),
        };
        self.topology.point_replica_at(i, "127.0.0.1", port);
        self.topology.wait_replica_running(i);
    }

    /// Starts replica `i` again after a kill, on its data directory, and has it replicate with
    /// semisync through whatever it pointed at (a server forgets its `SET GLOBAL`s and does
    /// not start replicating by itself).
    pub fn restart_replica(&mut self, i: usize) {
        self.topology.restart_replica(i);
    }

    /// Connected semisync replicas, as the proxy sees them.
    pub fn semisync_replicas(&self) -> usize {
        let status = self.proxy.durability().status();
        status.replicas.iter().filter(|r| r.semisync).count()
    }

    /// The proxy's metrics, scraped from its admin port.
    pub fn metrics(&self) -> admin::Scrape {
        admin::metrics(self.proxy.admin_addr())
    }

    /// Points replica `i` straight at the primary (the proxy never sees what it receives).
    pub fn detach(&self, i: usize) {
        self.topology
            .point_replica_at(i, "127.0.0.1", self.topology.primary_port());
        self.topology.wait_replica_running(i);
    }

    /// Waits until exactly `n` semisync replicas are connected to the proxy.
    pub fn wait_semisync(&self, n: usize) {
        wait_for(&format!("{n} semisync replicas"), PATIENCE, || {
            self.semisync_replicas() == n
        });
    }

    pub fn stop_io(&self, i: usize) {
        self.topology.stop_io(i);
    }

    pub fn start_io(&self, i: usize) {
        self.topology.start_io(i);
    }

    /// Stops every replica's I/O thread and waits until the proxy has no semisync replica.
    pub fn stop_all(&self) {
        for i in 0..self.topology.replica_count() {
            self.stop_io(i);
        }
        self.wait_semisync(0);
    }

    /// Runs `sql` on a fresh connection in the background (watched by `witnesses`) and waits
    /// until it is parked.
    pub async fn park(
        &self,
        sql: &str,
        witnesses: Vec<Witness>,
    ) -> tokio::task::JoinHandle<Watched> {
        let conn = self.client().await;
        let before = self.parked();
        let watched = spawn_watched(conn, sql, witnesses);
        wait_for(&format!("{sql} to park"), PATIENCE, || {
            self.parked() == before + 1
        });
        watched
    }

    /// Commits parked in the proxy now.
    pub fn parked(&self) -> usize {
        self.proxy.durability().status().parked
    }

    pub fn released(&self, outcome: &str) -> u64 {
        self.proxy.durability().status().released[outcome]
    }

    /// Commits released so far, however.
    pub fn released_total(&self) -> u64 {
        self.proxy.durability().status().released.values().sum()
    }

    /// Strong sync's state.
    pub fn state(&self) -> State {
        self.proxy.durability().status().state
    }

    /// Waits until `n` commits are parked.
    pub fn wait_parked(&self, n: usize) {
        wait_for(&format!("{n} parked commit(s)"), PATIENCE, || {
            self.parked() == n
        });
    }

    /// A client of the proxy, as the application account.
    pub async fn client(&self) -> Conn {
        Conn::new(Opts::from_url(&self.proxy.url(APP_USER, APP_PASSWORD)).unwrap())
            .await
            .unwrap()
    }

    pub fn witness(&self, i: usize) -> Witness {
        self.topology.witness(i)
    }

    /// A witness of every replica, in order.
    pub fn witnesses(&self) -> Vec<Witness> {
        (0..self.topology.replica_count())
            .map(|i| self.witness(i))
            .collect()
    }

    /// Commits `n` rows into `sbtest.t` (`v` from 0), each in its own statement, through a
    /// client of its own.
    pub async fn commit_rows(&self, n: u32) {
        let mut client = self.client().await;
        for v in 0..n {
            client
                .run(format!("INSERT INTO sbtest.t (v) VALUES ({v})"))
                .await;
        }
    }
}

/// A strong-sync configuration: quorum, what happens on timeout, and the timeout.
pub fn durability(quorum: usize, on_timeout: OnTimeout, ack_timeout: Duration) -> DurabilityConfig {
    DurabilityConfig {
        quorum,
        on_timeout,
        ack_timeout,
        ..DurabilityConfig::default()
    }
}

/// Strong sync at `quorum` under `on_timeout = block`, with an `ack_timeout` (an hour) no test
/// waits out: a commit waits for its quorum, however long.
pub fn blocking(quorum: usize) -> DurabilityConfig {
    durability(quorum, OnTimeout::Block, Duration::from_secs(3600))
}

/// Runs `sql` on `conn` in the background; the moment its answer arrives, reads what each of
/// `witnesses` has received.
pub fn spawn_watched(
    mut conn: Conn,
    sql: impl Into<String>,
    witnesses: Vec<Witness>,
) -> tokio::task::JoinHandle<Watched> {
    let sql = sql.into();
    tokio::spawn(async move {
        let result = conn.query_drop(sql).await;
        let received =
            tokio::task::spawn_blocking(move || witnesses.iter().map(Witness::received).collect())
                .await
                .expect("witnesses read");
        Watched {
            conn,
            result,
            received,
        }
    })
}

/// Waits for a watched statement's answer (once something has released it).
pub async fn answered(watched: tokio::task::JoinHandle<Watched>) -> Watched {
    joined(watched).await
}

/// Waits for `task` (a statement run in the background) to end: within [`PATIENCE`], and
/// without panicking.
pub async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the statement was answered")
        .expect("the statement's task")
}

/// Waits for `watched`'s answer, which must be an OK, and asserts that its witness `i` had
/// received `gtid` when it came (by `holds`, the server's own test: [`Cluster::holds`]);
/// `what` names the statement in a failure. Returns what was watched.
pub async fn ok_once_held(
    watched: tokio::task::JoinHandle<Watched>,
    i: usize,
    holds: fn(&str, &str) -> bool,
    gtid: &str,
    what: &str,
) -> Watched {
    let watched = answered(watched).await;
    if let Err(e) = &watched.result {
        panic!("{what}: {e}");
    }
    assert!(
        holds(&watched.received[i], gtid),
        "{what}: answered before witness {i} had {gtid}: it had {}",
        watched.received[i]
    );
    watched
}

/// True if a GTID position (`d-s-n,…`, as MariaDB shows one) holds `gtid`: its domain is at
/// least that far.
pub fn position_holds(position: &str, gtid: &str) -> bool {
    let parse = |g: &str| -> Option<(u32, u64)> {
        let mut parts = g.trim().split('-');
        let domain = parts.next()?.parse().ok()?;
        let _server: u32 = parts.next()?.parse().ok()?;
        Some((domain, parts.next()?.parse().ok()?))
    };
    let (domain, seq) = parse(gtid).unwrap_or_else(|| panic!("not a GTID: {gtid}"));
    position
        .split(',')
        .filter_map(parse)
        .any(|(d, s)| d == domain && s >= seq)
}

/// The GTID of the newest transaction of `domain` in the primary's binlog.
pub fn newest_gtid(primary: &MariaDb, domain: u32) -> String {
    primary
        .gtid_binlog_pos()
        .split(',')
        .find(|g| g.split('-').next() == Some(&domain.to_string()))
        .unwrap_or_else(|| panic!("no GTID of domain {domain} in the binlog"))
        .to_owned()
}
