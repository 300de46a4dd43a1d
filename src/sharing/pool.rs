//! The free connections to the primary that sessions without state share, per account and
//! schema (`[sharing]`).

// Filled only by clients' logins (strongsync stores no password); what comes back past
// `sharing.pool_size` free connections is closed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use strongsync_proto::command::COM_QUIT;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::statements::{ConnStatements, StatementLimits};
use crate::config::{Config, SharingConfig};
use crate::durability::Door;
use crate::error::Error;
use crate::legs::Backend;
use crate::metrics::Metrics;
use crate::primary;

/// What makes two logins' connections interchangeable: the account, the schema they started
/// in, and everything the login settled on the primary's side.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    /// The login's user name and schema, as sent.
    pub user: Vec<u8>,
    pub schema: Vec<u8>,
    /// The login's character set (its collation id).
    pub charset: u8,
    /// The capabilities asked of the primary (MariaDB's extended ones too).
    pub capabilities: u32,
    pub extended: Option<u32>,
    /// The primary leg went over TLS.
    pub tls: bool,
}

/// The pools of one proxy.
pub(crate) struct Pools {
    /// What a reload may change live.
    config: RwLock<SharingConfig>,
    pools: Mutex<HashMap<PoolKey, Pool>>,
    /// Strong sync's door: the gate a connection is closed through, the primary's defaults.
    door: Door,
    fenced_reads: bool,
    metrics: Arc<Metrics>,
    /// The last epoch whose end the pools watch for (to close their connections of it).
    watched: Mutex<u64>,
    /// `strongsync_pool_checkouts_total` by `connection`, resolved once: each statement of a
    /// sharing session counts one.
    checkouts_own: prometheus::IntCounter,
    checkouts_other: prometheus::IntCounter,
}

/// The free connections of one key, the count of all its connections, and of the sessions
/// that share them.
#[derive(Default)]
struct Pool {
    free: Vec<Pooled>,
    members: Arc<Members>,
    /// Sessions that logged in sharing and have not ended: once none is left, the free
    /// connections serve nobody.
    sharers: usize,
}

/// How many connections a pool has anywhere (free, in use, or kept by a pinned session), and
/// the statements waiting for one to come free.
#[derive(Default)]
struct Members {
    count: AtomicUsize,
    freed: Arc<Notify>,
}

/// Counts a connection as one of its pool's, from the login that opened it until it closes:
/// a pool with none left anywhere can never give one out again.
pub(super) struct Member(Arc<Members>);

/// A connection to the primary as a pool keeps it.
pub(super) struct Pooled {
    pub backend: Backend,
    pub kept: Kept,
}

/// What a pooled connection carries besides itself: its count among its pool's connections
/// and the statements prepared on it. While a session uses the connection its legs hold the
/// connection and its [`super::Share`] this, and they go back to the pool together.
pub(super) struct Kept {
    #[expect(
        dead_code,
        reason = "held for its drop, which takes the connection off the count"
    )]
    pub member: Member,
    pub statements: ConnStatements,
}

// === impl Pools ===

