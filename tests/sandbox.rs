//! The README's "run it" command: `deploy/sandbox/sandbox up` starts a primary, two replicas
//! and strongsync, shows a write load going through, and `down` stops every process it
//! started; `up --mysql` does the same with MySQL 9.7 servers from the sid root.

use std::path::{Path, PathBuf};
use std::process::Command;

use support::cli::{mariadb, run_command, Output};
use support::mariadb::{APP_PASSWORD, APP_USER};
use support::proxy::free_port;

/// The servers a sandbox runs.
#[derive(Debug, Clone, Copy)]
enum Server {
    MariaDb,
    MySql,
}

impl Server {
    /// The arguments of `up` that choose it.
    fn up(self) -> &'static [&'static str] {
        match self {
            Server::MariaDb => &["up"],
            Server::MySql => &["up", "--mysql"],
        }
    }

    /// The labels of the source port, the IO thread and the SQL thread in the replica status
    /// lines the sandbox prints (the server's own column names).
    fn labels(self) -> [&'static str; 3] {
        match self {
            Server::MariaDb => ["Master_Port: ", "Slave_IO_Running: ", "Slave_SQL_Running: "],
            Server::MySql => [
                "Source_Port: ",
                "Replica_IO_Running: ",
                "Replica_SQL_Running: ",
            ],
        }
    }
}

struct Sandbox {
    dir: tempfile::TempDir,
    first_port: u16,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
            first_port: free_port(),
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("sandbox")
    }

    fn run(&self, args: &[&str]) -> Output {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/sandbox/sandbox");
        let mut command = Command::new(script);
        command
            .args(args)
            .env("SANDBOX_DIR", self.state_dir())
            .env("SANDBOX_PORT", self.first_port.to_string())
            .env("SANDBOX_LOAD_SECONDS", "2")
            .env("STRONGSYNC_BIN", env!("CARGO_BIN_EXE_strongsync"));
        run_command(command, &format!("sandbox {}", args.join(" ")))
    }

    /// Pids the sandbox recorded, by name.
    fn pids(&self) -> Vec<(String, u32)> {
        std::fs::read_to_string(self.state_dir().join("pids"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let (name, pid) = line.split_once(' ').expect("name pid");
                (name.to_owned(), pid.parse().expect("a pid"))
            })
            .collect()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.state_dir().exists() {
            let _ = self.run(&["down"]);
        }
    }
}

/// Running: its /proc entry exists and it is not a zombie (an orphan's parent may not reap it).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// The value after `label` on a line of `text`, up to the next space.
fn after<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    text.match_indices(label)
        .map(|(at, _)| {
            text[at + label.len()..]
                .split_whitespace()
                .next()
                .unwrap_or("")
        })
        .collect()
}

#[test]
fn sandbox_up_shows_strong_sync_working_and_down_leaves_nothing_behind() {
    shows_strong_sync_working_and_down_leaves_nothing_behind(Server::MariaDb);
}

#[test]
fn sandbox_up_mysql_shows_strong_sync_working_and_down_leaves_nothing_behind() {
    shows_strong_sync_working_and_down_leaves_nothing_behind(Server::MySql);
}

fn shows_strong_sync_working_and_down_leaves_nothing_behind(server: Server) {
    let [port_label, io_label, sql_label] = server.labels();
    let sandbox = Sandbox::new();
    let up = sandbox.run(server.up());
    assert!(up.success(), "{up}");
    let out = &up.stdout;

    let pids = sandbox.pids();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["primary", "replica1", "replica2", "strongsync"]);
    assert!(pids.iter().all(|&(_, pid)| alive(pid)), "{pids:?}");

    // Both replicas replicate through strongsync, with semisync, and hold the primary's data.
    assert_eq!(after(out, io_label), ["Yes", "Yes"], "{out}");
    assert_eq!(after(out, sql_label), ["Yes", "Yes"], "{out}");
    assert_eq!(after(out, "semisync "), ["ON,", "ON,"], "{out}");
    let checksums = after(out, "checksum ");
    let primary = after(out, "(primary ");
    assert_eq!(checksums.len(), 2, "{out}");
    for (replica, primary) in checksums.iter().zip(&primary) {
        assert_eq!(format!("{replica})"), *primary, "{out}");
    }
    let proxy_port = after(out, port_label);
    assert_eq!(proxy_port.len(), 2, "{out}");
    assert_eq!(proxy_port[0], proxy_port[1]);

    // Its metrics show commits released by the quorum and both replicas acknowledging.
    assert!(
        out.contains(r#"strongsync_replicas_connected{kind="semisync"} 2"#),
        "{out}"
    );
    let quorum = after(
        out,
        r#"strongsync_commits_released_total{outcome="quorum"} "#,
    );
    assert!(quorum[0].parse::<u64>().unwrap() > 0, "{out}");

    // The primary's defaults track what strongsync needs: no statement of its own in sessions.
    assert!(out.contains("session tracking: configured"), "{out}");

    // The way to connect it prints works.
    let port: u16 = after(out, "mariadb -h127.0.0.1 -P")[0].parse().unwrap();
    assert_eq!(port.to_string(), proxy_port[0]);
    let select =
        mariadb(port, APP_USER, APP_PASSWORD).execute("SELECT COUNT(*) FROM sbtest.sbtest1");
    assert!(select.success(), "{select}");
    assert_eq!(select.stdout.lines().last(), Some("10000"));

    let status = sandbox.run(&["status"]);
    assert!(status.success(), "{status}");
    assert!(status.stdout.contains("strongsync: ready"), "{status}");

    // MySQL's servers keep their files in the root's /tmp, where the chroot sees them.
    let mysql_dir = std::fs::read_to_string(sandbox.state_dir().join("mysql-dir")).ok();
    assert_eq!(
        mysql_dir.is_some(),
        matches!(server, Server::MySql),
        "{mysql_dir:?}"
    );
    let down = sandbox.run(&["down"]);
    assert!(down.success(), "{down}");
    assert!(down.stdout.contains("stopped 4 processes"), "{down}");
    for (name, pid) in &pids {
        assert!(!alive(*pid), "{name} (pid {pid}) still runs after down");
    }
    assert!(
        !sandbox.state_dir().exists(),
        "down removes the sandbox's files"
    );
    if let Some(mysql_dir) = mysql_dir {
        let mysql_dir = mysql_dir.trim();
        assert!(
            !Path::new(mysql_dir).exists(),
            "down removes the servers' files in the MySQL root, {mysql_dir}"
        );
    }
    let again = sandbox.run(&["status"]);
    assert!(again.stdout.contains("the sandbox is down"), "{again}");
}
