//! HAProxy as `deploy/cluster/haproxy.cfg` ships it, in front of strongsync instances on
//! loopback: what the tests route through is what an operator deploys.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::deploy::read;
use crate::mariadb::{reap_with_sigkill, wait_for};
use crate::ports::free_port;

/// The shipped config as a file the tests run, and the HAProxy running it.
pub struct Haproxy {
    child: Child,
    /// The applications' port (the shipped `bind :3306`).
    pub sql: u16,
    /// The replicas' port (the shipped `bind :3307`).
    pub replication: u16,
    _dir: tempfile::TempDir,
}

/// One instance behind HAProxy: its name, its SQL port and its admin port (checked).
pub struct Backend {
    pub name: String,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
}

/// `deploy/cluster/haproxy.cfg` with this machine's addresses: its two binds on `sql` and
/// `replication`, and its example servers replaced by `backends`, each checked on its own admin
/// port. Everything else (the checks, their timing, what a marked-down server's sessions get)
/// is as shipped.
pub fn shipped_config(sql: u16, replication: u16, backends: &[Backend]) -> String {
    let shipped = read("cluster/haproxy.cfg");
    let mut out = String::new();
    let mut binds = 0;
    let mut servers_written = false;
    for line in shipped.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("server ") {
            if !servers_written {
                for b in backends {
                    out.push_str(&format!(
                        "    server {} {} check port {}\n",
                        b.name,
                        b.listen,
                        b.admin.port()
                    ));
                }
                servers_written = true;
            }
            continue;
        }
        servers_written = false;
        let line = match trimmed {
            "bind :3306" => {
                binds += 1;
                format!("    bind 127.0.0.1:{sql}")
            }
            "bind :3307" => {
                binds += 1;
                format!("    bind 127.0.0.1:{replication}")
            }
            _ => line.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    assert_eq!(
        binds, 2,
        "the shipped config binds :3306 and :3307:\n{shipped}"
    );
    out
}

impl Haproxy {
    /// HAProxy running the shipped config in front of `backends`.
    pub fn shipped(backends: &[Backend]) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let (sql, replication) = (free_port(), free_port());
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, shipped_config(sql, replication, backends)).unwrap();
        let child = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy (Debian: haproxy)");
        wait_for("haproxy listening", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", sql)).is_ok()
        });
        Haproxy {
            child,
            sql,
            replication,
            _dir: dir,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        reap_with_sigkill(&mut self.child);
    }
}