impl Pools {
    /// The pools under `sharing` (reloaded later), whose connections close through `door`'s
    /// gate as `proxy`'s `failover.fenced_reads` says.
    pub(crate) fn new(
        sharing: SharingConfig,
        door: Door,
        proxy: &Config,
        metrics: &Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Pools {
            config: RwLock::new(sharing),
            pools: Mutex::new(HashMap::new()),
            door,
            fenced_reads: proxy.failover.fenced_reads,
            checkouts_own: metrics.pool_checkouts.with_label_values(&["own"]),
            checkouts_other: metrics.pool_checkouts.with_label_values(&["other"]),
            metrics: Arc::clone(metrics),
            watched: Mutex::new(0),
        })
    }

    /// Whether sessions that log in now share connections.
    pub(crate) fn enabled(&self) -> bool {
        self.config().enabled
    }

    /// The limits sessions' prepared statements live under now.
    pub(super) fn statement_limits(&self) -> StatementLimits {
        let config = self.config.read().unwrap_or_else(|e| e.into_inner());
        StatementLimits {
            per_connection: config.statements_per_connection,
            per_session: config.statements_per_session,
            bytes: config.statement_bytes,
        }
    }

    fn config(&self) -> SharingConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<PoolKey, Pool>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies reloaded settings: logins from now on share or not as `new.enabled` says, and
    /// free connections above `new.pool_size` are closed. (A pool no session shares has none
    /// free: the last to leave closed them.)
    pub(crate) fn reconfigure(self: &Arc<Self>, new: SharingConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = new.clone();
        let mut surplus = Vec::new();
        for pool in self.lock().values_mut() {
            if pool.free.len() > new.pool_size {
                surplus.extend(pool.free.drain(new.pool_size..));
            }
        }
        self.close_later(surplus, "surplus");
    }

    /// Counts a session that logged in sharing as one of `key`'s pool's, until
    /// [`Pools::leave`].
    pub(super) fn enter(&self, key: &PoolKey) {
        pool_of(&mut self.lock(), key).sharers += 1;
    }

    /// A session that logged in sharing ended. The last of a pool's closes its free
    /// connections: they could serve only later logins of the same key, and each of those
    /// brings a connection of its own.
    pub(super) fn leave(self: &Arc<Self>, key: &PoolKey) {
        let unused = {
            let mut pools = self.lock();
            let Some(pool) = pools.get_mut(key) else {
                return;
            };
            pool.sharers = pool.sharers.saturating_sub(1);
            if pool.sharers > 0 {
                return;
            }
            std::mem::take(&mut pool.free)
        };
        self.close_later(unused, "unused");
    }

    /// Closes free connections taken out of their pools (`COM_QUIT`, then the end of the
    /// stream) in a task of their own: the callers may not wait.
    fn close_later(self: &Arc<Self>, backends: Vec<Pooled>, why: &'static str) {
        if backends.is_empty() {
            return;
        }
        for _ in &backends {
            self.metrics.pool_idle.dec();
            self.closed(why);
        }
        let pools = Arc::clone(self);
        let close = async move { pools.quit(backends).await };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(close);
            }
            // No runtime (its end): dropping them resets the connections.
            Err(_) => drop(close),
        }
    }

    /// Counts a login's connection as one of `key`'s pool, with no statement on it yet.
    pub(super) fn join(&self, key: &PoolKey) -> Kept {
        let mut pools = self.lock();
        let members = &pool_of(&mut pools, key).members;
        members.count.fetch_add(1, Ordering::AcqRel);
        Kept {
            member: Member(Arc::clone(members)),
            statements: ConnStatements::default(),
        }
    }

    /// A free connection of `key`'s pool, `own` (the id of the one the session had last)
    /// first, waiting up to `sharing.max_wait` for one. A connection whose epoch is over, or
    /// that the primary spoke on or closed while it was free, is closed and another taken.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when none came free in time; [`Error::PoolGone`] when the
    /// pool has no connection left anywhere (the primary closed them while they were free).
    pub(super) async fn acquire(&self, key: &PoolKey, own: u32) -> Result<Pooled, Error> {
        let config = self.config();
        let deadline = Instant::now() + config.max_wait;
        let mut waited: Option<Instant> = None;
        loop {
            let mut dead = Vec::new();
            let freed = {
                let mut pools = self.lock();
                let pool = pool_of(&mut pools, key);
                while let Some(mut pooled) = pool.take(own) {
                    self.metrics.pool_idle.dec();
                    if pooled.backend.is_retired() || pooled.backend.spoke_unasked() {
                        dead.push(pooled);
                        continue;
                    }
                    drop(pools);
                    self.close_dead(dead);
                    if pooled.backend.id() == own {
                        self.checkouts_own.inc();
                    } else {
                        self.checkouts_other.inc();
                    }
                    if let Some(since) = waited {
                        self.metrics
                            .pool_wait
                            .with_label_values::<&str>(&[])
                            .observe(since.elapsed().as_secs_f64());
                    }
                    return Ok(pooled);
                }
                if pool.members.count.load(Ordering::Acquire) == 0 {
                    drop(pools);
                    self.close_dead(dead);
                    return Err(Error::PoolGone);
                }
                let freed = Arc::clone(&pool.members.freed).notified_owned();
                drop(pools);
                freed
            };
            self.close_dead(dead);
            waited.get_or_insert_with(Instant::now);
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            // Given back between the look and `enable`: the permit `notify_one` stored wakes it.
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                self.metrics.pool_wait_timeouts.inc();
                return Err(Error::PoolExhausted {
                    waited: config.max_wait,
                    pool_size: config.pool_size,
                });
            }
        }
    }

    /// Takes `backend` back into `key`'s pool, or closes it if its epoch is over or the pool
    /// already has `sharing.pool_size` free connections.
    pub(super) async fn give_back(self: &Arc<Self>, key: &PoolKey, mut pooled: Pooled) {
        if pooled.backend.is_retired() {
            self.closed("retired");
            primary::reset_on_close(pooled.backend.conn());
            return;
        }
        self.watch_epoch(&pooled.backend);
        {
            let mut pools = self.lock();
            let pool = pool_of(&mut pools, key);
            if pool.free.len() < self.pool_size() {
                pool.free.push(pooled);
                pool.members.freed.notify_one();
                self.metrics.pool_idle.inc();
                return;
            }
        }
        self.closed("surplus");
        self.quit(vec![pooled]).await;
    }

    /// Closes the free connections of epochs that are over, so that none outlives the follow
    /// that retired it (which waits for every connection of the old epoch to close).
    fn close_retired(&self) {
        let mut retired = Vec::new();
        {
            let mut pools = self.lock();
            for pool in pools.values_mut() {
                let (gone, kept) = std::mem::take(&mut pool.free)
                    .into_iter()
                    .partition(|pooled| pooled.backend.is_retired());
                pool.free = kept;
                retired.extend::<Vec<Pooled>>(gone);
            }
        }
        for mut pooled in retired {
            self.metrics.pool_idle.dec();
            self.closed("retired");
            primary::reset_on_close(pooled.backend.conn());
        }
    }

    /// Closes every free connection (`COM_QUIT`, then the end of the stream), at shutdown:
    /// the primary sees clients leave rather than connections drop.
    pub(crate) async fn close_all(&self) {
        let free: Vec<Pooled> = self
            .lock()
            .values_mut()
            .flat_map(|pool| std::mem::take(&mut pool.free))
            .collect();
        for _ in &free {
            self.metrics.pool_idle.dec();
        }
        self.quit(free).await;
    }

    /// Closes connections as a client leaves: `COM_QUIT`, then the end of the stream.
    async fn quit(&self, pooled: Vec<Pooled>) {
        for Pooled { mut backend, .. } in pooled {
            backend.conn().write_packet(0, &[COM_QUIT]);
            backend.close(self.door.gate(), self.fenced_reads).await;
        }
    }

    /// Watches for the end of `backend`'s epoch, once per epoch.
    fn watch_epoch(self: &Arc<Self>, backend: &Backend) {
        let number = backend.epoch_number();
        {
            let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            if *watched >= number {
                return;
            }
            *watched = number;
        }
        let retired = backend.retired_wait();
        let pools = Arc::downgrade(self);
        tokio::spawn(async move {
            retired.await;
            if let Some(pools) = pools.upgrade() {
                pools.close_retired();
            }
        });
    }

    /// Closes connections found dead on the way out of a pool (reset: the primary is gone
    /// from them, or their epoch is over).
    fn close_dead(&self, dead: Vec<Pooled>) {
        for Pooled { mut backend, .. } in dead {
            let why = if backend.is_retired() {
                "retired"
            } else {
                "closed_by_primary"
            };
            self.closed(why);
            primary::reset_on_close(backend.conn());
        }
    }

    fn closed(&self, why: &str) {
        self.metrics.pool_closed.with_label_values(&[why]).inc();
    }

    /// Whether `SET NAMES charset` gives `collation` on the primary, as its last look found.
    pub(super) fn names_give(&self, charset: &str, collation: &str) -> bool {
        self.door.session_defaults().names_give(charset, collation)
    }

    /// `sharing.pool_size`.
    pub(crate) fn pool_size(&self) -> usize {
        self.config().pool_size
    }

    /// Free connections in all pools, for `/status`.
    pub(crate) fn free(&self) -> usize {
        self.lock().values().map(|pool| pool.free.len()).sum()
    }

    /// Pools kept (each made by a login with a new key), for `/status`.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }
}

