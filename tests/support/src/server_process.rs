//! The process of a server a test started (mariadbd or mysqld): stopped by pid, SIGKILLed as
//! in a crash, started again by its launcher, and named with its diagnostics when a failing
//! test unwinds past it.

use std::process::Child;
use std::thread;

use nix::unistd::Pid;

use crate::mariadb::{reap_with_sigkill, stop_child, LaunchFailure};

#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Option<Child>,
    /// Of the current process, or of the last one once it is stopped.
    pid: u32,
    /// How messages name the server, e.g. `mariadbd server_id=2 port=3307`.
    name: String,
}

impl ServerProcess {
    pub(crate) fn new(child: Child, name: String) -> ServerProcess {
        ServerProcess {
            pid: child.id(),
            child: Some(child),
            name,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether there is a process that has not been stopped or killed.
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// SIGTERM, then SIGKILL if it has not exited within 30 s. Idempotent.
    pub(crate) fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            let pid = Pid::from_raw(i32::try_from(self.pid).expect("pid fits in i32"));
            stop_child(child, pid, &self.name);
        }
    }

    /// SIGKILL, as in a crash, and reap it. Idempotent.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            reap_with_sigkill(&mut child);
        }
    }

    /// Stops it if it still runs and starts it again with `launch`, which waits until it
    /// accepts connections. Panics with `diagnostics` if it does not come up.
    pub(crate) fn restart(
        &mut self,
        launch: impl FnOnce() -> Result<Child, LaunchFailure>,
        diagnostics: impl FnOnce() -> String,
    ) {
        self.stop();
        match launch() {
            Ok(child) => {
                self.pid = child.id();
                self.child = Some(child);
            }
            Err(failure) => panic!(
                "{}: restart failed: {}\n{}",
                self.name,
                failure.message(),
                diagnostics()
            ),
        }
    }

    /// Prints `diagnostics` if a failing test is unwinding while the server still runs: the
    /// server's own account of what went wrong goes with the test's.
    pub(crate) fn report_if_failing(&self, diagnostics: impl FnOnce() -> String) {
        if thread::panicking() && self.child.is_some() {
            eprintln!("--- {} (test failed), {}", self.name, diagnostics());
        }
    }
}

/// Asserts that no process has the id `pid` any more.
pub fn assert_process_gone(pid: u32) {
    let pid = Pid::from_raw(i32::try_from(pid).expect("pid fits in i32"));
    assert_eq!(
        nix::sys::signal::kill(pid, None),
        Err(nix::errno::Errno::ESRCH),
        "process {pid} still exists"
    );
}

/// Rows as the servers' `sql` returns them, from literals.
pub fn rows(expected: &[&[&str]]) -> Vec<Vec<String>> {
    expected
        .iter()
        .map(|row| row.iter().map(|v| v.to_string()).collect())
        .collect()
}

/// The methods every handle of a server a test started has alike, written once: its identity
/// and addresses, its process, and SQL as root through its command-line client. Expanded in
/// the handle's `impl`, whose type has the fields `process` ([`ServerProcess`]), `port` and
/// `server_id`, and a method `run_root(&self, extra_args, sql)` that runs its client as root
/// over its Unix socket in batch mode.
macro_rules! handle_methods {
    () => {
        /// Its TCP port on loopback.
        pub fn port(&self) -> u16 {
            self.port
        }

        /// `127.0.0.1:port`.
        pub fn addr(&self) -> String {
            format!("127.0.0.1:{}", self.port)
        }

        /// A client URL for `user` over TCP, without a database.
        pub fn url_without_db(&self, user: &str, password: &str) -> String {
            format!(
                "mysql://{}:{}@127.0.0.1:{}",
                $crate::mariadb::percent_encode(user),
                $crate::mariadb::percent_encode(password),
                self.port
            )
        }

        pub fn server_id(&self) -> u32 {
            self.server_id
        }

        /// Pid of the current server process (of the last one, once stopped).
        pub fn pid(&self) -> u32 {
            self.process.pid()
        }

        /// Whether this handle has a server process that it has not stopped or killed.
        pub fn is_running(&self) -> bool {
            self.process.is_running()
        }

        /// Stops the server cleanly (SIGTERM, then waits).
        pub fn stop(&mut self) {
            self.process.stop();
        }

        /// Kills the server with SIGKILL, as a crash would.
        pub fn kill(&mut self) {
            self.process.kill();
        }

        /// Runs `sql` as root over the unix socket in batch mode without column names and
        /// returns the trimmed output.
        ///
        /// # Panics
        /// With the client's stderr and the SQL, if it fails.
        pub fn sql(&self, sql: &str) -> String {
            self.try_sql(sql)
                .unwrap_or_else(|e| panic!("{}: SQL failed: {e}\nSQL: {sql}", self.name()))
        }

        /// Like `sql`, but returns the client's stderr as the error instead of panicking.
        pub fn try_sql(&self, sql: &str) -> Result<String, String> {
            self.run_root(&["-N"], sql)
                .map(|out| out.trim().to_string())
        }

        /// Result rows, each split into columns. Values are as the client prints them in
        /// batch mode: `NULL` for NULL, with tabs, newlines and backslashes escaped.
        pub fn query_rows(&self, sql: &str) -> Vec<Vec<String>> {
            let out = self
                .run_root(&["-N"], sql)
                .unwrap_or_else(|e| panic!("{}: query failed: {e}\nSQL: {sql}", self.name()));
            $crate::mariadb::split_rows(&out)
        }

        /// Result rows as column name -> value.
        pub fn query_maps(&self, sql: &str) -> Vec<std::collections::HashMap<String, String>> {
            let out = self
                .run_root(&[], sql)
                .unwrap_or_else(|e| panic!("{}: query failed: {e}\nSQL: {sql}", self.name()));
            let mut rows = $crate::mariadb::split_rows(&out).into_iter();
            let Some(names) = rows.next() else {
                return Vec::new();
            };
            rows.map(|row| names.iter().cloned().zip(row).collect())
                .collect()
        }

        /// A global status variable's value.
        pub fn status_var(&self, name: &str) -> String {
            let rows = self.query_rows(&format!(
                "SHOW GLOBAL STATUS LIKE {}",
                $crate::mariadb::sql_quote(name)
            ));
            match rows.as_slice() {
                [row] if row.len() == 2 => row[1].clone(),
                _ => panic!(
                    "{}: no single status variable {name}: {rows:?}",
                    self.name()
                ),
            }
        }
    };
}

pub(crate) use handle_methods;
