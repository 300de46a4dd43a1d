//! A MySQL primary plus N replicas that replicate directly from it with GTID auto-positioning,
//! and the in-process proxy's configuration in front of such a primary.

use std::collections::HashMap;
use std::panic;
use std::thread;
use std::time::Duration;

use strongsync::Config;

use super::mariadb::Deadline;
use super::mysql::{sql_quote, MySql, MySqlOptions, REPL_PASSWORD, REPL_USER};
use super::topology::format_status;

/// Seconds `WAIT_FOR_EXECUTED_GTID_SET` waits for a replica to reach the primary's set.
const CATCH_UP_TIMEOUT_SECS: u32 = 60;
const REPLICA_START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Reconnection attempts (one a second) before a replica's receiver gives up: a day, so that a
/// source that goes away for a while (a proxy restarted by a test) is reconnected to; MySQL's
/// default of 10 would stop the receiver after ten seconds.
const SOURCE_RETRY_COUNT: u32 = 86_400;

/// A primary (server_id 1) and replicas (server_id 2, 3, ...), all with binlogs and GTIDs.
/// Replicas have the semisync replica plugin loaded, off until
/// [`set_semi_sync_replica`](Self::set_semi_sync_replica).
#[derive(Debug)]
pub struct MySqlTopology {
    pub primary: MySql,
    pub replicas: Vec<MySql>,
}

// === impl MySqlTopology ===

impl MySqlTopology {
    /// A primary and `replicas` replicas with default options, replicating and running.
    pub fn start(replicas: usize) -> MySqlTopology {
        MySqlTopology::start_with(MySqlOptions::default(), MySqlOptions::default(), replicas)
    }

    /// Like [`MySqlTopology::start`], with the given options; their `server_id`s are
    /// overridden and replicas always load the semisync replica plugin.
    pub fn start_with(
        primary: MySqlOptions,
        replica: MySqlOptions,
        replicas: usize,
    ) -> MySqlTopology {
        let mut options = vec![MySqlOptions {
            server_id: 1,
            ..primary
        }];
        options.extend((0..replicas).map(|i| MySqlOptions {
            server_id: server_id_of_replica(i),
            semisync_replica: true,
            ..replica.clone()
        }));
        let mut servers = start_all(options).into_iter();
        let topology = MySqlTopology {
            primary: servers.next().expect("the primary was started"),
            replicas: servers.collect(),
        };
        for idx in 0..topology.replicas.len() {
            topology.replicate_from_primary(idx);
        }
        for idx in 0..topology.replicas.len() {
            topology.wait_replica_running(idx);
        }
        topology
    }

    /// Repoints replica `idx` at `host:port` (the proxy, say), keeping auto-positioning and
    /// credentials. Does not wait for the connection: the new source may not be up yet.
    pub fn point_replica_at(&self, idx: usize, host: &str, port: u16) {
        self.replicas[idx].sql(&format!(
            "STOP REPLICA; \
             CHANGE REPLICATION SOURCE TO SOURCE_HOST = {}, SOURCE_PORT = {port}; \
             START REPLICA",
            sql_quote(host)
        ));
    }

    /// Turns semisync acknowledgements on or off on replica `idx` (restarting its IO thread,
    /// which reads the setting when it connects).
    pub fn set_semi_sync_replica(&self, idx: usize, enabled: bool) {
        self.replicas[idx].set_semi_sync_replica(enabled);
    }

    /// Waits until replica `idx` has both its IO and SQL threads running.
    ///
    /// # Panics
    /// With its `SHOW REPLICA STATUS`, after a minute.
    pub fn wait_replica_running(&self, idx: usize) {
        let deadline = Deadline::after(REPLICA_START_TIMEOUT);
        loop {
            let status = self.replica_status(idx);
            let running = |column: &str| status.get(column).map(String::as_str) == Some("Yes");
            if running("Replica_IO_Running") && running("Replica_SQL_Running") {
                return;
            }
            assert!(
                !deadline.expired(),
                "replica {idx} did not start replicating within {} s; SHOW REPLICA STATUS: {}",
                REPLICA_START_TIMEOUT.as_secs(),
                format_status(&status)
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until every replica has applied everything the primary had executed at the time
    /// of the call.
    ///
    /// # Panics
    /// With the lagging replica's `SHOW REPLICA STATUS`, after a minute.
    pub fn wait_replicas_caught_up(&self) {
        let executed = self.primary.gtid_executed();
        for (idx, replica) in self.replicas.iter().enumerate() {
            let timed_out = replica.sql(&format!(
                "SELECT WAIT_FOR_EXECUTED_GTID_SET({}, {CATCH_UP_TIMEOUT_SECS})",
                sql_quote(&executed)
            ));
            assert_eq!(
                timed_out,
                "0",
                "replica {idx} did not reach the primary's gtid_executed '{executed}' within \
                 {CATCH_UP_TIMEOUT_SECS} s (its own is '{}'); SHOW REPLICA STATUS: {}",
                replica.gtid_executed(),
                format_status(&self.replica_status(idx))
            );
        }
    }

    /// The GTID (`uuid:n`) of the newest transaction the primary wrote.
    ///
    /// # Panics
    /// If it wrote none.
    pub fn newest_gtid(&self) -> String {
        let uuid = self.primary.sql("SELECT @@server_uuid");
        let executed = self.primary.sql("SELECT @@global.gtid_executed");
        let n = crate::mysql_gtid::newest_of(&executed, &uuid)
            .expect("the primary wrote a transaction");
        format!("{uuid}:{n}")
    }

    /// `SHOW REPLICA STATUS` of replica `idx` as column -> value.
    pub fn replica_status(&self, idx: usize) -> HashMap<String, String> {
        self.replicas[idx].replica_status()
    }

    /// Points replica `idx` at the primary and starts it, over TLS (`SOURCE_SSL=1`), as it
    /// stays once pointed at strongsync; `GET_SOURCE_PUBLIC_KEY=1` would let
    /// `caching_sha2_password` send the password RSA-encrypted on a plain connection.
    fn replicate_from_primary(&self, idx: usize) {
        self.replicas[idx].sql(&format!(
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {}, \
             SOURCE_USER = {}, SOURCE_PASSWORD = {}, SOURCE_AUTO_POSITION = 1, \
             SOURCE_SSL = 1, GET_SOURCE_PUBLIC_KEY = 1, \
             SOURCE_CONNECT_RETRY = 1, SOURCE_RETRY_COUNT = {SOURCE_RETRY_COUNT}; \
             START REPLICA",
            self.primary.port(),
            sql_quote(REPL_USER),
            sql_quote(REPL_PASSWORD)
        ));
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

/// Starts the servers in parallel threads. If any fails, the others are dropped (killed) before
/// its panic is re-raised.
fn start_all(options: Vec<MySqlOptions>) -> Vec<MySql> {
    let results: Vec<thread::Result<MySql>> = thread::scope(|scope| {
        let handles: Vec<_> = options
            .into_iter()
            .map(|opts| scope.spawn(move || MySql::start(opts)))
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
