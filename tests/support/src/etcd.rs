//! A real etcd cluster for tests (Debian's `etcd-server`): members on loopback ports in a
//! temporary directory, stopped by pid when dropped, each of which a test can SIGKILL.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::mariadb::{reap_with_sigkill, wait_for};
use crate::ports::free_port;

const ETCD: &str = "etcd";
const PATIENCE: Duration = Duration::from_secs(60);

/// One member.
#[derive(Debug)]
pub struct Member {
    name: String,
    client_port: u16,
    child: Option<Child>,
    log: PathBuf,
}

/// A cluster of members, each with its own data directory under one temporary directory.
#[derive(Debug)]
pub struct Etcd {
    members: Vec<Member>,
    /// The CA its clients check it with, when it serves TLS.
    ca: Option<PathBuf>,
    _dir: TempDir,
}

impl Etcd {
    /// `n` members, started and serving (a leader elected).
    pub fn start(n: usize) -> Etcd {
        Etcd::start_with(n, None)
    }

    /// `n` members serving clients over TLS with `certs` (for 127.0.0.1).
    pub fn start_tls(n: usize, certs: &crate::certs::TestCerts) -> Etcd {
        Etcd::start_with(n, Some(certs))
    }

    fn start_with(n: usize, certs: Option<&crate::certs::TestCerts>) -> Etcd {
        let scheme = if certs.is_some() { "https" } else { "http" };
        let dir = tempfile::Builder::new()
            .prefix("strongsync-etcd-")
            .tempdir()
            .expect("a directory for etcd");
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let name = format!("m{i}");
                let log = dir.path().join(format!("{name}.log"));
                let out = File::create(&log).expect("etcd's log");
                let child = Command::new(ETCD)
                    .arg(format!("--name={name}"))
                    .arg(format!("--data-dir={}", dir.path().join(&name).display()))
                    .arg(format!(
                        "--listen-client-urls={scheme}://127.0.0.1:{client}"
                    ))
                    .arg(format!(
                        "--advertise-client-urls={scheme}://127.0.0.1:{client}"
                    ))
                    .args(certs.map(|c| format!("--cert-file={}", c.cert.display())))
                    .args(certs.map(|c| format!("--key-file={}", c.key.display())))
                    .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                    .arg(format!(
                        "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                    ))
                    .arg(format!("--initial-cluster={initial}"))
                    .arg("--initial-cluster-state=new")
                    .arg("--initial-cluster-token=strongsync-test")
                    // Quick elections on loopback.
                    .args(["--heartbeat-interval=100", "--election-timeout=1000"])
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().expect("etcd's log"))
                    .stderr(out)
                    .spawn()
                    .unwrap_or_else(|e| panic!("start {ETCD} (Debian: etcd-server): {e}"));
                Member {
                    name,
                    client_port: *client,
                    child: Some(child),
                    log,
                }
            })
            .collect();
        let etcd = Etcd {
            members,
            ca: certs.map(|c| c.ca.clone()),
            _dir: dir,
        };
        wait_for("etcd to serve", PATIENCE, || etcd.healthy());
        etcd
    }

    /// The client URLs of every member, for `[cluster] endpoints`.
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        self.members
            .iter()
            .map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// Pid of member `i`.
    pub fn pid(&self, i: usize) -> u32 {
        self.members[i]
            .child
            .as_ref()
            .map(Child::id)
            .expect("a running member")
    }

    /// SIGKILLs member `i`, as in a crash.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            reap_with_sigkill(&mut child);
        }
    }

    /// Whether the running members answer as a cluster with a leader (`etcdctl endpoint
    /// health` on each).
    pub fn healthy(&self) -> bool {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", running.join(",")))
            .args(
                self.ca
                    .as_ref()
                    .map(|ca| format!("--cacert={}", ca.display())),
            )
            .args(["endpoint", "health", "--command-timeout=2s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `etcdctl get` of `key` (its value, or none).
    pub fn get(&self, key: &str) -> Option<String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints().join(",")))
            .args(["get", "--print-value-only", key])
            .output()
            .expect("run etcdctl");
        let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && !value.is_empty()).then_some(value)
    }

    /// Turns etcd's authentication on, with `user` (password `password`) allowed to read and
    /// write the keys under `prefix` and nothing else.
    pub fn enable_auth(&self, user: &str, password: &str, prefix: &str) {
        let endpoints = format!("--endpoints={}", self.endpoints().join(","));
        let steps: [Vec<String>; 7] = [
            vec![
                "user".into(),
                "add".into(),
                "root".into(),
                "--new-user-password=root-secret".into(),
            ],
            vec![
                "user".into(),
                "grant-role".into(),
                "root".into(),
                "root".into(),
            ],
            vec![
                "user".into(),
                "add".into(),
                user.into(),
                format!("--new-user-password={password}"),
            ],
            vec!["role".into(), "add".into(), "cluster".into()],
            vec![
                "role".into(),
                "grant-permission".into(),
                "cluster".into(),
                "--prefix=true".into(),
                "readwrite".into(),
                prefix.into(),
            ],
            vec![
                "user".into(),
                "grant-role".into(),
                user.into(),
                "cluster".into(),
            ],
            vec!["auth".into(), "enable".into()],
        ];
        for step in steps {
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(&endpoints)
                .args(&step)
                .output()
                .expect("run etcdctl");
            // The root role exists once the root user does, on some versions already.
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() || said.contains("already"),
                "etcdctl {step:?}: {said}"
            );
        }
    }

    /// Every member's log, for a failing test.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "--- etcd {}:\n{}",
                    m.name,
                    std::fs::read_to_string(&m.log).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                reap_with_sigkill(&mut child);
            }
        }
    }
}
