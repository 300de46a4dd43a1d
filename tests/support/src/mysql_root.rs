//! The Debian sid root that MySQL 9.7 runs from under chroot (built by `deploy/mysql/root`),
//! the data directory template made with it once, and the `mysql` client run inside it.
//!
//! Bookworm ships MariaDB only and sid's binaries need a newer C library, so everything MySQL
//! runs as `chroot <root> …`. Paths the server or its client is given are paths inside the root;
//! the harness keeps host paths and translates them with [`inside`].

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::mariadb::{copy_dir, must_succeed, run_batch, sanitize, staging_dir, ROOT_USER};

/// The server and the client, as paths inside the root.
pub(crate) const MYSQLD: &str = "/usr/sbin/mysqld";
const CLIENT: &str = "/usr/bin/mysql";
const BUILD_SCRIPT: &str = "deploy/mysql/root";

/// The template is initialized with the sizes the servers run with, so a fresh copy starts
/// without resizing its buffer pool or redo log.
pub(crate) const INNODB_SIZES: &[&str] = &[
    "--innodb-buffer-pool-size=64M",
    "--innodb-redo-log-capacity=32M",
];
/// Part of the template's cache key: bump it whenever the initialization arguments change.
const TEMPLATE_REVISION: u32 = 1;

/// The root, built by `deploy/mysql/root` on first use if it is missing (that script honours
/// `STRONGSYNC_MYSQL_ROOT`).
///
/// # Panics
/// If the root cannot be built, with the script's output: MySQL tests fail, never skip.
pub fn root() -> &'static Path {
    // The failure is kept too: every test asking again would run the build again, at once.
    static ROOT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match ROOT.get_or_init(find_or_build_root) {
        Ok(root) => root,
        Err(why) => panic!("{why}"),
    }
}

fn find_or_build_root() -> Result<PathBuf, String> {
    let script = crate::repo().join(BUILD_SCRIPT);
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{BUILD_SCRIPT} could not provide the MySQL 9.7 root ({}); MySQL tests need it \
             (and root privileges, for chroot)\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        ));
    }
    let printed = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    // Absolute, so that host paths under it translate into the chroot's by a prefix.
    let root = printed
        .canonicalize()
        .map_err(|e| format!("{BUILD_SCRIPT} printed {printed:?}: {e}\nstderr:\n{stderr}"))?;
    if !root.join(MYSQLD.trim_start_matches('/')).is_file() {
        return Err(format!(
            "{BUILD_SCRIPT} printed {root:?}, which holds no {MYSQLD}\nstderr:\n{stderr}"
        ));
    }
    Ok(root)
}

/// `host_path` (somewhere under the root) as the chroot sees it.
///
/// # Panics
/// If the path is not under the root: the server could not reach it.
pub fn inside(host_path: &Path) -> PathBuf {
    let relative = host_path.strip_prefix(root()).unwrap_or_else(|_| {
        panic!(
            "{} is outside the MySQL root {}",
            host_path.display(),
            root().display()
        )
    });
    Path::new("/").join(relative)
}

/// Where instances keep their files: the root's `/tmp`, so that the chroot sees them.
pub(crate) fn instances_dir() -> PathBuf {
    root().join("tmp")
}

/// `program` (a path inside the root) run under chroot.
pub(crate) fn chrooted(program: &str) -> Command {
    let mut command = Command::new("chroot");
    command.arg(root()).arg(program);
    command
}

/// Runs the `mysql` client as root over `socket` (a host path) in batch mode; returns stdout
/// as is. The root's own client: it starts in a third of the time of the host's `mariadb`.
pub(crate) fn run_client(socket: &Path, extra_args: &[&str], sql: &str) -> Result<String, String> {
    run_client_as(socket, ROOT_USER, None, extra_args, sql)
}

/// Like [`run_client`], as `user` with `password` (none: an empty one).
pub(crate) fn run_client_as(
    socket: &Path,
    user: &str,
    password: Option<&str>,
    extra_args: &[&str],
    sql: &str,
) -> Result<String, String> {
    run_batch(
        chrooted(CLIENT),
        &inside(socket),
        (user, password),
        extra_args,
        sql,
    )
}

/// The cached template data directory for the root's mysqld, built on first use.
pub(crate) fn template_datadir() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(build_template)
}

/// Initializes the template once per MySQL version, under `target/tmp` like MariaDB's.
/// mysqld writes only where the chroot reaches, so it initializes inside the root and the
/// result is copied out. Concurrent test processes may race: each stages its own copy and
/// renames it into place, and the loser's equivalent copy is discarded.
fn build_template() -> PathBuf {
    let cache = &crate::target_dir().join("..").join("tmp");
    let final_dir = cache.join(format!(
        "mysql-template-r{TEMPLATE_REVISION}-{}",
        sanitize(&server_version())
    ));
    if final_dir.is_dir() {
        return final_dir;
    }
    let work = tempfile::Builder::new()
        .prefix(".strongsync-mysql-template-")
        .tempdir_in(instances_dir())
        .expect("create a directory in the MySQL root for the template");
    let datadir = work.path().join("data");
    let tmpdir = work.path().join("tmp");
    fs::create_dir(&tmpdir).unwrap_or_else(|e| panic!("create {}: {e}", tmpdir.display()));
    initialize(&datadir, &tmpdir);
    // The server's UUID: a copy that kept it would share it with every other copy, and a replica
    // refuses a source with its own UUID. Without the file each server makes its own.
    let auto_cnf = datadir.join("auto.cnf");
    fs::remove_file(&auto_cnf).unwrap_or_else(|e| panic!("remove {}: {e}", auto_cnf.display()));

    let staging = staging_dir(cache, ".mysql-template-staging-");
    let staged = staging.path().join("data");
    copy_dir(&datadir, &staged)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", datadir.display(), staged.display()));
    if let Err(e) = fs::rename(&staged, &final_dir) {
        assert!(
            final_dir.is_dir(),
            "rename {} to {}: {e}",
            staged.display(),
            final_dir.display()
        );
    }
    final_dir
}

/// The version mysqld reports (`9.7.4-2` of `/usr/sbin/mysqld  Ver 9.7.4-2 for Linux …`), or
/// the whole line if it reads otherwise.
fn server_version() -> String {
    let out = chrooted(MYSQLD)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("run chroot {MYSQLD} --version: {e}"));
    assert!(
        out.status.success(),
        "chroot {MYSQLD} --version: {}",
        out.status
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut words = line.split_whitespace().skip_while(|word| *word != "Ver");
    words.nth(1).map_or_else(|| line.clone(), str::to_string)
}

/// `mysqld --initialize-insecure`: root@localhost with an empty password, no binlog written
/// (initialization never logs), in a tmpdir of its own.
fn initialize(datadir: &Path, tmpdir: &Path) {
    let mut initialize = chrooted(MYSQLD);
    // --no-defaults must be the first argument.
    initialize
        .arg("--no-defaults")
        .args(["--initialize-insecure", "--user=root"])
        .arg(format!("--datadir={}", inside(datadir).display()))
        .arg(format!("--tmpdir={}", inside(tmpdir).display()))
        .args(INNODB_SIZES);
    must_succeed(&mut initialize, "mysqld --initialize-insecure");
}