/// `key`'s pool, made if there is none yet: the key is cloned only then (a statement's
/// checkout and give-back find theirs). Making one first drops the pools nothing uses any
/// longer, so that logins with ever new keys (a client may vary its capabilities) leave no
/// more pools behind than are in use.
fn pool_of<'p>(pools: &'p mut HashMap<PoolKey, Pool>, key: &PoolKey) -> &'p mut Pool {
    if !pools.contains_key(key) {
        pools.retain(|_, pool| !pool.unused());
        pools.insert(key.clone(), Pool::default());
    }
    pools.get_mut(key).expect("made above")
}

// === impl Member ===

impl Drop for Member {
    fn drop(&mut self) {
        // The last one gone: those waiting learn there is nothing to wait for.
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.freed.notify_waiters();
        }
    }
}

// === impl Pool ===

impl Pool {
    /// No connection, free or not, and no session sharing it.
    fn unused(&self) -> bool {
        self.sharers == 0 && self.free.is_empty() && self.members.count.load(Ordering::Acquire) == 0
    }

    /// The free connection with id `own` if there is one, else the one given back last
    /// (the likeliest still in the primary's caches).
    fn take(&mut self, own: u32) -> Option<Pooled> {
        match self
            .free
            .iter()
            .position(|pooled| pooled.backend.id() == own)
        {
            Some(at) => Some(self.free.swap_remove(at)),
            None => self.free.pop(),
        }
    }
}
