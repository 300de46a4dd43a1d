//! Several strongsync instances, one leader: the lease in etcd that says which instance may act
//! ([`lease`]), and where every instance stands for the SQL port, `/readyz` and `/status`.
//! etcd decides; strongsync runs no consensus of its own.

mod lease;
mod members;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

use crate::config::Config;
use crate::durability::Durability;
use crate::metrics::Metrics;

pub use store::{create_state, StoreError};

/// How long one call to etcd may take before the instance counts etcd as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// An instance as it advertises itself: the leader key's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its name in the cluster.
    pub name: String,
    /// Its SQL port, as clients and replicas reach it.
    pub advertise: String,
    /// Its admin port.
    pub admin: String,
}

/// Where this instance stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// No `[cluster]`: it runs alone and always acts.
    Alone,
    /// It holds the leader's lease.
    Leading {
        /// The lease's id in etcd.
        lease: i64,
        /// The lease's time to live.
        ttl: Duration,
    },
    /// Another instance leads (if one is known).
    Following {
        /// The leader.
        leader: Option<Member>,
    },
    /// etcd does not answer.
    Unreachable {
        /// What the last call said.
        problem: String,
    },
}

/// Why the cluster could not be joined.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// A TLS file for etcd could not be read.
    #[error("cluster: cannot read {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The settings are wrong.
    #[error("cluster: {0}")]
    Config(#[from] crate::config::ConfigError),
}

/// Why a takeover failed, as its implementation says.
pub type TakeoverFailed = Box<dyn std::error::Error + Send + Sync>;

/// What a new leader does before it acts: read the state the last leader left, raise the
/// epoch, and follow the primary or promote a replica. Until it is done, the instance holds
/// the lease but relays and releases nothing.
pub trait Takeover: Send + Sync {
    /// Takes over; an error gives the lease up again (and says why).
    fn take_over(&self) -> Pin<Box<dyn Future<Output = Result<(), TakeoverFailed>> + Send + '_>>;

    /// The instance no longer leads: what it holds in memory may be older than what the next
    /// leader writes, and must not be written again before another takeover reads it.
    fn stepped_down(&self);
}

/// This instance's part in the cluster.
pub struct Cluster {
    endpoints: Vec<String>,
    options: ConnectOptions,
    /// Connected by [`run`](Self::run).
    client: tokio::sync::OnceCell<Client>,
    prefix: String,
    me: Member,
    ttl: Duration,
    margin: Duration,
    durability: Arc<Durability>,
    metrics: Arc<Metrics>,
    standing: watch::Sender<Standing>,
}

impl Standing {
    /// The leader, as this instance knows it.
    pub fn leader(&self) -> Option<&Member> {
        match self {
            Standing::Following { leader } => leader.as_ref(),
            _ => None,
        }
    }

    /// A word for `/status` and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Standing::Alone => "alone",
            Standing::Leading { .. } => "leading",
            Standing::Following { .. } => "following",
            Standing::Unreachable { .. } => "unreachable",
        }
    }
}

impl Cluster {
    /// Prepares this instance's part in the cluster `config` describes (it leads nothing until
    /// [`run`](Self::run) wins the lease): `listen` and `admin` are its bound ports, advertised
    /// unless `[cluster] advertise` says otherwise. The connection to etcd is made lazily, so
    /// an instance starts (and refuses clients, naming the problem) while etcd is away.
    ///
    /// # Errors
    /// [`ClusterError`]: a TLS file that cannot be read, an account that is half given.
    pub fn new(
        config: &Config,
        listen: SocketAddr,
        admin: SocketAddr,
        durability: Arc<Durability>,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, ClusterError> {
        let c = &config.cluster;
        let advertise = c.advertise.clone().unwrap_or_else(|| listen.to_string());
        let me = Member {
            name: c.name.clone().unwrap_or_else(|| advertise.clone()),
            advertise,
            admin: admin.to_string(),
        };
        let options = connect_options(config)?;
        durability.gate().lease().stop();
        metrics.cluster_member.set(1);
        Ok(Arc::new(Cluster {
            endpoints: c.endpoints.clone(),
            options,
            client: tokio::sync::OnceCell::new(),
            prefix: c.prefix.trim_end_matches('/').to_owned(),
            me,
            ttl: c.lease_ttl,
            margin: c.lease_margin,
            durability,
            metrics,
            standing: watch::Sender::new(Standing::Following { leader: None }),
        }))
    }

    /// Where this instance stands, as it changes.
    pub fn standing(&self) -> watch::Receiver<Standing> {
        self.standing.subscribe()
    }

    /// This instance, as it advertises itself.
    pub fn me(&self) -> &Member {
        &self.me
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }
}

/// How this instance connects to the etcd of `config`: its TLS and account, short timeouts,
/// and only to a member that has a leader.
///
/// # Errors
/// [`ClusterError`]: a TLS file that cannot be read, an account that is half given.
pub fn connect_options(config: &Config) -> Result<ConnectOptions, ClusterError> {
    let c = &config.cluster;
    let mut options = ConnectOptions::new()
        .with_connect_timeout(CALL_TIMEOUT)
        .with_timeout(CALL_TIMEOUT)
        .with_keep_alive(Duration::from_secs(1), CALL_TIMEOUT)
        // A member cut off from the others answers nothing rather than stale state.
        .with_require_leader(true);
    if let Some(account) = c.account()? {
        options = options.with_user(account.user, account.password);
    }
    if c.ca.is_some() || c.cert.is_some() {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|source| ClusterError::Read {
                path: path.to_owned(),
                source,
            })
        };
        let mut tls = TlsOptions::new();
        if let Some(ca) = &c.ca {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&c.cert, &c.key) {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        options = options.with_tls(tls);
    }
    Ok(options)
}

/// A watch of where an instance without a cluster stands: alone, for ever.
pub fn alone() -> watch::Receiver<Standing> {
    watch::Sender::new(Standing::Alone).subscribe()
}
