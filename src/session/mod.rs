//! The SQL port: accepts client connections and runs one session per client, each with its
//! own connection to the primary.

// A connection goes through phases, each a type that owns what it needs and hands it on: a
// [`login::Login`], then a [`phases::Session`] that relays commands (one
// [`relay::ResponseRelay`] per response, with the session's commit tracker, snapshot cover and
// read barrier), and — if the primary accepts its binlog dump — a
// [`crate::replica::ReplicaPipe`].

mod commits;
mod dump;
mod in_flight;
mod listener;
mod login;
mod phases;
mod relay;
mod retired;

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;

use crate::config::Config;
use crate::durability::{Door, SessionQuorum};
use crate::flavour::{ProxyState, Tracker};
use crate::health::PrimaryHealth;
use crate::metrics::Metrics;
use crate::probe::Probe;
use crate::tracking_defaults::SessionDefaults;

pub(crate) use in_flight::InFlight;
pub(crate) use listener::serve;

use crate::replica::PipeContext;
use crate::sharing::Pools;

/// What every session of one proxy shares. Sessions hold it behind an `Arc`: nothing in it
/// changes after the proxy starts.
pub(crate) struct Shared {
    /// The settings the proxy started with (strong sync's live ones are in `durability`).
    pub config: Config,
    /// Present when the client leg offers TLS.
    pub tls: Option<TlsAcceptor>,
    /// How the sessions' connections to the primary use TLS.
    pub primary_tls: crate::tls::PrimaryTlsConnector,
    /// The RSA key clients on plain connections encrypt their passwords with where the
    /// primary wants them in clear.
    pub password_key: crate::tls::PasswordKey,
    /// The one way into strong sync: a commit's wait, the policy, the write gate.
    pub door: Door,
    /// What a connection that becomes a replica pipe is given (strong sync, which the pipe
    /// reports to, among it).
    pub replicas: PipeContext,
    pub metrics: Arc<Metrics>,
    /// Whether the primary answered lately, as far as sessions and health checks have seen.
    pub primary_health: Arc<PrimaryHealth>,
    /// Client sessions in flight, for the shutdown to wait on.
    pub in_flight: Arc<InFlight>,
    /// strongsync's own connection to the primary, if an account is configured.
    pub probe: Option<Arc<Probe>>,
    /// Where this instance stands in its cluster (alone without one): who leads, for the
    /// clients it turns away.
    pub standing: tokio::sync::watch::Receiver<crate::cluster::Standing>,
    /// The connections to the primary that sessions without state share (`[sharing]`).
    pub pools: Arc<Pools>,
}

// === impl Shared ===

impl Shared {
    /// Bounds the quorum a session asks for by the settings, once after each change, and
    /// counts an ask that is not taken as it was (the bound applies when its commits wait).
    fn take_in_quorum(&self, tracker: &mut Tracker) {
        let Some(asked) = tracker.quorum_change() else {
            return;
        };
        let applies = self.door.session_quorum(asked);
        match applies {
            SessionQuorum::BelowFloor(_) => self.metrics.session_quorum_refused("below_floor"),
            SessionQuorum::AboveMax(_) => self.metrics.session_quorum_refused("above_max"),
            SessionQuorum::Taken(_) => {}
        }
        tracing::debug!(?asked, applies = applies.get(), "session quorum");
    }
}

// === impl ProxyState for Door ===

/// Where the flavour and strong sync meet: a session's tracker reads strong sync's live state
/// through its door, and sees nothing else of it.
impl ProxyState for Door {
    fn snapshot_reads(&self) -> bool {
        Door::snapshot_reads(self)
    }

    fn commits_untracked(&self) -> bool {
        Door::commits_untracked(self)
    }

    fn session_defaults(&self) -> &SessionDefaults {
        Door::session_defaults(self)
    }
}
