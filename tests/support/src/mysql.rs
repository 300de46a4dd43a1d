//! One throwaway MySQL 9.7 server for tests, run from the sid root under chroot, with its own
//! data directory, port, socket and tmpdir.
//!
//! Every server starts from a data directory template that `mysqld --initialize-insecure`
//! builds once per MySQL version under `target/tmp` (see [`mysql_root`](super::mysql_root));
//! starting an instance copies it into a fresh temporary directory under the root's `/tmp`, so
//! instances are cheap, never share state, and the chroot sees their files.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::mariadb::{check_socket_path, copy_dir};
use super::mysql_launch::{
    diagnostics, launch, launch_on_free_port, DATADIR, ERROR_LOG, SOCKET, TMPDIR,
};
use super::mysql_root::{self, run_client, run_client_as};
use super::server_process::ServerProcess;

pub use super::mariadb::{
    sql_quote, timed, wait_for, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER, ROOT_USER,
    TEST_DB,
};

/// Users and the test database, created on every instance: `app` and `repl` with
/// `caching_sha2_password` (MySQL 9 has no other password plugin). `sql_log_bin=0` keeps them
/// out of the binlog and out of `gtid_executed`: each server creates its own.
const SETUP_SQL: &str = "
SET SESSION sql_log_bin = 0;
CREATE USER 'app'@'%' IDENTIFIED WITH caching_sha2_password BY 'app-secret';
GRANT ALL PRIVILEGES ON *.* TO 'app'@'%' WITH GRANT OPTION;
CREATE USER 'repl'@'%' IDENTIFIED WITH caching_sha2_password BY 'repl-secret';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'repl'@'%';
CREATE DATABASE sbtest;
";

/// How to configure one server.
#[derive(Debug, Clone)]
pub struct MySqlOptions {
    pub server_id: u32,
    /// Loads `rpl_semi_sync_source` (`semisync_source.so`); it stays disabled until
    /// `rpl_semi_sync_source_enabled` is set.
    pub semisync_source: bool,
    /// Loads `rpl_semi_sync_replica` (`semisync_replica.so`); see
    /// [`MySql::set_semi_sync_replica`].
    pub semisync_replica: bool,
    /// Server options after the defaults, so they win: `--plugin-load-add=thread_pool.so`
    /// (Oracle's thread pool loads only at start), `--binlog-transaction-compression=ON`, ….
    pub extra_args: Vec<String>,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        MySqlOptions {
            server_id: 1,
            semisync_source: false,
            semisync_replica: false,
            extra_args: Vec::new(),
        }
    }
}

/// A running (or stopped) MySQL server owned by the test. Dropping it kills the server and
/// deletes its files.
#[derive(Debug)]
pub struct MySql {
    process: ServerProcess,
    port: u16,
    server_id: u32,
    /// The whole command line after `mysqld`, kept for restarts.
    args: Vec<String>,
    /// The instance's directory as the host sees it (under the root's `/tmp`).
    dir: PathBuf,
    // Declared last so the directory is removed only after the server is gone; held only for
    // that.
    _dir: TempDir,
}

// === impl MySql ===

impl MySql {
    crate::server_process::handle_methods!();

    /// Runs the client as root over its socket in batch mode with `extra_args`.
    fn run_root(&self, extra_args: &[&str], sql: &str) -> Result<String, String> {
        run_client(&self.socket(), extra_args, sql)
    }

    /// Starts a new server from the cached template and creates the test users and database.
    ///
    /// # Panics
    /// If the root cannot be built, or the server does not come up within a minute (with the
    /// tail of its error log).
    pub fn start(opts: MySqlOptions) -> MySql {
        let template = mysql_root::template_datadir();
        let tempdir = tempfile::Builder::new()
            .prefix("strongsync-mysql-")
            .tempdir_in(mysql_root::instances_dir())
            .expect("create a temporary directory for mysqld in the MySQL root");
        let dir = tempdir.path().to_path_buf();
        check_socket_path(&dir.join(SOCKET));
        copy_dir(template, &dir.join(DATADIR)).unwrap_or_else(|e| {
            panic!(
                "copy template {} to {}: {e}",
                template.display(),
                dir.display()
            )
        });
        fs::create_dir(dir.join(TMPDIR)).unwrap_or_else(|e| panic!("create tmpdir: {e}"));
        let (child, port, args) = launch_on_free_port(&dir, &opts);
        let name = format!("mysqld server_id={} port={port}", opts.server_id);
        let server = MySql {
            process: ServerProcess::new(child, name),
            port,
            server_id: opts.server_id,
            args,
            dir,
            _dir: tempdir,
        };
        server.sql(SETUP_SQL);
        server
    }

    /// The unix socket, as the host sees it (the server's `@@socket` is the path inside the
    /// root).
    pub fn socket(&self) -> PathBuf {
        self.dir.join(SOCKET)
    }

    pub fn datadir(&self) -> PathBuf {
        self.dir.join(DATADIR)
    }

