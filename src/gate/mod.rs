//! The gate every write to the primary passes: the epoch in force, the fence's flag and the
//! lease clock, which failover and the cluster move and sessions and replica pipes check.

// Each check is one atomic read on every command, so that a session never waits on strong
// sync's lock to learn it may write. The fence's state itself (when it went up, its tail) is
// strong sync's, which raises and lifts this flag with it under its lock.

mod epoch;
mod lease;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use epoch::{Epoch, OnEpoch, Refused};
pub use lease::LeaseClock;

/// The epoch in force, the fence and the lease, and the writes under way, which the fence and
/// the follow wait for.
pub struct Gate {
    /// The epoch in force, with its primary: what a new connection belongs to.
    epoch: Mutex<Arc<Epoch>>,
    /// Its number, one atomic read (it moves first when a follow begins, before the slot).
    epoch_now: AtomicU64,
    /// The fence is up over the epoch in force.
    fenced: AtomicBool,
    /// Writes to the primary under way.
    writing: AtomicUsize,
    /// Until when this instance may relay and release: always alone, while it holds the
    /// lease in a cluster.
    lease: LeaseClock,
}

/// A write to the primary under way; the fence waits for it.
#[must_use = "the write is covered only while the pass lives"]
pub struct Pass<'a>(&'a Gate);

// === impl Gate ===

impl Gate {
    /// The gate of epoch 1, unfenced, whose instance may always act.
    pub fn new() -> Self {
        Gate {
            epoch: Mutex::new(Epoch::new(1, String::new())),
            epoch_now: AtomicU64::new(1),
            fenced: AtomicBool::new(false),
            writing: AtomicUsize::new(0),
            lease: LeaseClock::always(),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Arc<Epoch>> {
        self.epoch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The epoch in force, with its primary.
    pub fn epoch(&self) -> Arc<Epoch> {
        Arc::clone(&self.slot())
    }

    /// The number of the epoch in force (one atomic read).
    pub fn epoch_number(&self) -> u64 {
        self.epoch_now.load(Ordering::SeqCst)
    }

    /// Whether the epoch in force is fenced (read by every command and every relayed batch).
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// Until when this instance may relay and release (the cluster's lease keeper moves it).
    pub fn lease(&self) -> &LeaseClock {
        &self.lease
    }

    /// Lets a write to the primary of `epoch` go, unless that epoch is over, (without
    /// `fenced_reads`) fenced, or this instance may not act. The fence and the follow wait for
    /// every pass given before them to be dropped.
    ///
    /// # Errors
    /// [`Refused`]: nothing may be written to that primary.
    pub fn pass(&self, epoch: u64, fenced_reads: bool) -> Result<Pass<'_>, Refused> {
        // Counted before it looks: a fence that then sets its flag either is seen here or sees
        // this pass and waits for it.
        self.writing.fetch_add(1, Ordering::SeqCst);
        let pass = Pass(self);
        self.admits(epoch, fenced_reads)?;
        Ok(pass)
    }

    /// Whether a statement may go to the primary of `epoch` now: the check of
    /// [`pass`](Self::pass), without counting a write (three atomic reads and, in a cluster,
    /// the clock).
    ///
    /// # Errors
    /// [`Refused`].
    pub fn admits(&self, epoch: u64, fenced_reads: bool) -> Result<(), Refused> {
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

    /// Epoch `number` on `primary` is in force, before anything connects; its replica pipes
    /// stop at once if strong sync's fence is up (`fenced`). The flag itself moves only with
    /// the fence's state ([`fence_up`](Self::fence_up), [`open`](Self::open)): a takeover
    /// starts its epoch before it reads the fence back.
    pub(crate) fn start(&self, number: u64, primary: String, fenced: bool) {
        let mut slot = self.slot();
        *slot = Epoch::new(number, primary);
        self.epoch_now.store(number, Ordering::SeqCst);
        if fenced {
            slot.mark_fenced();
        }
    }

    /// The fence is up over the epoch in force: commands are refused, and its replica pipes
    /// stop before their next write.
    pub(crate) fn fence_up(&self) {
        self.fenced.store(true, Ordering::SeqCst);
        self.slot().mark_fenced();
    }

    /// Waits (up to `limit`) until no write that passed the gate is under way; false if some
    /// still were. Only a fence or a follow waits, so it looks every millisecond rather than
    /// have every write wake it.
    pub(crate) async fn writes_done(&self, limit: Duration) -> bool {
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
    pub(crate) async fn end_writes(&self, next: u64, drain: Duration) -> bool {
        self.epoch_now.store(next, Ordering::SeqCst);
        self.writes_done(drain).await
    }

    /// Opens epoch `number` on `primary` in place of the one in force, whose connections are
    /// told to close, and lifts the fence; returns the old epoch.
    pub(crate) fn open(&self, number: u64, primary: String) -> Arc<Epoch> {
        let old = Epoch::replace(&mut self.slot(), number, primary);
        self.epoch_now.store(number, Ordering::SeqCst);
        self.fenced.store(false, Ordering::SeqCst);
        old
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("epoch", &self.epoch_number())
            .field("fenced", &self.fenced())
            .field("acting", &self.lease.may_act())
            .finish_non_exhaustive()
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.writing.fetch_sub(1, Ordering::SeqCst);
    }
}
