//! strongsync: a MySQL/MariaDB proxy that holds each commit's OK until a quorum of replicas has
//! the transaction.
//!
//! Architecture (one line per part; `docs/architecture.md` has the longer version):
//! - [`strongsync_proto`] (crate `proto/`): sans-IO wire formats — framing, handshake,
//!   OK/EOF/ERR with session state, where each response ends.
//! - [`conn`]: one socket with its buffers, read and written as packets (cancel-safe reads);
//!   [`primary`]: the way to the primary (TCP, or its Unix socket beside it).
//! - `legs`: a client session's two connections, the client's and its own to the primary,
//!   and the ways a session waits on one while watching the other; every write to the primary
//!   passes the epoch's gate there.
//! - `session`: the SQL port. Each client gets its own connection to the primary; a login
//!   relays the authentication untouched (the proxy stores no passwords), then a session
//!   switches on GTID tracking on the primary leg, relays every command and learns from each
//!   response which GTIDs it committed; a connection whose binlog dump the primary accepts
//!   becomes a replica pipe.
//! - `sharing`: sessions without state share connections to the primary, through a `Share`.
//! - `barrier`: the read barrier, which bounds what a response may reveal by the primary's
//!   binlog position, and the SQL rules it reads statements by.
//! - `replica`: the pipe that relays the binlog to a replica and reads its ACKs.
//! - [`flavour`]: what differs between a MariaDB primary and a MySQL one (how commits are
//!   reported and checked, what bounds a response, what a replica says it holds), behind one
//!   type chosen at login.
//! - [`commit`]: what a response reported about commits, which a session hands strong sync.
//! - [`gate`]: the epoch in force, the fence's flag and the lease clock, which every write to
//!   the primary passes.
//! - [`durability`]: strong sync. Replica pipes report the transactions they relay and the
//!   ACKs they send; commits park until a quorum of replicas has them, under the
//!   timeout policy and the STRONG/DEGRADED state. Sessions reach it through its `Door`.
//! - [`failover`]: the fence, the primary followed and its epoch, the state file that keeps
//!   them (and strong sync's positions) across a restart, and the admin token.
//! - [`cluster`]: several instances with one leader, by a lease in etcd.
//! - [`tls`]: TLS on the client leg and the primary leg, and the key for passwords.
//! - [`operator`]: the operator's commands (`strongsync status`, `fence`, `outcome`), which
//!   call the admin port.
//! - [`app`]: wiring, cancellation tree, reload and graceful stop; [`config`]: every setting
//!   defined once, read from the file, flags and environment; [`error`]: session errors and the
//!   single mapping to MySQL ERR packets.
//! - [`metrics`], [`admin`], [`health`]: Prometheus metrics, the admin HTTP port (`/metrics`,
//!   `/healthz`, `/readyz`, `/status`, whose answer [`status`] defines), and the primary's
//!   reachability; [`probe`]: strongsync's
//!   own connection to the primary, which bounds a response by the primary's binlog position.
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
