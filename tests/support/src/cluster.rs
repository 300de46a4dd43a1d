//! What the strong-sync tests need of a primary and its replicas, whatever the servers are:
//! [`Topology`] (MariaDB 10.11) and [`MySqlTopology`] (MySQL 9.7) both give it, so one cluster
//! type ([`Strong`](super::strong::Strong)) serves both suites.

use std::path::PathBuf;

use strongsync::Config;

use super::mariadb::{received_gtids_at, MariaDb};
use super::mysql::{received_transaction_set_at, MySql};
use super::mysql_gtid::gtid_set_holds;
use super::mysql_topology::{proxy_config, MySqlTopology};
use super::proxy::TestProxy;
use super::strong::{newest_gtid, position_holds};
use super::topology::Topology;

/// A primary and replicas, started and controlled by a test.
pub trait Cluster: Sized + Send + Sync + 'static {
    /// MySQL 9.7 (else MariaDB 10.11): for the few steps a test takes differently on each.
    const MYSQL: bool;
    /// `replicas` replicas replicating from the primary, and a table
    /// `sbtest.t (id AUTO_INCREMENT, v INT)` on it.
    fn start(replicas: usize) -> Self;
    /// Runs SQL on the primary as root.
    fn primary_sql(&self, sql: &str) -> String;
    /// Runs SQL on replica `i` as root.
    fn replica_sql(&self, i: usize, sql: &str) -> String;
    /// How many replicas there are.
    fn replica_count(&self) -> usize;
    /// The proxy's test configuration in front of the primary.
    fn proxy_config(&self) -> Config;
    /// Turns replica `i`'s semisync on or off (taking effect when its receiver next connects).
    fn set_semisync(&self, i: usize, on: bool);
    /// Points replica `i` at `host:port` and starts it.
    fn point_replica_at(&self, i: usize, host: &str, port: u16);
    /// Waits until replica `i` replicates.
    fn wait_replica_running(&self, i: usize);
    /// Stops replica `i`'s receiver.
    fn stop_io(&self, i: usize);
    /// Starts replica `i`'s receiver.
    fn start_io(&self, i: usize);
    /// Starts replica `i` again after a kill, replicating with semisync through whatever it
    /// pointed at.
    fn restart_replica(&mut self, i: usize);
    /// The primary's port.
    fn primary_port(&self) -> u16;
    /// What reads replica `i`'s received GTIDs from a task.
    fn witness(&self, i: usize) -> Witness;
    /// The server id replica `i` replicates with.
    fn replica_server_id(&self, i: usize) -> u32;
    /// The GTID of the primary's newest transaction.
    fn newest_gtid(&self) -> String;
    /// Whether what a [`Witness`] read holds `gtid`.
    fn holds(received: &str, gtid: &str) -> bool;
    /// The URL of `user`'s connections straight to the primary, in its `sbtest` schema.
    fn primary_url(&self, user: &str, password: &str) -> String;
    /// Waits until every replica has applied what the primary has.
    fn wait_replicas_caught_up(&self);
}

/// Reads what a replica has received — `Gtid_IO_Pos` on MariaDB, `RECEIVED_TRANSACTION_SET` on
/// MySQL — straight from it. `Send`, so it can be read from a task the moment a client's
/// answer arrives.
#[derive(Debug, Clone)]
pub struct Witness {
    socket: PathBuf,
    mysql: bool,
}

impl Witness {
    pub fn of(replica: &MariaDb) -> Witness {
        Witness {
            socket: replica.socket().to_owned(),
            mysql: false,
        }
    }

    pub fn of_mysql(replica: &MySql) -> Witness {
        Witness {
            socket: replica.socket(),
            mysql: true,
        }
    }

    /// Every GTID the replica has received from its source (or why it could not be read,
    /// which holds no GTID).
    pub fn received(&self) -> String {
        let read = if self.mysql {
            received_transaction_set_at(&self.socket)
        } else {
            received_gtids_at(&self.socket)
        };
        read.unwrap_or_else(|e| format!("(unreadable: {e})"))
    }
}

impl Cluster for Topology {
    const MYSQL: bool = false;

    fn start(replicas: usize) -> Self {
        let topology = Topology::start(replicas);
        topology
            .primary
            .sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
        topology
    }

    fn primary_sql(&self, sql: &str) -> String {
        self.primary.sql(sql)
    }

    fn replica_sql(&self, i: usize, sql: &str) -> String {
        self.replicas[i].sql(sql)
    }

    fn replica_count(&self) -> usize {
        self.replicas.len()
    }

    fn proxy_config(&self) -> Config {
        TestProxy::config(&self.primary)
    }

