//! What the strong-sync tests need of a primary and its replicas, whatever the servers are: one
//! implementation for [`Servers`] of either kind, so that one cluster type
//! ([`Strong`](super::strong::Strong)) serves both suites.

use std::path::PathBuf;

use strongsync::Config;

use super::mariadb::{received_gtids_at, MariaDb};
use super::mysql::{received_transaction_set_at, MySql};
use super::topology::{Server, Servers};

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
    /// The primary's Unix socket.
    fn primary_socket(&self) -> PathBuf;
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
    /// SIGKILLs the primary, as a crash would.
    fn kill_primary(&mut self);
    /// Lets `user` log in to the primary with a client that only takes the fast path.
    fn cache_password(&self, user: &str, password: &str);
    /// Whether replica `i`'s semisync is on, by its own status.
    fn replica_semisync_on(&self, i: usize) -> bool;
    /// The ACKs replica `i` has sent, by its own count, where the server keeps one.
    fn replica_acks_sent(&self, i: usize) -> Option<u64>;
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

impl<S: Server> Cluster for Servers<S> {
    const MYSQL: bool = S::MYSQL;

    fn start(replicas: usize) -> Self {
        let servers = Servers::<S>::start(replicas);
        servers
            .primary
            .sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
        servers
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
        self.primary.proxy_config()
    }

    fn set_semisync(&self, i: usize, on: bool) {
        self.replicas[i].sql(&S::semisync_replica(on));
    }

    fn point_replica_at(&self, i: usize, host: &str, port: u16) {
        Servers::point_replica_at(self, i, host, port);
    }

    fn wait_replica_running(&self, i: usize) {
        Servers::wait_replica_running(self, i);
    }

    fn stop_io(&self, i: usize) {
        self.replicas[i].sql(S::STOP_IO);
    }

    fn start_io(&self, i: usize) {
        self.replicas[i].sql(S::START_IO);
    }

    fn restart_replica(&mut self, i: usize) {
        let replica = &mut self.replicas[i];
        replica.restart();
        replica.sql(S::RESUME);
        Servers::wait_replica_running(self, i);
    }

    fn primary_port(&self) -> u16 {
        self.primary.port()
    }

    fn primary_socket(&self) -> PathBuf {
        self.primary.socket_path()
    }

    fn witness(&self, i: usize) -> Witness {
        self.replicas[i].witness()
    }

    fn replica_server_id(&self, i: usize) -> u32 {
        self.replicas[i].server_id()
    }

    fn newest_gtid(&self) -> String {
        self.primary.newest_gtid()
    }

    fn holds(received: &str, gtid: &str) -> bool {
        S::holds(received, gtid)
    }

    fn primary_url(&self, user: &str, password: &str) -> String {
        self.primary.url(user, password)
    }

    fn wait_replicas_caught_up(&self) {
        Servers::wait_replicas_caught_up(self);
    }

    fn kill_primary(&mut self) {
        self.primary.kill();
    }

    fn cache_password(&self, user: &str, password: &str) {
        self.primary.cache_password(user, password);
    }

    fn replica_semisync_on(&self, i: usize) -> bool {
        self.replicas[i].status_var(S::SEMISYNC_ON) == "ON"
    }

    fn replica_acks_sent(&self, i: usize) -> Option<u64> {
        S::SEMISYNC_ACKS.map(|name| self.replicas[i].status_var(name).parse().unwrap())
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
                super::$test::<$crate::topology::MySqlTopology>().await;
            }
        }
    )*};
}
