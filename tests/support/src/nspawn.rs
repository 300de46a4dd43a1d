//! A Debian root booted with systemd under systemd-nspawn, sharing the host's network: real
//! systemd runs a shipped unit with its sandboxing, where the host has no systemd of its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::mariadb::wait_for;

/// How long a boot, or a clean power-off, may take.
const PATIENCE: Duration = Duration::from_secs(120);

/// A booted root; powered off when dropped.
pub struct Booted {
    nspawn: Child,
    /// The container's systemd, as the host sees it: commands enter its namespaces.
    leader: u32,
    name: String,
    console: PathBuf,
}

impl Booted {
    /// Boots `root` as the machine `name` and waits until its systemd says it has started
    /// (`running`, or `degraded` when a unit failed: the caller looks at its units).
    pub fn boot(root: &Path, name: &str) -> Booted {
        let console = root.with_extension("console");
        // nspawn splits the cgroup it starts in; started in the host's root cgroup, every
        // container would share one, so each gets its own first.
        let groups: Vec<PathBuf> = cgroups(name);
        let mut enter = String::new();
        for group in &groups {
            std::fs::create_dir_all(group).unwrap();
            enter.push_str(&format!("echo $$ > {}/cgroup.procs; ", group.display()));
        }
        let nspawn = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{enter}exec systemd-nspawn --boot --register=no --keep-unit --console=read-only -D {} -M {name}",
                root.display()
            ))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&console).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("start systemd-nspawn (Debian: systemd-container)");
        let mut booted = Booted {
            leader: 0,
            nspawn,
            name: name.to_owned(),
            console,
        };
        let nspawn_pid = booted.nspawn.id();
        wait_for("the container's systemd", PATIENCE, || {
            booted.leader = child_called(nspawn_pid, "systemd").unwrap_or(0);
            booted.leader != 0
        });
        let private = PathBuf::from(format!("/proc/{}/root/run/systemd/private", booted.leader));
        wait_for("the container's systemd to listen", PATIENCE, || {
            private.exists()
        });
        let state = booted.run(&["systemctl", "is-system-running", "--wait"]);
        let state = String::from_utf8_lossy(&state.stdout).trim().to_owned();
        assert!(
            state == "running" || state == "degraded",
            "the container booted to {state:?}:\n{}",
            booted.console()
        );
        booted
    }

    /// Runs `args` inside the container, with all its namespaces.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a"])
            .args(args)
            .output()
            .expect("nsenter")
    }

    /// `args` inside, which must succeed; its stdout.
    pub fn must(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} in the container:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The journal of `unit` since boot.
    pub fn journal(&self, unit: &str) -> String {
        let out = self.run(&["journalctl", "-b", "-u", unit, "-o", "cat", "--no-pager"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the container printed on its console.
    pub fn console(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        // nspawn passes SIGTERM on as a clean power-off.
        let _ = kill(Pid::from_raw(self.nspawn.id() as i32), Signal::SIGTERM);
        let step = Duration::from_millis(100);
        for _ in 0..PATIENCE.as_millis() / step.as_millis() {
            if matches!(self.nspawn.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(step);
        }
        if !matches!(self.nspawn.try_wait(), Ok(Some(_))) {
            // A container whose nspawn is killed outlives it: its systemd goes too.
            if self.leader != 0 {
                let _ = kill(Pid::from_raw(self.leader as i32), Signal::SIGKILL);
            }
            let _ = self.nspawn.kill();
            let _ = self.nspawn.wait();
        }
        for group in cgroups(&self.name).iter().rev() {
            remove_cgroup(group);
        }
        let _ = std::fs::remove_dir_all(format!("/run/systemd/nspawn/propagate/{}", self.name));
    }
}

/// The cgroups a container named `name` starts in, one per hierarchy systemd uses.
fn cgroups(name: &str) -> Vec<PathBuf> {
    ["systemd", "unified"]
        .iter()
        .map(|h| PathBuf::from(format!("/sys/fs/cgroup/{h}/strongsync-nspawn-{name}")))
        .filter(|g| g.parent().is_some_and(Path::is_dir))
        .collect()
}

/// Removes a cgroup and those below it, deepest first.
fn remove_cgroup(group: &Path) {
    if let Ok(entries) = std::fs::read_dir(group) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(group);
}

/// The pid of a child of `parent` whose command is `comm`.
fn child_called(parent: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid ...
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent && name == comm).then_some(pid)
        })
}
