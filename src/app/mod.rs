//! Wires a running proxy together under a cancellation tree, applies reloaded settings, and
//! stops it with a grace period.

pub mod preflight;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::admin::{self, Admin};
use crate::cluster::{self, Cluster, ClusterError};
use crate::config::{Config, ConfigError};
use crate::durability::{CommitHook, Door, Durability, WaitObserver};
use crate::failover::{Control, ControlStartError};
use crate::health::PrimaryHealth;
use crate::metrics::Metrics;
use crate::probe::Probe;
use crate::replica::PipeContext;
use crate::session::{self, InFlight, Shared};
use crate::sharing::Pools;
use crate::tls::{self, ClientTls, PrimaryTlsConnector, TlsError};

// Shutdown has two stages. The soft stop ends the accept loop and every idle client session;
// sessions in the middle of a command (a parked commit included) go on. The hard stop, at the
// end of the grace period, ends replica dumps and the admin port: replicas keep ACKing until
// then, so parked commits can still reach their quorum.

/// A running proxy.
pub struct Proxy {
    local_addr: SocketAddr,
    admin_addr: SocketAddr,
    durability: Arc<Durability>,
    metrics: Arc<Metrics>,
    config: Mutex<Config>,
    soft: CancellationToken,
    hard: CancellationToken,
    in_flight: Arc<InFlight>,
    tracker: TaskTracker,
    /// The shared connections to the primary, closed cleanly at the end.
    pools: Arc<Pools>,
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
    /// The state file or the admin token cannot be used.
    #[error(transparent)]
    Control(#[from] ControlStartError),
    /// The cluster's settings cannot be used.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Parked commits released with an error because the grace period ended.
    pub released_parked: u64,
    /// Client sessions still running when the proxy gave up on them.
    pub unfinished: usize,
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

    /// Validates the configuration, binds the SQL and admin ports and starts serving.
    ///
    /// # Errors
    /// [`StartError`] for an invalid configuration, unusable TLS files, or a port that cannot
    /// be bound.
    pub async fn start(self) -> Result<Proxy, StartError> {
        let ProxyBuilder { config, hook } = self;
        config.validate()?;
        preflight::check_before_start(&config)?;
        tls::install_default_provider();
        let client_tls = client_tls(&config)?;
        let tls_status = tls_status(&config, client_tls.as_ref());
        let tls = client_tls.map(|t| t.acceptor);
        let admin_tls = tls.clone().filter(|_| config.admin_tls);
        let primary_tls =
            PrimaryTlsConnector::new(config.primary_tls, config.primary_tls_ca.as_deref())?;
        // The SQL port first: once the admin port answers, clients can connect.
        let (listener, local_addr) = bind(config.listen).await?;
        let (admin_listener, admin_addr) = bind(config.admin_listen).await?;
        info!(listen = %local_addr, admin = %admin_addr, tls = tls.is_some(), "strongsync listening");

        let metrics = Arc::new(Metrics::new());
        let durability = strong_sync(&config, &metrics)?;
        let (cluster, control) =
            control(&config, (local_addr, admin_addr), &durability, &metrics).await?;
        let primary_health = primary_health(&config, &control, &metrics);
        let soft = CancellationToken::new();
        let hard = CancellationToken::new();
        let in_flight = Arc::new(InFlight::default());
        let tracker = TaskTracker::new();
        let standing = campaign(&config, cluster.as_ref(), &control, &tracker, &hard);
        let door = Door::new(
            Arc::clone(&durability),
            hook(Arc::clone(&durability)),
            Arc::clone(control.session_defaults()),
        );
        let pools = Pools::new(config.sharing.clone(), door.clone(), &config, &metrics);
        let shared = Arc::new(Shared {
            config: config.clone(),
            tls,
            primary_tls: primary_tls.clone(),
            password_key: tls::PasswordKey::default(),
            door,
            replicas: pipe_context(&config, &durability, &metrics, &hard),
            metrics: Arc::clone(&metrics),
            primary_health: Arc::clone(&primary_health),
            in_flight: Arc::clone(&in_flight),
            probe: probe(&config, &control)?,
            standing: standing.clone(),
            pools: Arc::clone(&pools),
        });
        tracker.spawn(session::serve(
            listener,
            shared,
            soft.clone(),
            tracker.clone(),
        ));
        let admin = Admin {
            durability: Arc::clone(&durability),
            metrics: Arc::clone(&metrics),
            primary: primary_health,
            control: Arc::clone(&control),
            tls: tls_status,
            standing,
            cluster,
            pools: Arc::clone(&pools),
        };
        spawn_admin(&config, (admin_listener, admin_tls), admin, &tracker, &hard);
        spawn_upkeep(&config, &control, &durability, &tracker, &hard);
        Ok(Proxy {
            local_addr,
            admin_addr,
            durability,
            metrics,
            config: Mutex::new(config),
            soft,
            hard,
            in_flight,
            tracker,
            pools,
        })
    }
}

/// The TLS the client leg serves, if any, said in the log.
fn client_tls(config: &Config) -> Result<Option<ClientTls>, StartError> {
    let client_tls = ClientTls::new(&config.tls, config.failover.state_file.as_deref())?;
    match &client_tls {
        Some(t) => {
            info!(certificate = %t.cert, sha256 = %t.fingerprint, "TLS for clients");
            if config.cluster.enabled() && t.cert == tls::ClientCert::Ephemeral {
                warn!("this instance of a cluster serves a certificate of its own, made at this start: a client that checks or pins it is refused after a takeover; give every instance the same tls.cert and tls.key");
            }
        }
        None => warn!("TLS for clients is off (tls.disabled): a client that sends its password in clear is refused, and caching_sha2_password clients must ask for the server's RSA key"),
    }
    Ok(client_tls)
}

/// TLS on each leg, as `/status` reports it.
fn tls_status(config: &Config, client_tls: Option<&ClientTls>) -> admin::TlsStatus {
    admin::TlsStatus {
        clients: client_tls.map_or_else(|| "off".to_owned(), |t| t.cert.to_string()),
        clients_sha256: client_tls.map(|t| t.fingerprint.clone()),
        primary: config.primary_tls.to_string(),
    }
}

/// Strong sync, with the settings and the replicas' zones and labels given, counted in
/// `metrics`.
fn strong_sync(config: &Config, metrics: &Arc<Metrics>) -> Result<Arc<Durability>, StartError> {
    let durability = Durability::with_observer(
        config.durability.clone(),
        Arc::clone(metrics) as Arc<dyn WaitObserver>,
    );
    durability.set_topology(config.topology()?);
    Ok(durability)
}

/// Whether the primary `control` follows answers.
fn primary_health(config: &Config, control: &Control, metrics: &Metrics) -> Arc<PrimaryHealth> {
    Arc::new(PrimaryHealth::new(
        control.watch(),
        config.timeouts.primary_connect,
        metrics.primary_up.clone(),
    ))
}

/// strongsync's own connection to the primary `control` follows, if a probe account is
/// configured.
fn probe(config: &Config, control: &Control) -> Result<Option<Arc<Probe>>, StartError> {
    Ok(config.probe_account()?.map(|account| {
        Arc::new(Probe::new(
            control.watch(),
            &account,
            config.timeouts.primary_connect,
        ))
    }))
}

/// Serves the admin port on its listener (over TLS if given) until the hard stop.
fn spawn_admin(
    config: &Config,
    (listener, tls): (TcpListener, Option<tokio_rustls::TlsAcceptor>),
    admin: Admin,
    tracker: &TaskTracker,
    hard: &CancellationToken,
) {
    let listening = admin::Listening {
        max_connections: config.limits.max_admin_connections,
        request_timeout: config.timeouts.admin_request,
        tls,
    };
    tracker.spawn(admin::serve(listener, admin, listening, hard.clone()));
}

/// This instance's part in its cluster, if it is one of one, and the control of its fence,
/// epoch and primary; alone, the primary is checked now. The SQL and admin ports bound are
/// what a cluster advertises.
async fn control(
    config: &Config,
    (local_addr, admin_addr): (SocketAddr, SocketAddr),
    durability: &Arc<Durability>,
    metrics: &Arc<Metrics>,
) -> Result<(Option<Arc<Cluster>>, Arc<Control>), StartError> {
    // In a cluster the instance acts only once it holds the lease, and its state lives in
    // etcd: it reads it when it wins the lease.
    let cluster = config
        .cluster
        .enabled()
        .then(|| {
            Cluster::new(
                config,
                local_addr,
                admin_addr,
                Arc::clone(durability),
                Arc::clone(metrics),
            )
        })
        .transpose()?;
    let control = Control::start(
        config,
        Arc::clone(durability),
        Arc::clone(metrics),
        cluster.clone(),
    )?;
    if cluster.is_none() {
        control.check_primary().await?;
        info!(primary = %control.primary(), epoch = control.epoch(), "following");
    }
    Ok((cluster, control))
}

/// Where this instance stands: alone, or in its cluster, whose campaign for the lease it
/// starts.
fn campaign(
    config: &Config,
    cluster: Option<&Arc<Cluster>>,
    control: &Arc<Control>,
    tracker: &TaskTracker,
    hard: &CancellationToken,
) -> tokio::sync::watch::Receiver<cluster::Standing> {
    // The campaign runs until the hard stop, which gives the lease up for the next leader.
    match cluster {
        Some(cluster) => {
            info!(name = %cluster.me().name, endpoints = ?config.cluster.endpoints, "one of a cluster: acting only while leading it");
            let takeover = Arc::clone(control) as Arc<dyn cluster::Takeover>;
            tracker.spawn(Arc::clone(cluster).run(takeover, hard.clone()));
            cluster.standing()
        }
        None => cluster::alone(),
    }
}

/// The tasks that keep things up to date until the hard stop: the state file written behind,
/// the primary watched, strong sync's summary logged.
fn spawn_upkeep(
    config: &Config,
    control: &Arc<Control>,
    durability: &Arc<Durability>,
    tracker: &TaskTracker,
    hard: &CancellationToken,
) {
    tracker.spawn(Arc::clone(control).write_behind(config.failover.state_interval, hard.clone()));
    tracker.spawn(Arc::clone(control).watch_primary(config.failover.check_interval, hard.clone()));
    tracker.spawn(summarize(Arc::clone(durability), hard.clone()));
}

/// How often strong sync says what is wrong while something is (DEGRADED, commits parked past
/// their timeout): one summary line each, instead of a line per commit.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

async fn summarize(durability: Arc<Durability>, cancel: CancellationToken) {
    let mut every = tokio::time::interval(SUMMARY_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = every.tick() => durability.log_summary(),
        }
    }
}

