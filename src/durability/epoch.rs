//! Epochs: each primary strongsync follows opens one, and every connection — a client session's to
//! the primary, a replica pipe's dump — belongs to the epoch it was opened in.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::LeaseClock;

/// One epoch: its number, the primary followed in it, and what fires when it ends.
///
/// A connection of an epoch that was fenced writes nothing more to anyone; one of an epoch that is
/// over (a follow retired its primary) never reaches that primary again, whether it is dead or very
/// much alive. Each epoch has two tokens its connections wait on, and the number of the epoch in
/// force is one atomic read for the checks on every command.
///
/// Writes to the primary pass a gate ([`Durability::pass`](super::Durability::pass)): the fence
/// (and the follow after it) waits until no command that passed before it is still being
/// written, so that once it returns nothing more goes to the old primary.
#[derive(Debug)]
pub struct Epoch {
    number: u64,
    primary: String,
    /// Fires once the epoch's primary is fenced (and, at the latest, when the epoch is over).
    fenced: CancellationToken,
    /// Fires once strongsync follows the next primary.
    retired: CancellationToken,
    /// Connections to its primary open now (each an [`OnEpoch`]).
    open: AtomicUsize,
    /// Told when the last of them closes.
    all_closed: Notify,
}

/// A connection to an epoch's primary (a session's, a replica pipe's), counted while it lives:
/// held next to the connection and dropped with it, so that the follow that ends the epoch can
/// wait until none is left, and nothing written to the old primary can arrive after it.
#[derive(Debug)]
pub struct OnEpoch(Arc<Epoch>);

/// Why a write to the primary may not go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The epoch's primary is fenced.
    Fenced {
        /// The fenced epoch.
        epoch: u64,
    },
    /// The epoch is over: strongsync follows the primary of `now`.
    Retired {
        /// The connection's epoch.
        epoch: u64,
        /// The epoch in force.
        now: u64,
    },
    /// This instance does not hold its cluster's lease now: it acts on nothing.
    NotLeading {
        /// The connection's epoch.
        epoch: u64,
    },
}

/// A write to the primary under way; the fence waits for it.
#[must_use = "the write is covered only while the pass lives"]
pub struct Pass<'a>(&'a Gate);

/// The gate every write to the primary passes ([`Durability::pass`](super::Durability::pass)):
/// the epoch in force, the fence and the lease, each one atomic read for the checks on every
/// command, and the writes under way, which the fence and the follow wait for.
pub(super) struct Gate {
    /// Mirrors the fence in force (strong sync's state, under its lock).
    fenced: AtomicBool,
    /// Mirrors the number of the epoch in force.
    epoch_now: AtomicU64,
    /// Writes to the primary under way.
    writing: AtomicUsize,
    /// Until when this instance may relay and release: always alone, while it holds the
    /// lease in a cluster.
    lease: LeaseClock,
}

// === impl Epoch ===

impl Epoch {
    pub(super) fn new(number: u64, primary: String) -> Arc<Self> {
        Arc::new(Epoch {
            number,
            primary,
            fenced: CancellationToken::new(),
            retired: CancellationToken::new(),
            open: AtomicUsize::new(0),
            all_closed: Notify::new(),
        })
    }

    /// Counts a connection to this epoch's primary until the returned guard is dropped.
    pub fn connection(self: &Arc<Self>) -> OnEpoch {
        self.open.fetch_add(1, Ordering::SeqCst);
        OnEpoch(Arc::clone(self))
    }

    /// Waits up to `limit` until no connection to its primary is open; false if some still
    /// were.
    pub(super) async fn connections_closed(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the count is read, so a close in between is not missed.
            let closed = self.all_closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.open.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, closed).await.is_err() {
                return self.open.load(Ordering::SeqCst) == 0;
            }
        }
    }

    /// Connections to its primary open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Its number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The primary followed in it: `HOST:PORT` or a Unix socket's path.
    pub fn primary(&self) -> &str {
        &self.primary
    }

    /// Resolves once the epoch's primary is fenced or the epoch is over: a replica pipe
    /// writes nothing more. Made once per connection (on a token of its own, so connections
    /// polling it do not contend) and polled as often as it likes.
    pub fn fenced(&self) -> WaitForCancellationFutureOwned {
        self.fenced.child_token().cancelled_owned()
    }

    /// Resolves once the epoch is over: a session's connection to its primary is closed.
    pub fn retired(&self) -> WaitForCancellationFutureOwned {
        self.retired.child_token().cancelled_owned()
    }

    /// Whether the epoch is over.
    pub fn is_retired(&self) -> bool {
        self.retired.is_cancelled()
    }

    /// Its primary is fenced: its replica pipes stop.
    pub(super) fn mark_fenced(&self) {
        self.fenced.cancel();
    }

    /// Opens epoch `number` on `primary` in `slot`, in place of the epoch there, whose
    /// connections are told to close; returns the old one.
    pub(super) fn replace(slot: &mut Arc<Epoch>, number: u64, primary: String) -> Arc<Epoch> {
        let old = std::mem::replace(slot, Epoch::new(number, primary));
        old.fenced.cancel();
        old.retired.cancel();
        old
    }
}

