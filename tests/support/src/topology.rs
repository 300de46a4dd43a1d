//! A primary plus N replicas that replicate directly from it with GTID, on either server: a
//! [`Topology`] of MariaDB servers or a [`MySqlTopology`].

use std::collections::HashMap;
use std::fmt::Debug;
use std::panic;
use std::thread;
use std::time::Duration;

use strongsync::Config;

use super::mariadb::{self, Deadline, MariaDb, MariaDbOptions};
use super::mysql::{self, MySql, MySqlOptions};

/// Seconds a replica may take to reach the primary's GTIDs.
const CATCH_UP_TIMEOUT_SECS: u32 = 60;
const REPLICA_START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Reconnection attempts (one a second) before a MySQL replica's receiver gives up: a day, so
/// that a source that goes away for a while (a proxy restarted by a test) is reconnected to;
/// MySQL's default of 10 would stop the receiver after ten seconds.
const SOURCE_RETRY_COUNT: u32 = 86_400;

/// What a topology needs of a kind of server.
pub trait Server: Sized + Send + Sync + Debug + 'static {
    /// How one is started.
    type Options: Clone + Default + Send + 'static;
    /// MySQL 9.7 (else MariaDB 10.11).
    const MYSQL: bool;
    /// The replication status statement (for messages).
    const STATUS: &'static str;
    /// The status variable that says a replica's semisync is on, and the one that counts its
    /// ACKs if the server has one.
    const SEMISYNC_ON: &'static str;
    const SEMISYNC_ACKS: Option<&'static str>;
    /// The status columns that say the receiver and the applier run.
    const RUNNING: [&'static str; 2];

    /// `options` for the server with `server_id`, a replica's with what a replica needs.
    fn with_id(options: Self::Options, server_id: u32, replica: bool) -> Self::Options;
    /// The options of a server as a strong-sync deployment runs it: a primary syncs its binlog
    /// and its redo log at every commit, a replica its relay log (so that what it ACKed is on
    /// its disk).
    fn durable(replica: bool) -> Self::Options;
    /// Starts one.
    fn start(options: Self::Options) -> Self;
    /// Runs SQL as root and returns its output.
    fn sql(&self, sql: &str) -> String;
    /// Its TCP port on loopback.
    fn port(&self) -> u16;
    /// Its replication status, column by column (empty if it does not replicate).
    fn replication_status(&self) -> HashMap<String, String>;
    /// A global status variable's value.
    fn status_var(&self, name: &str) -> String;
    /// The GTIDs a primary has written, which its replicas are to reach.
    fn written(&self) -> String;
    /// The GTIDs a replica has applied.
    fn applied(&self) -> String;
    /// The statements that make a replica replicate from the primary on `port`, and start it.
    fn replicate_from(port: u16) -> String;
    /// The statements that point a replica at `host:port`, keeping the rest, and start it.
    fn point_at(host: &str, port: u16) -> String;
    /// The query that waits up to `secs` for a replica to apply `gtids`, answering `0` if it did.
    fn wait_applied(gtids: &str, secs: u32) -> String;
    /// The statement that turns a replica's semisync on or off (read when its receiver next
    /// connects).
    fn semisync_replica(on: bool) -> String;
    /// The statements that stop and start a replica's receiver.
    const STOP_IO: &'static str;
    const START_IO: &'static str;
    /// The statements that start a replica again after a kill, with semisync.
    const RESUME: &'static str;
    /// Its `server_id`.
    fn server_id(&self) -> u32;
    /// Its Unix socket, as this machine names it.
    fn socket_path(&self) -> std::path::PathBuf;
    /// The URL of `user`'s connections to it, in its `sbtest` schema.
    fn url(&self, user: &str, password: &str) -> String;
    /// SIGKILLs it, as a crash would.
    fn kill(&mut self);
    /// Makes `user`'s next logins take the fast path (MySQL's `caching_sha2_password` caches
    /// the account at a first full login, which the raw test client cannot make); nothing to
    /// do on MariaDB.
    fn cache_password(&self, _user: &str, _password: &str) {}
    /// Starts it again after a kill, with its files.
    fn restart(&mut self);
    /// What reads its received GTIDs from a task.
    fn witness(&self) -> crate::cluster::Witness;
    /// The GTID of the newest transaction a primary wrote.
    fn newest_gtid(&self) -> String;
    /// Whether what a witness of its kind read holds `gtid`.
    fn holds(received: &str, gtid: &str) -> bool;
    /// The in-process proxy's test configuration in front of it as the primary.
    fn proxy_config(&self) -> Config;
}

