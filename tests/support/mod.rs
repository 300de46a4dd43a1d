//! Shared support code for the integration tests: real MariaDB servers and topologies, the
//! proxy in-process or as its binary, and a raw protocol client.
// Each test binary uses only a subset of this module.
#![allow(dead_code)]

pub mod admin;
pub mod certs;
pub mod cli;
pub mod clientlib;
pub mod deploy;
pub mod fake_replica;
pub mod mariadb;
pub mod proxy;
pub mod rawclient;
pub mod strong;
pub mod sysbench;
pub mod tcp_relay;
pub mod topology;
