//! The integration tests' harness, one crate that every test binary links: real MariaDB
//! servers and topologies, real MySQL 9.7 ones (from a Debian sid root, under chroot), the
//! proxy in-process or as its binary, a raw protocol client, a fake replica, the CLI and
//! sysbench, and the files in `deploy/`.

pub mod admin;
pub mod certs;
pub mod cli;
pub mod clientlib;
pub mod cluster;
pub mod cluster_ledger;
pub mod debian;
pub mod deploy;
pub mod etcd;
pub mod failover;
pub mod failover_rounds;
pub mod fake_replica;
pub mod haproxy;
pub mod ledger;
pub mod logins;
pub mod mariadb;
pub mod mysql;
pub mod mysql_fake_replica;
pub mod mysql_gtid;
mod mysql_launch;
pub mod mysql_root;
pub mod nemesis;
pub mod nspawn;
pub mod podman;
pub mod ports;
pub mod proxy;
pub mod rawclient;
pub mod replay;
pub mod server_process;
pub mod sql;
pub mod strong;
pub mod sysbench;
pub mod tcp_relay;
pub mod topology;

/// The repository's top directory.
pub fn repo() -> &'static std::path::Path {
    // This crate lives in tests/support.
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Where cargo puts the binaries of the test run (`target/debug`): the test executables live in
/// its `deps` directory.
pub fn target_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the executable's directory");
    deps.parent().unwrap_or(deps).to_path_buf()
}