    /// Its own temporary directory.
    pub fn tmpdir(&self) -> PathBuf {
        self.dir.join(TMPDIR)
    }

    /// `SHOW REPLICA STATUS` as column -> value; empty when the server is not a replica.
    pub fn replica_status(&self) -> HashMap<String, String> {
        self.query_maps("SHOW REPLICA STATUS")
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// Every GTID this replica's receiver has taken from its source
    /// (`performance_schema.replication_connection_status.RECEIVED_TRANSACTION_SET`), on one
    /// line; empty when it is not a replica.
    pub fn received_transaction_set(&self) -> String {
        received_transaction_set_at(&self.socket())
            .unwrap_or_else(|e| panic!("{}: {e}", self.name()))
    }

    /// `@@global.gtid_executed`, on one line (the server breaks it after each comma).
    pub fn gtid_executed(&self) -> String {
        self.sql("SELECT REPLACE(@@global.gtid_executed, '\\n', '')")
    }

    /// The newest GTID this server committed itself (`uuid:n`, its own UUID's last number in
    /// `gtid_executed`).
    ///
    /// # Panics
    /// If it committed none.
    pub fn newest_gtid(&self) -> String {
        let uuid = self.sql("SELECT @@global.server_uuid");
        let executed = self.gtid_executed();
        let n = super::mysql_gtid::newest_of(&executed, &uuid)
            .unwrap_or_else(|| panic!("{uuid} committed nothing in {executed:?}"));
        format!("{uuid}:{n}")
    }

    /// Whether the GTID set `subset` is contained in `set`, as the server's `GTID_SUBSET`
    /// computes it.
    pub fn gtid_subset(&self, subset: &str, set: &str) -> bool {
        let answer = self.sql(&format!(
            "SELECT GTID_SUBSET({}, {})",
            sql_quote(subset),
            sql_quote(set)
        ));
        answer == "1"
    }

    /// Turns semisync acknowledgements on or off on this replica (started with
    /// [`MySqlOptions::semisync_replica`]). The receiver reads the setting when it connects,
    /// hence the restart of the IO thread.
    pub fn set_semi_sync_replica(&self, enabled: bool) {
        let value = if enabled { "ON" } else { "OFF" };
        self.sql(&format!(
            "SET GLOBAL rpl_semi_sync_replica_enabled = {value}; \
             STOP REPLICA IO_THREAD; START REPLICA IO_THREAD"
        ));
    }

    /// Logs `user` in once over the unix socket, where `caching_sha2_password` may send the
    /// password in full: the server then caches the account, and the fast path works in plain
    /// text over TCP until a restart or `FLUSH PRIVILEGES`. Clients that ask for the server's RSA
    /// key (the `mariadb` CLI, mysql_async, a replica with `GET_SOURCE_PUBLIC_KEY=1`) do without;
    /// this is for those that cannot, and for tests of the fast path.
    pub fn cache_password(&self, user: &str, password: &str) {
        if let Err(e) = run_client_as(&self.socket(), user, Some(password), &[], "SELECT 1") {
            panic!(
                "{}: {user} could not log in over the socket: {e}",
                self.name()
            );
        }
    }

    /// A `mysql_async` URL for `user` over TCP, defaulting to the test database.
    pub fn url(&self, user: &str, password: &str) -> String {
        format!(
            "{}/{TEST_DB}?prefer_socket=false",
            self.url_without_db(user, password)
        )
    }

    /// The whole error log (all starts of this instance).
    pub fn error_log(&self) -> String {
        fs::read_to_string(self.dir.join(ERROR_LOG)).unwrap_or_default()
    }

    /// Starts the server again on the same port and data directory (stopping it first if it
    /// still runs) and waits until it accepts connections. It forgets its `SET GLOBAL`s and,
    /// with `--skip-replica-start`, does not replicate until told to.
    pub fn restart(&mut self) {
        let (dir, args) = (&self.dir, &self.args);
        self.process
            .restart(|| launch(dir, args), || diagnostics(dir));
    }

    fn name(&self) -> &str {
        self.process.name()
    }
}

impl Drop for MySql {
    fn drop(&mut self) {
        self.process.report_if_failing(|| diagnostics(&self.dir));
        // Killed, not stopped: its files are deleted next, so a clean shutdown buys nothing.
        self.kill();
    }
}

/// `RECEIVED_TRANSACTION_SET` of the replica whose socket (host path) is `socket`: every GTID
/// it has received, on one line. A free function, so that a task can read it without holding
/// the server.
///
/// # Errors
/// The client's complaint if the server cannot be asked (it is gone).
pub fn received_transaction_set_at(socket: &Path) -> Result<String, String> {
    let out = run_client(
        socket,
        &["-N"],
        "SELECT REPLACE(RECEIVED_TRANSACTION_SET, '\\n', '') \
         FROM performance_schema.replication_connection_status WHERE CHANNEL_NAME = ''",
    )?;
    Ok(out.trim().to_string())
}