/// A primary (server_id 1) and replicas (server_id 2, 3, ...), all with binlogs and GTIDs.
#[derive(Debug)]
pub struct Servers<S: Server> {
    pub primary: S,
    pub replicas: Vec<S>,
}

/// MariaDB 10.11 servers.
pub type Topology = Servers<MariaDb>;

/// MySQL 9.7 servers; their replicas have the semisync replica plugin loaded, off until
/// [`set_semi_sync_replica`](Servers::set_semi_sync_replica).
pub type MySqlTopology = Servers<MySql>;

// === impl Servers ===

impl<S: Server> Servers<S> {
    /// A primary and `replicas` replicas with default options, replicating and running.
    pub fn start(replicas: usize) -> Self {
        Self::start_with(S::Options::default(), S::Options::default(), replicas)
    }

    /// A primary and `replicas` replicas with the durable settings of [`Server::durable`].
    pub fn start_durable(replicas: usize) -> Self {
        Self::start_with(S::durable(false), S::durable(true), replicas)
    }

    /// Like [`Servers::start`], with the given options; their `server_id`s are overridden.
    pub fn start_with(primary: S::Options, replica: S::Options, replicas: usize) -> Self {
        let mut options = vec![S::with_id(primary, 1, false)];
        options.extend(
            (0..replicas).map(|i| S::with_id(replica.clone(), server_id_of_replica(i), true)),
        );
        let mut servers = start_all::<S>(options).into_iter();
        let topology = Servers {
            primary: servers.next().expect("the primary was started"),
            replicas: servers.collect(),
        };
        for replica in &topology.replicas {
            replica.sql(&S::replicate_from(topology.primary.port()));
        }
        for idx in 0..topology.replicas.len() {
            topology.wait_replica_running(idx);
        }
        topology
    }