/// What a connection that becomes a replica pipe is given: strong sync, which it reports to,
/// the gate, two limits and the hard stop, which ends every dump.
fn pipe_context(
    config: &Config,
    durability: &Arc<Durability>,
    metrics: &Arc<Metrics>,
    hard: &CancellationToken,
) -> PipeContext {
    PipeContext {
        durability: Arc::clone(durability),
        gate: Arc::clone(durability.gate()),
        metrics: Arc::clone(metrics),
        write_timeout: config.timeouts.client_write,
        max_held_bytes: config.limits.max_async_held_bytes,
        hard_stop: hard.clone(),
    }
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
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

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The address the SQL port is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the admin port is bound to.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Applies reloaded settings: strong sync's settings take effect for the commits made from
    /// now on, sharing's for the logins from now on. Returns the settings that changed but
    /// only take effect after a restart.
    pub fn reload(&self, new: &Config) -> Vec<&'static str> {
        let mut held = self.config.lock().unwrap_or_else(|p| p.into_inner());
        let old = &*held;
        let mut needs_restart = old.restart_needed(new);
        let mut applied = old.with_live_from(new);
        if applied.durability.visibility != old.durability.visibility && old.probe.user.is_none() {
            // The read barrier needs the probe, which only a restart starts.
            applied.durability.visibility = old.durability.visibility;
            needs_restart.push("durability.visibility");
        }
        // Zones before the rule: a rule that needs new zones is checked against them.
        if old.replica != applied.replica
            || old.durability.primary_zone != applied.durability.primary_zone
        {
            match applied.topology() {
                Ok(topology) => {
                    info!(?topology, "replica zones and labels reloaded");
                    self.durability.set_topology(topology);
                }
                // A loaded configuration has been validated; one that was not keeps its zones.
                Err(error) => warn!(%error, "replica zones and labels not reloaded"),
            }
        }
        if old.durability != applied.durability {
            info!(durability = ?applied.durability, "strong sync settings reloaded");
            self.durability.reconfigure(applied.durability.clone());
        }
        if old.sharing != applied.sharing {
            info!(sharing = ?applied.sharing, "sharing settings reloaded");
            self.pools.reconfigure(applied.sharing.clone());
        }
        // Only what changes live is taken, so a later reload compares against what runs.
        *held = applied;
        needs_restart
    }

    /// Stops: no new clients, idle sessions closed, sessions in flight (parked commits
    /// included) given up to `grace`. Parked commits still waiting near its end are released
    /// with an error saying so (counted as `shutdown`); then replicas and the admin port stop.
    pub async fn shutdown(self, grace: Duration) -> ShutdownReport {
        self.durability.begin_shutdown();
        self.soft.cancel();
        // Keep the end of the grace period for releasing what is still parked.
        let margin = (grace / 5).min(Duration::from_secs(1));
        let mut released_parked = 0;
        if !self.in_flight.wait_idle(grace - margin).await {
            let before = self.durability.status().released["shutdown"];
            self.durability.release_for_shutdown();
            self.in_flight.wait_idle(margin).await;
            released_parked = self.durability.status().released["shutdown"] - before;
        }
        let unfinished = self.in_flight.count();
        self.pools.close_all().await;
        self.hard.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(Duration::from_millis(500), self.tracker.wait()).await;
        if unfinished > 0 {
            warn!(
                unfinished,
                ?grace,
                "client sessions still running after the grace period"
            );
        }
        info!(released_parked, "stopped");
        ShutdownReport {
            released_parked,
            unfinished,
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("local_addr", &self.local_addr)
            .field("admin_addr", &self.admin_addr)
            .finish_non_exhaustive()
    }
}
