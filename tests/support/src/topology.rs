//! A primary plus N replicas that replicate directly from it with GTID.

use std::collections::HashMap;
use std::panic;
use std::thread;
use std::time::Duration;

use super::mariadb::{sql_quote, Deadline, MariaDb, MariaDbOptions, REPL_PASSWORD, REPL_USER};

/// Seconds `MASTER_GTID_WAIT` waits for a replica to reach the primary's position.
const CATCH_UP_TIMEOUT_SECS: u32 = 60;
const REPLICA_START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A primary (server_id 1) and replicas (server_id 2, 3, ...), all with binlogs.
#[derive(Debug)]
pub struct Topology {
    pub primary: MariaDb,
    pub replicas: Vec<MariaDb>,
}

impl Topology {
    /// A primary and `replicas` replicas with default options, replicating and running.
    pub fn start(replicas: usize) -> Topology {
        Topology::start_with(
            MariaDbOptions::default(),
            MariaDbOptions::default(),
            replicas,
        )
    }

    /// Like [`Topology::start`], with the given options; their `server_id`s are overridden.
    pub fn start_with(
        primary: MariaDbOptions,
        replica: MariaDbOptions,
        replicas: usize,
    ) -> Topology {
        let mut options = vec![MariaDbOptions {
            server_id: 1,
            ..primary
        }];
        options.extend((0..replicas).map(|i| MariaDbOptions {
            server_id: server_id_of_replica(i),
            ..replica.clone()
        }));
        let mut servers = start_all(options).into_iter();
        let topology = Topology {
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

    /// Repoints replica `idx` at `host:port` (the proxy, say), keeping GTID mode and
    /// credentials. Does not wait for the connection: the new source may not be up yet.
    pub fn point_replica_at(&self, idx: usize, host: &str, port: u16) {
        self.replicas[idx].sql(&format!(
            "STOP SLAVE; \
             CHANGE MASTER TO MASTER_HOST = {}, MASTER_PORT = {port}; \
             START SLAVE",
            sql_quote(host)
        ));
    }

    /// Waits until replica `idx` has both its IO and SQL threads running; panics with its
    /// `SHOW SLAVE STATUS` after a minute.
    pub fn wait_replica_running(&self, idx: usize) {
        let deadline = Deadline::after(REPLICA_START_TIMEOUT);
        loop {
            let status = self.replica_status(idx);
            let running = |column: &str| status.get(column).map(String::as_str) == Some("Yes");
            if running("Slave_IO_Running") && running("Slave_SQL_Running") {
                return;
            }
            assert!(
                !deadline.expired(),
                "replica {idx} did not start replicating within {} s; SHOW SLAVE STATUS: {}",
                REPLICA_START_TIMEOUT.as_secs(),
                format_status(&status)
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until every replica has applied everything in the primary's binlog at the time of
    /// the call. Panics with the lagging replica's `SHOW SLAVE STATUS` after a minute.
    pub fn wait_replicas_caught_up(&self) {
        let pos = self.primary.gtid_binlog_pos();
        for (idx, replica) in self.replicas.iter().enumerate() {
            let result = replica.sql(&format!(
                "SELECT MASTER_GTID_WAIT({}, {CATCH_UP_TIMEOUT_SECS})",
                sql_quote(&pos)
            ));
            assert_eq!(
                result,
                "0",
                "replica {idx} did not reach the primary's gtid_binlog_pos '{pos}' within {} s \
                 (its gtid_slave_pos is '{}'); SHOW SLAVE STATUS: {}",
                CATCH_UP_TIMEOUT_SECS,
                replica.gtid_slave_pos(),
                format_status(&self.replica_status(idx))
            );
        }
    }

    /// `SHOW SLAVE STATUS` of replica `idx` as column -> value.
    pub fn replica_status(&self, idx: usize) -> HashMap<String, String> {
        self.replicas[idx].slave_status()
    }

    fn replicate_from_primary(&self, idx: usize) {
        self.replicas[idx].sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = {}, MASTER_PASSWORD = {}, \
             MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; \
             START SLAVE",
            self.primary.port(),
            sql_quote(REPL_USER),
            sql_quote(REPL_PASSWORD)
        ));
    }
}

fn server_id_of_replica(idx: usize) -> u32 {
    u32::try_from(idx).expect("replica count fits in u32") + 2
}

/// Starts the servers in parallel threads. If any fails, the others are stopped (dropped) before
/// its panic is re-raised.
fn start_all(options: Vec<MariaDbOptions>) -> Vec<MariaDb> {
    let results: Vec<thread::Result<MariaDb>> = thread::scope(|scope| {
        let handles: Vec<_> = options
            .into_iter()
            .map(|opts| scope.spawn(move || MariaDb::start(opts)))
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

/// `SHOW SLAVE STATUS` one column a line, sorted by name, for panic messages.
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