    /// A primary and two replicas that replicate a table of three rows, checked: set-up wrote
    /// nothing to the primary's binlog, each replica has the rows, and each logs what it applies
    /// as the primary did. What the GTIDs themselves say is the caller's to check.
    pub fn start_with_three_rows() -> Self {
        let (topology, took) = mariadb::timed(|| Self::start(2));
        eprintln!("starting a primary and two replicas took {took:?}");
        assert_eq!(
            topology.primary.written(),
            "",
            "set-up must not write to the primary's binlog"
        );
        topology.primary.sql(
            "CREATE TABLE sbtest.t (id INT PRIMARY KEY, v VARCHAR(20)); \
             INSERT INTO sbtest.t VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        );
        topology.wait_replicas_caught_up();
        let written = topology.primary.written();
        for (idx, replica) in topology.replicas.iter().enumerate() {
            assert_eq!(
                replica.sql("SELECT id, v FROM sbtest.t ORDER BY id"),
                "1\tone\n2\ttwo\n3\tthree",
                "rows on replica {idx}"
            );
            assert_eq!(
                replica.written(),
                written,
                "replica {idx} logs what it applies (log_replica_updates)"
            );
        }
        topology
    }

    /// Repoints replica `idx` at `host:port` (the proxy, say), keeping GTID mode and
    /// credentials. Does not wait for the connection: the new source may not be up yet.
    pub fn point_replica_at(&self, idx: usize, host: &str, port: u16) {
        self.replicas[idx].sql(&S::point_at(host, port));
    }

    /// Waits until replica `idx` has both its receiver and applier running.
    ///
    /// # Panics
    /// With its replication status, after a minute.
    pub fn wait_replica_running(&self, idx: usize) {
        let deadline = Deadline::after(REPLICA_START_TIMEOUT);
        loop {
            let status = self.replica_status(idx);
            let running = |column: &str| status.get(column).map(String::as_str) == Some("Yes");
            if S::RUNNING.iter().all(|column| running(column)) {
                return;
            }
            assert!(
                !deadline.expired(),
                "replica {idx} did not start replicating within {} s; {}: {}",
                REPLICA_START_TIMEOUT.as_secs(),
                S::STATUS,
                format_status(&status)
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until every replica has applied everything the primary had at the time of the
    /// call.
    ///
    /// # Panics
    /// With the lagging replica's replication status, after a minute.
    pub fn wait_replicas_caught_up(&self) {
        let gtids = self.primary.written();
        for (idx, replica) in self.replicas.iter().enumerate() {
            let timed_out = replica.sql(&S::wait_applied(&gtids, CATCH_UP_TIMEOUT_SECS));
            assert_eq!(
                timed_out,
                "0",
                "replica {idx} did not reach the primary's '{gtids}' within \
                 {CATCH_UP_TIMEOUT_SECS} s (it has applied '{}'); {}: {}",
                replica.applied(),
                S::STATUS,
                format_status(&self.replica_status(idx))
            );
        }
    }

    /// The replication status of replica `idx`, column by column.
    pub fn replica_status(&self, idx: usize) -> HashMap<String, String> {
        self.replicas[idx].replication_status()
    }
}

impl Servers<MySql> {
    /// Turns semisync acknowledgements on or off on replica `idx` (restarting its IO thread,
    /// which reads the setting when it connects).
    pub fn set_semi_sync_replica(&self, idx: usize, enabled: bool) {
        self.replicas[idx].set_semi_sync_replica(enabled);
    }
}

// === impl Server for MariaDb ===

impl Server for MariaDb {
    type Options = MariaDbOptions;
    const MYSQL: bool = false;
    const STATUS: &'static str = "SHOW SLAVE STATUS";
    const SEMISYNC_ON: &'static str = "Rpl_semi_sync_slave_status";
    const SEMISYNC_ACKS: Option<&'static str> = Some("Rpl_semi_sync_slave_send_ack");
    const RUNNING: [&'static str; 2] = ["Slave_IO_Running", "Slave_SQL_Running"];

    fn with_id(options: MariaDbOptions, server_id: u32, _replica: bool) -> MariaDbOptions {
        MariaDbOptions {
            server_id,
            ..options
        }
    }

    fn durable(replica: bool) -> MariaDbOptions {
        let extra_cnf = if replica {
            vec!["sync_relay_log=1".into()]
        } else {
            vec![
                "sync_binlog=1".into(),
                "innodb_flush_log_at_trx_commit=1".into(),
            ]
        };
        MariaDbOptions {
            extra_cnf,
            ..MariaDbOptions::default()
        }
    }

    fn start(options: MariaDbOptions) -> Self {
        MariaDb::start(options)
    }

    fn sql(&self, sql: &str) -> String {
        MariaDb::sql(self, sql)
    }

    fn port(&self) -> u16 {
        MariaDb::port(self)
    }

    fn replication_status(&self) -> HashMap<String, String> {
        self.slave_status()
    }

    fn status_var(&self, name: &str) -> String {
        MariaDb::status_var(self, name)
    }

    fn written(&self) -> String {
        self.gtid_binlog_pos()
    }

    fn applied(&self) -> String {
        self.gtid_slave_pos()
    }

    fn replicate_from(port: u16) -> String {
        format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port}, \
             MASTER_USER = {}, MASTER_PASSWORD = {}, \
             MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; \
             START SLAVE",
            mariadb::sql_quote(mariadb::REPL_USER),
            mariadb::sql_quote(mariadb::REPL_PASSWORD)
        )
    }

    fn point_at(host: &str, port: u16) -> String {
        format!(
            "STOP SLAVE; \
             CHANGE MASTER TO MASTER_HOST = {}, MASTER_PORT = {port}; \
             START SLAVE",
            mariadb::sql_quote(host)
        )
    }

    fn wait_applied(gtids: &str, secs: u32) -> String {
        format!(
            "SELECT MASTER_GTID_WAIT({}, {secs})",
            mariadb::sql_quote(gtids)
        )
    }

    fn semisync_replica(on: bool) -> String {
        let on = if on { "ON" } else { "OFF" };
        format!("SET GLOBAL rpl_semi_sync_slave_enabled = {on}")
    }

    const STOP_IO: &'static str = "STOP SLAVE IO_THREAD";
    const START_IO: &'static str = "START SLAVE IO_THREAD";
    const RESUME: &'static str = "SET GLOBAL rpl_semi_sync_slave_enabled = ON; START SLAVE";

    fn server_id(&self) -> u32 {
        MariaDb::server_id(self)
    }

    fn socket_path(&self) -> std::path::PathBuf {
        self.socket().to_owned()
    }

    fn url(&self, user: &str, password: &str) -> String {
        MariaDb::url(self, user, password)
    }

    fn kill(&mut self) {
        MariaDb::kill(self);
    }

    fn restart(&mut self) {
        MariaDb::restart(self);
    }

    fn witness(&self) -> crate::cluster::Witness {
        crate::cluster::Witness::of(self)
    }

    fn newest_gtid(&self) -> String {
        crate::strong::newest_gtid(self, 0)
    }

    fn holds(received: &str, gtid: &str) -> bool {
        crate::strong::position_holds(received, gtid)
    }

    fn proxy_config(&self) -> Config {
        crate::proxy::TestProxy::config(self)
    }
}

// === impl Server for MySql ===

impl Server for MySql {
    type Options = MySqlOptions;
    const MYSQL: bool = true;
    const STATUS: &'static str = "SHOW REPLICA STATUS";
    const SEMISYNC_ON: &'static str = "Rpl_semi_sync_replica_status";
    const SEMISYNC_ACKS: Option<&'static str> = None;
    const RUNNING: [&'static str; 2] = ["Replica_IO_Running", "Replica_SQL_Running"];

    /// A replica always loads the semisync replica plugin.
    fn with_id(options: MySqlOptions, server_id: u32, replica: bool) -> MySqlOptions {
        MySqlOptions {
            server_id,
            semisync_replica: replica || options.semisync_replica,
            ..options
        }
    }

    fn durable(replica: bool) -> MySqlOptions {
        let extra_args = if replica {
            vec!["--sync-relay-log=1".into()]
        } else {
            vec![
                "--sync-binlog=1".into(),
                "--innodb-flush-log-at-trx-commit=1".into(),
            ]
        };
        MySqlOptions {
            extra_args,
            ..MySqlOptions::default()
        }
    }

    fn start(options: MySqlOptions) -> Self {
        MySql::start(options)
    }

    fn sql(&self, sql: &str) -> String {
        MySql::sql(self, sql)
    }

    fn port(&self) -> u16 {
        MySql::port(self)
    }

    fn replication_status(&self) -> HashMap<String, String> {
        self.replica_status()
    }

    fn status_var(&self, name: &str) -> String {
        MySql::status_var(self, name)
    }

    fn written(&self) -> String {
        self.gtid_executed()
    }

    fn applied(&self) -> String {
        self.gtid_executed()
    }

    /// Over TLS (`SOURCE_SSL=1`), as it stays once pointed at strongsync;
    /// `GET_SOURCE_PUBLIC_KEY=1` would let `caching_sha2_password` send the password
    /// RSA-encrypted on a plain connection.
    fn replicate_from(port: u16) -> String {
        format!(
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {port}, \
             SOURCE_USER = {}, SOURCE_PASSWORD = {}, SOURCE_AUTO_POSITION = 1, \
             SOURCE_SSL = 1, GET_SOURCE_PUBLIC_KEY = 1, \
             SOURCE_CONNECT_RETRY = 1, SOURCE_RETRY_COUNT = {SOURCE_RETRY_COUNT}; \
             START REPLICA",
            mysql::sql_quote(mysql::REPL_USER),
            mysql::sql_quote(mysql::REPL_PASSWORD)
        )
    }

    fn point_at(host: &str, port: u16) -> String {
        format!(
            "STOP REPLICA; \
             CHANGE REPLICATION SOURCE TO SOURCE_HOST = {}, SOURCE_PORT = {port}; \
             START REPLICA",
            mysql::sql_quote(host)
        )
    }

    fn wait_applied(gtids: &str, secs: u32) -> String {
        format!(
            "SELECT WAIT_FOR_EXECUTED_GTID_SET({}, {secs})",
            mysql::sql_quote(gtids)
        )
    }

    /// The receiver reads it when it connects; [`Servers::point_replica_at`] restarts it.
    fn semisync_replica(on: bool) -> String {
        let on = if on { "ON" } else { "OFF" };
        format!("SET GLOBAL rpl_semi_sync_replica_enabled = {on}")
    }

    const STOP_IO: &'static str = "STOP REPLICA IO_THREAD";
    const START_IO: &'static str = "START REPLICA IO_THREAD";
    const RESUME: &'static str = "SET GLOBAL rpl_semi_sync_replica_enabled = ON; START REPLICA";

    fn server_id(&self) -> u32 {
        MySql::server_id(self)
    }

    fn socket_path(&self) -> std::path::PathBuf {
        self.socket()
    }

    fn url(&self, user: &str, password: &str) -> String {
        MySql::url(self, user, password)
    }

    fn kill(&mut self) {
        MySql::kill(self);
    }

    fn cache_password(&self, user: &str, password: &str) {
        MySql::cache_password(self, user, password);
    }

    fn restart(&mut self) {
        MySql::restart(self);
    }

    fn witness(&self) -> crate::cluster::Witness {
        crate::cluster::Witness::of_mysql(self)
    }

    fn newest_gtid(&self) -> String {
        MySql::newest_gtid(self)
    }

    fn holds(received: &str, gtid: &str) -> bool {
        crate::mysql_gtid::gtid_set_holds(received, gtid)
    }

    fn proxy_config(&self) -> Config {
        proxy_config(self)
    }
}

/// The in-process proxy's test configuration in front of a MySQL `primary`, as
/// [`TestProxy::config`](super::proxy::TestProxy::config) makes it for MariaDB: SQL and admin
/// ports on free loopback ports, and no waiting for replicas (passthrough).
pub fn proxy_config(primary: &MySql) -> Config {
    let mut config = Config::new(primary.addr());
    config.listen = "127.0.0.1:0".parse().expect("a socket address");
    config.admin_listen = "127.0.0.1:0".parse().expect("a socket address");
    config.durability.passthrough = true;
    config.sharing.enabled = super::proxy::sharing_everywhere();
    config
}

fn server_id_of_replica(idx: usize) -> u32 {
    u32::try_from(idx).expect("replica count fits in u32") + 2
}

/// Starts the servers in parallel threads. If any fails, the others are stopped (dropped)
/// before its panic is re-raised.
fn start_all<S: Server>(options: Vec<S::Options>) -> Vec<S> {
    let results: Vec<thread::Result<S>> = thread::scope(|scope| {
        let handles: Vec<_> = options
            .into_iter()
            .map(|opts| scope.spawn(move || S::start(opts)))
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut servers = Vec::with_capacity(results.len());
    for result in results {
        match result {
            Ok(server) => servers.push(server),
            Err(payload) => {
                drop(servers);
                panic::resume_unwind(payload);
            }
        }
    }
    servers
}

/// A replication status one column a line, sorted by name, for panic messages.
pub(crate) fn format_status(status: &HashMap<String, String>) -> String {
    if status.is_empty() {
        return "(empty: not configured as a replica)".into();
    }
    let mut columns: Vec<_> = status.iter().collect();
    columns.sort();
    columns
        .into_iter()
        .map(|(k, v)| format!("\n  {k}: {v}"))
        .collect()
}
