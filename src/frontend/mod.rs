//! The SQL port: accepts client connections and runs one session per client, each with its
//! own connection to the primary.

mod barrier;
mod commits;
mod held_back;
mod listener;
mod login;
mod own_query;
mod pipe;
mod relay;
mod replica;
mod session;
mod snapshot;
mod tracking;

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;

use crate::commit::CommitHook;
use crate::config::Config;
use crate::durability::Durability;
use crate::metrics::Metrics;

pub(crate) use listener::serve;

/// What every session of one proxy shares.
pub(crate) struct Shared {
    pub config: Config,
    /// Present when the client leg offers TLS.
    pub tls: Option<TlsAcceptor>,
    /// Decides when a response that reported a commit may be released.
    pub hook: Arc<dyn CommitHook>,
    /// Strong sync: replica pipes report to it.
    pub durability: Arc<Durability>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether the primary answered lately, as far as sessions and health checks have seen.
    pub primary_health: Arc<crate::health::PrimaryHealth>,
    /// Fires at the end of the shutdown grace period (replica dumps stop then).
    pub hard_stop: tokio_util::sync::CancellationToken,
    /// Client sessions in flight, for the shutdown to wait on.
    pub in_flight: Arc<crate::app::InFlight>,
    /// strongsync's own connection to the primary, if an account is configured.
    pub probe: Option<Arc<crate::probe::Probe>>,
}
