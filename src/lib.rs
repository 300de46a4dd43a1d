//! strongsync: a MySQL/MariaDB proxy that holds each commit's OK until a quorum of replicas has
//! the transaction (`docs/architecture.md` maps its parts).
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod asked;
pub mod cluster;
pub mod commit;
pub mod config;
pub mod conn;
mod deadline;
pub mod durability;
pub mod error;
pub mod failover;
pub mod flavour;
pub mod gate;
pub mod health;
pub mod metrics;
pub mod operator;
pub mod primary;
pub mod probe;
pub mod status;
pub mod stream;
pub mod tls;
pub mod tracking_defaults;

mod barrier;
mod legs;
mod replica;
mod session;
mod sharing;

pub use app::{Proxy, ProxyBuilder, ShutdownReport, StartError};
pub use commit::{Commit, WaitKind};
pub use config::{Config, ConfigError, Limits, Timeouts};
pub use durability::{CommitHook, Release};
