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
