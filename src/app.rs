//! Wires a running proxy together: binds the SQL port, starts the accept loop under a
//! cancellation tree, and stops it with a grace period for the sessions in flight.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::commit::{CommitHook, ReleaseAtOnce};
use crate::config::{Config, ConfigError};
use crate::frontend::{self, Shared};
use crate::tls::{self, TlsError};

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    local_addr: SocketAddr,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

/// Why the proxy could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The SQL port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Builds a [`Proxy`].
pub struct ProxyBuilder {
    config: Config,
    hook: Arc<dyn CommitHook>,
}

// === impl ProxyBuilder ===

impl ProxyBuilder {
    /// Sets what decides when a response that reported a commit may reach the client
    /// (default: at once).
    pub fn commit_hook(mut self, hook: Arc<dyn CommitHook>) -> Self {
        self.hook = hook;
        self
    }

    /// Validates the configuration, binds the SQL port and starts accepting clients.
    ///
    /// # Errors
    /// [`StartError`] for an invalid configuration, unusable TLS files, or a port that cannot
    /// be bound.
    pub async fn start(self) -> Result<Proxy, StartError> {
        let ProxyBuilder { config, hook } = self;
        config.validate()?;
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        info!(listen = %local_addr, primary = %config.primary, tls = tls.is_some(), "strongsync listening");
        let shared = Arc::new(Shared { config, tls, hook });
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        tracker.spawn(frontend::serve(
            listener,
            shared,
            cancel.child_token(),
            tracker.clone(),
        ));
        Ok(Proxy {
            local_addr,
            cancel,
            tracker,
        })
    }
}

// === impl Proxy ===

impl Proxy {
    /// A proxy for `config`.
    pub fn builder(config: Config) -> ProxyBuilder {
        ProxyBuilder {
            config,
            hook: Arc::new(ReleaseAtOnce),
        }
    }

    /// The address the SQL port is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, tells every session to finish, and waits up to `grace` for them.
    /// Returns the number of tasks still running when the grace period ran out.
    pub async fn shutdown(self, grace: Duration) -> usize {
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let left = self.tracker.len();
            warn!(
                left,
                ?grace,
                "sessions still running after the grace period"
            );
            return left;
        }
        0
    }
}
