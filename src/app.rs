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

use crate::commit::CommitHook;
use crate::config::{Config, ConfigError};
use crate::durability::Durability;
use crate::frontend::{self, Shared};
use crate::tls::{self, TlsError};

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    local_addr: SocketAddr,
    durability: Arc<Durability>,
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
    hook: HookFactory,
}

/// Makes the commit hook from the strong-sync service.
type HookFactory = Box<dyn FnOnce(Arc<Durability>) -> Arc<dyn CommitHook> + Send>;

// === impl ProxyBuilder ===

impl ProxyBuilder {
    /// Sets what decides when a response that reported a commit may reach the client, made
    /// from the strong-sync service (by default the service itself: park until the quorum).
    /// Tests use it to observe commits on the way.
    pub fn commit_hook(
        mut self,
        hook: impl FnOnce(Arc<Durability>) -> Arc<dyn CommitHook> + Send + 'static,
    ) -> Self {
        self.hook = Box::new(hook);
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
        let durability = Durability::new(config.durability.clone());
        let hook = hook(Arc::clone(&durability));
        let shared = Arc::new(Shared {
            config,
            tls,
            hook,
            durability: Arc::clone(&durability),
        });
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
            durability,
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
            hook: Box::new(|durability| Arc::new(durability)),
        }
    }

    /// Strong sync's state: replicas, quorum position, parked commits.
    pub fn durability(&self) -> &Arc<Durability> {
        &self.durability
    }

    /// The address the SQL port is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, tells every session to finish, and waits up to `grace` for them.
    /// Returns the number of tasks still running when the grace period ran out.
    pub async fn shutdown(self, grace: Duration) -> usize {
        self.durability.begin_shutdown();
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
