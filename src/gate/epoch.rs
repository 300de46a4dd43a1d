//! Epochs: each primary strongsync follows opens one, and every connection — a client session's to
//! the primary, a replica pipe's dump — belongs to the epoch it was opened in.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// One epoch: its number, the primary followed in it, and what fires when it ends.
///
/// A connection of an epoch that was fenced writes nothing more to anyone; one of an epoch that is
/// over (a follow retired its primary) never reaches that primary again, whether it is dead or very
/// much alive. Each epoch has two tokens its connections wait on, and the number of the epoch in
/// force is one atomic read for the checks on every command.
///
/// Writes to the primary pass the [`Gate`](super::Gate): the fence (and the follow after it)
/// waits until no command that passed before it is still being written, so that once it
/// returns nothing more goes to the old primary.
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

// === impl Epoch ===

impl Epoch {
    pub(crate) fn new(number: u64, primary: String) -> Arc<Self> {
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
    pub(crate) async fn connections_closed(&self, limit: Duration) -> bool {
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