    fn set_semisync(&self, i: usize, on: bool) {
        let on = if on { "ON" } else { "OFF" };
        self.replicas[i].sql(&format!("SET GLOBAL rpl_semi_sync_slave_enabled = {on}"));
    }

    fn point_replica_at(&self, i: usize, host: &str, port: u16) {
        Topology::point_replica_at(self, i, host, port);
    }

    fn wait_replica_running(&self, i: usize) {
        Topology::wait_replica_running(self, i);
    }

    fn stop_io(&self, i: usize) {
        self.replicas[i].sql("STOP SLAVE IO_THREAD");
    }

    fn start_io(&self, i: usize) {
        self.replicas[i].sql("START SLAVE IO_THREAD");
    }

    fn restart_replica(&mut self, i: usize) {
        let replica = &mut self.replicas[i];
        replica.restart();
        replica.sql("SET GLOBAL rpl_semi_sync_slave_enabled = ON; START SLAVE");
        Topology::wait_replica_running(self, i);
    }

    fn primary_port(&self) -> u16 {
        self.primary.port()
    }

    fn witness(&self, i: usize) -> Witness {
        Witness::of(&self.replicas[i])
    }

    fn replica_server_id(&self, i: usize) -> u32 {
        self.replicas[i].server_id()
    }

    fn newest_gtid(&self) -> String {
        newest_gtid(&self.primary, 0)
    }

    fn holds(received: &str, gtid: &str) -> bool {
        position_holds(received, gtid)
    }

    fn primary_url(&self, user: &str, password: &str) -> String {
        self.primary.url(user, password)
    }

    fn wait_replicas_caught_up(&self) {
        Topology::wait_replicas_caught_up(self);
    }
}

impl Cluster for MySqlTopology {
    const MYSQL: bool = true;

    fn start(replicas: usize) -> Self {
        let topology = MySqlTopology::start(replicas);
        topology
            .primary
            .sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
        topology
    }

    fn primary_sql(&self, sql: &str) -> String {
        self.primary.sql(sql)
    }

    fn replica_sql(&self, i: usize, sql: &str) -> String {
        self.replicas[i].sql(sql)
    }

    fn replica_count(&self) -> usize {
        self.replicas.len()
    }

    fn proxy_config(&self) -> Config {
        proxy_config(&self.primary)
    }

    /// The receiver reads the setting when it connects, and [`point_replica_at`]
    /// (Self::point_replica_at) restarts it.
    fn set_semisync(&self, i: usize, on: bool) {
        let on = if on { "ON" } else { "OFF" };
        self.replicas[i].sql(&format!("SET GLOBAL rpl_semi_sync_replica_enabled = {on}"));
    }

    fn point_replica_at(&self, i: usize, host: &str, port: u16) {
        MySqlTopology::point_replica_at(self, i, host, port);
    }

    fn wait_replica_running(&self, i: usize) {
        MySqlTopology::wait_replica_running(self, i);
    }

    fn stop_io(&self, i: usize) {
        self.replicas[i].sql("STOP REPLICA IO_THREAD");
    }

    fn start_io(&self, i: usize) {
        self.replicas[i].sql("START REPLICA IO_THREAD");
    }

    fn restart_replica(&mut self, i: usize) {
        let replica = &mut self.replicas[i];
        replica.restart();
        replica.sql("SET GLOBAL rpl_semi_sync_replica_enabled = ON; START REPLICA");
        MySqlTopology::wait_replica_running(self, i);
    }

    fn primary_port(&self) -> u16 {
        self.primary.port()
    }

    fn witness(&self, i: usize) -> Witness {
        Witness::of_mysql(&self.replicas[i])
    }

    fn replica_server_id(&self, i: usize) -> u32 {
        self.replicas[i].server_id()
    }

    fn newest_gtid(&self) -> String {
        self.primary.newest_gtid()
    }

    fn holds(received: &str, gtid: &str) -> bool {
        gtid_set_holds(received, gtid)
    }

    fn primary_url(&self, user: &str, password: &str) -> String {
        self.primary.url(user, password)
    }

    fn wait_replicas_caught_up(&self) {
        MySqlTopology::wait_replicas_caught_up(self);
    }
}

/// Declares each test written once over a [`Cluster`] twice, as a module of the test's name
/// with a `mariadb` and a `mysql` test that run it on MariaDB 10.11 and MySQL 9.7:
/// `each_server!(name);` for `async fn name<C: Cluster>()`.
#[macro_export]
macro_rules! each_server {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[tokio::test(flavor = "multi_thread")]
            async fn mariadb() {
                super::$test::<$crate::topology::Topology>().await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn mysql() {
                super::$test::<$crate::mysql_topology::MySqlTopology>().await;
            }
        }
    )*};
}