// === impl Gate ===

impl Gate {
    pub(super) fn new() -> Self {
        Gate {
            fenced: AtomicBool::new(false),
            epoch_now: AtomicU64::new(1),
            writing: AtomicUsize::new(0),
            lease: LeaseClock::always(),
        }
    }

    /// The number of the epoch in force.
    pub(super) fn epoch_number(&self) -> u64 {
        self.epoch_now.load(Ordering::SeqCst)
    }

    /// Whether the epoch in force is fenced.
    pub(super) fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// The fence goes up (`true`) or lifts.
    pub(super) fn set_fenced(&self, fenced: bool) {
        self.fenced.store(fenced, Ordering::SeqCst);
    }

    /// Epoch `number` is in force, before anything connects.
    pub(super) fn start(&self, number: u64) {
        self.epoch_now.store(number, Ordering::SeqCst);
    }

    pub(super) fn lease(&self) -> &LeaseClock {
        &self.lease
    }

    /// See [`Durability::pass`](super::Durability::pass).
    pub(super) fn pass(&self, epoch: u64, fenced_reads: bool) -> Result<Pass<'_>, Refused> {
        // Counted before it looks: a fence that then sets its flag either is seen here or sees
        // this pass and waits for it.
        self.writing.fetch_add(1, Ordering::SeqCst);
        let pass = Pass(self);
        self.admits(epoch, fenced_reads)?;
        Ok(pass)
    }

    /// See [`Durability::admits`](super::Durability::admits).
    pub(super) fn admits(&self, epoch: u64, fenced_reads: bool) -> Result<(), Refused> {
        let now = self.epoch_now.load(Ordering::SeqCst);
        if now != epoch {
            return Err(Refused::Retired { epoch, now });
        }
        if self.fenced.load(Ordering::SeqCst) && !fenced_reads {
            return Err(Refused::Fenced { epoch });
        }
        if !self.lease.may_act() {
            return Err(Refused::NotLeading { epoch });
        }
        Ok(())
    }

    /// Waits (up to `limit`) until no write that passed the gate is under way; false if some
    /// still were. Only a fence or a follow waits, so it looks every millisecond rather than
    /// have every write wake it.
    pub(super) async fn writes_done(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.writing.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Refuses every write to the primary of the epoch in force from now on (the follow that
    /// ends it has begun: `next` is in force), and waits up to `drain` for those under way;
    /// false if some still were.
    pub(super) async fn end_writes(&self, next: u64, drain: Duration) -> bool {
        self.epoch_now.store(next, Ordering::SeqCst);
        self.writes_done(drain).await
    }
}

impl OnEpoch {
    /// The epoch itself.
    pub fn arc(&self) -> &Arc<Epoch> {
        &self.0
    }
}

impl Deref for OnEpoch {
    type Target = Epoch;

    fn deref(&self) -> &Epoch {
        &self.0
    }
}

impl Drop for OnEpoch {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.all_closed.notify_waiters();
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.writing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Fenced { epoch } => write!(f, "primary of epoch {epoch} fenced"),
            Refused::Retired { epoch, now } => {
                write!(f, "epoch {epoch} is over (strongsync is in epoch {now})")
            }
            Refused::NotLeading { epoch } => {
                write!(
                    f,
                    "epoch {epoch}: strongsync does not hold its cluster's lease"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_end_of_an_epoch_waits_for_its_last_connection_and_no_longer_than_its_bound() {
        let epoch = Epoch::new(1, "db:3306".to_owned());
        assert!(epoch.connections_closed(Duration::ZERO).await);
        let (a, b) = (epoch.connection(), epoch.connection());
        assert_eq!(epoch.open_connections(), 2);
        // Still open at the bound: it says so.
        assert!(!epoch.connections_closed(Duration::from_secs(1)).await);
        let waiting = tokio::spawn({
            let epoch = Arc::clone(&epoch);
            async move { epoch.connections_closed(Duration::from_secs(60)).await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one connection is still open");
        let closed_at = tokio::time::Instant::now();
        drop(b);
        assert!(waiting.await.unwrap());
        // Told by the last close, not by its bound (the paused clock did not move).
        assert_eq!(tokio::time::Instant::now(), closed_at);
        assert_eq!(epoch.open_connections(), 0);
    }
}
