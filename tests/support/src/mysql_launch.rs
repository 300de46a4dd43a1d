//! Starting one mysqld under chroot: its command line, a free port, waiting until it answers on
//! its socket, and the logs to show when it does not.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;
use std::process::{Child, Stdio};

use super::mariadb::{
    await_start, file_len, free_port, spawn_from_long_lived_thread, tail, LaunchFailure,
};
use super::mysql::MySqlOptions;
use super::mysql_root::{chrooted, inside, run_client, INNODB_SIZES, MYSQLD};

/// Server options every instance gets, before [`MySqlOptions::extra_args`].
const SERVER_DEFAULTS: &[&str] = &[
    "--user=root",
    "--bind-address=127.0.0.1",
    "--skip-name-resolve",
    // The compiled default /var/lib/mysql-files does not exist in the root: the server aborts.
    "--secure-file-priv=",
    // X Protocol would listen on a second port.
    "--mysqlx=OFF",
    "--gtid-mode=ON",
    "--enforce-gtid-consistency=ON",
    "--log-bin=binlog",
    "--log-replica-updates=ON",
    "--relay-log=relay-bin",
    // Replicas are pointed at strongsync (or the primary) by whoever starts them.
    "--skip-replica-start",
    "--binlog-expire-logs-seconds=3600",
    // What strongsync needs to run no statement in any session (deploy/sandbox/mysql.cnf).
    "--session-track-gtids=OWN_GTID",
    "--session-track-system-variables=time_zone,autocommit,character_set_client,character_set_results,character_set_connection,collation_connection,session_track_gtids,session_track_state_change,session_track_system_variables",
    "--session-track-state-change=ON",
    "--max-connections=2000",
    "--max-allowed-packet=256M",
    "--max-prepared-stmt-count=1048576",
    "--table-open-cache=4000",
    "--thread-cache-size=256",
    "--local-infile=ON",
    // As for MariaDB (support::mariadb): no flushes, which a SIGKILL does not need, but the
    // doublewrite buffer, which repairs a page write that the kill cut short.
    "--innodb-flush-log-at-trx-commit=2",
    "--sync-binlog=0",
    "--innodb-doublewrite=ON",
];

/// Attempts with a different port when the chosen one got taken before the server bound it.
const PORT_ATTEMPTS: usize = 5;

/// Names of an instance's files inside its directory.
pub(crate) const DATADIR: &str = "data";
pub(crate) const TMPDIR: &str = "tmp";
pub(crate) const SOCKET: &str = "mysqld.sock";
pub(crate) const PID_FILE: &str = "mysqld.pid";
pub(crate) const ERROR_LOG: &str = "error.log";
/// mysqld's own stdout/stderr: what it prints before `log_error` takes over.
pub(crate) const STDERR_LOG: &str = "stderr.log";

/// mysqld's arguments: `--no-defaults` (which must come first), the instance's paths, the
/// shared defaults, then `opts`.
fn server_args(dir: &Path, port: u16, opts: &MySqlOptions) -> Vec<String> {
    let path = |name: &str| inside(&dir.join(name)).display().to_string();
    let mut args = vec![
        "--no-defaults".to_string(),
        format!("--port={port}"),
        format!("--server-id={}", opts.server_id),
        format!("--datadir={}", path(DATADIR)),
        // The server's own: one started after a crash deletes the `#sql*` files in its tmpdir.
        format!("--tmpdir={}", path(TMPDIR)),
        format!("--socket={}", path(SOCKET)),
        format!("--pid-file={}", path(PID_FILE)),
        format!("--log-error={}", path(ERROR_LOG)),
    ];
    args.extend(SERVER_DEFAULTS.iter().map(|s| s.to_string()));
    args.extend(INNODB_SIZES.iter().map(|s| s.to_string()));
    if opts.semisync_source {
        args.push("--plugin-load-add=semisync_source.so".into());
    }
    if opts.semisync_replica {
        args.push("--plugin-load-add=semisync_replica.so".into());
    }
    args.extend(opts.extra_args.iter().cloned());
    args
}

/// Picks a free port and launches; picks another port if this one got taken between choosing
/// it and the server binding it. Returns the server, its port and its arguments.
pub(crate) fn launch_on_free_port(dir: &Path, opts: &MySqlOptions) -> (Child, u16, Vec<String>) {
    for _ in 0..PORT_ATTEMPTS {
        let port = free_port();
        let args = server_args(dir, port, opts);
        match launch(dir, &args) {
            Ok(child) => return (child, port, args),
            Err(LaunchFailure::PortTaken) => continue,
            Err(LaunchFailure::Failed(msg)) => panic!(
                "mysqld (server_id={}) failed to start: {msg}\n{}",
                opts.server_id,
                diagnostics(dir)
            ),
        }
    }
    panic!(
        "mysqld (server_id={}): every port tried was taken\n{}",
        opts.server_id,
        diagnostics(dir)
    )
}

/// Starts mysqld and waits until it answers on its socket.
pub(crate) fn launch(dir: &Path, args: &[String]) -> Result<Child, LaunchFailure> {
    let error_log = dir.join(ERROR_LOG);
    let log_start = file_len(&error_log);
    let child = spawn_mysqld(dir, args).unwrap_or_else(|e| panic!("spawn chroot mysqld: {e}"));
    await_start(child, "mysqld", &error_log, log_start, || {
        run_client(&dir.join(SOCKET), &["-N"], "SELECT 1").is_ok()
    })
}

fn spawn_mysqld(dir: &Path, args: &[String]) -> io::Result<Child> {
    let output = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(STDERR_LOG))?;
    let mut cmd = chrooted(MYSQLD);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output);
    // Forked by the harness's long-lived spawner thread with PR_SET_PDEATHSIG, which survives
    // chroot's exec: the server dies with the test process, however it dies.
    spawn_from_long_lived_thread(cmd)
}

/// The tails of the error log and of mysqld's stderr, for panic messages.
pub(crate) fn diagnostics(dir: &Path) -> String {
    let error_log = dir.join(ERROR_LOG);
    format!(
        "error log {}:\n{}\nstderr:\n{}",
        error_log.display(),
        tail(&fs::read_to_string(&error_log).unwrap_or_default()),
        tail(&fs::read_to_string(dir.join(STDERR_LOG)).unwrap_or_default())
    )
}
