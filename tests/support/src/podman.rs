//! Podman (rootful) with a configuration and a store of the tests' own, kept between runs: it
//! builds `deploy/Dockerfile` as shipped, from bases made here (the machine reaches no image
//! registry): `debian:bookworm-slim` from a debootstrap root, `rust:1-bookworm` from it and this
//! machine's Rust toolchain.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nix::sys::resource::{getrlimit, Resource};

use crate::debian;

/// Podman with the tests' configuration and store.
pub struct Podman {
    dir: PathBuf,
}

impl Podman {
    /// The tests' podman, its store under `STRONGSYNC_PODMAN` (else `/var/tmp/strongsync-podman`),
    /// with what containers left behind by an earlier run removed.
    pub fn prepared() -> Podman {
        let dir = std::env::var_os("STRONGSYNC_PODMAN").map_or_else(
            || PathBuf::from("/var/tmp/strongsync-podman"),
            PathBuf::from,
        );
        std::fs::create_dir_all(&dir).unwrap();
        // runc: crun refuses a host whose cgroup2 hierarchy holds a controller beside v1's.
        // Limits no higher than this process's own, which a container may not exceed.
        let (_, nofile) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let (nproc, _) = getrlimit(Resource::RLIMIT_NPROC).unwrap();
        let nproc = nproc.min(32768);
        std::fs::write(
            dir.join("containers.conf"),
            format!(
                "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n"
            ),
        )
        .unwrap();
        let podman = Podman { dir };
        // An interrupted build leaves its working containers, gigabytes of them.
        let _ = podman.run(&["rm", "--all", "--force", "--external"]);
        podman
    }

    /// `podman ARGS` with the tests' configuration and store.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("podman");
        command
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .args(args);
        command
    }

    /// Runs `podman ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .expect("run podman (Debian: podman, runc)")
    }

    /// Runs `podman ARGS`, which must succeed; its stdout.
    pub fn must(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the store has an image called `name`.
    pub fn has_image(&self, name: &str) -> bool {
        self.run(&["image", "exists", name]).status.success()
    }

    /// `debian:bookworm-slim` and `rust:1-bookworm`, as the Dockerfile names them, made here if
    /// the store lacks them (the Rust one again when this machine's toolchain changed).
    pub fn bases(&self) {
        if !self.has_image("docker.io/library/debian:bookworm-slim") {
            let root = debian::root("bookworm-minbase", &[]);
            let imported = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "tar -C {} -c . | CONTAINERS_CONF={} podman --root {} --runroot {} import \
                     --change 'CMD [\"bash\"]' \
                     --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                     - docker.io/library/debian:bookworm-slim",
                    root.display(),
                    self.dir.join("containers.conf").display(),
                    self.dir.join("storage").display(),
                    self.dir.join("run").display(),
                ))
                .output()
                .unwrap();
            assert!(
                imported.status.success(),
                "podman import: {}",
                String::from_utf8_lossy(&imported.stderr)
            );
        }
        let version = rustc_version();
        let marker = format!("localhost/strongsync-test-rust:{version}");
        if self.has_image(&marker) && self.has_image("docker.io/library/rust:1-bookworm") {
            return;
        }
        let context = self.dir.join("rust-context");
        debian::remove(&context);
        std::fs::create_dir_all(&context).unwrap();
        let sysroot = PathBuf::from(
            String::from_utf8(
                Command::new("rustc")
                    .args(["--print", "sysroot"])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap()
            .trim(),
        );
        // Hard links where the store shares the toolchain's file system, a copy where not.
        let linked = Command::new("cp")
            .arg("-al")
            .arg(&sysroot)
            .arg(context.join("rust"))
            .output()
            .is_ok_and(|out| out.status.success());
        if !linked {
            // What a failed `cp -al` made would take the copy inside it.
            debian::remove(&context.join("rust"));
            debian::copy(&sysroot, &context.join("rust"));
        }
        let _ = std::fs::remove_dir_all(context.join("rust/share/doc"));
        // This machine's certificate authorities: its registries' TLS may be signed by one of
        // its own.
        std::fs::copy(
            "/etc/ssl/certs/ca-certificates.crt",
            context.join("ca-certificates.crt"),
        )
        .unwrap();
        std::fs::write(
            context.join("Containerfile"),
            "FROM docker.io/library/debian:bookworm-slim\n\
             RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
             gcc libc6-dev make pkg-config && rm -rf /var/lib/apt/lists/*\n\
             COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n\
             COPY rust /usr/local/rust\n\
             ENV CARGO_HOME=/usr/local/cargo \
             PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
             RUN cargo --version && rustc --version\n",
        )
        .unwrap();
        self.must(&[
            "build",
            "--pull=never",
            "-t",
            "docker.io/library/rust:1-bookworm",
            "-t",
            &marker,
            context.to_str().unwrap(),
        ]);
        debian::remove(&context);
    }

    /// Builds `file` from `context` as `tag` (`podman build --pull=never`); its output, and
    /// whether it built.
    pub fn build(&self, context: &Path, file: &Path, tag: &str, log: &Path) -> bool {
        let out = self
            .command(&["build", "--pull=never", "-f"])
            .arg(file)
            .args(["-t", tag])
            .arg(context)
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(std::fs::File::options().append(true).open(log).unwrap())
            .status()
            .unwrap();
        // The layers no tag names any more, from this build's predecessors.
        let _ = self.run(&["image", "prune", "--force"]);
        out.success()
    }
}

/// This machine's `rustc --version`, as a tag may hold it.
fn rustc_version() -> String {
    let out = Command::new("rustc").arg("--version").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap_or("unknown")
        .to_owned()
}
