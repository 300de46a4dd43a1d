//! Client sessions in flight, counted so that shutdown knows when they are done. A replica's
//! dump is not one: shutdown ends dumps (the hard stop) rather than waiting for them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// Client sessions that are not replica dumps, counted so shutdown knows when they are done.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// A session's place in [`InFlight`], given up when it ends or becomes a replica dump.
pub(crate) struct InFlightGuard(Arc<InFlight>);

// === impl InFlight ===

impl InFlight {
    /// Counts a session in.
    pub(crate) fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(Arc::clone(self))
    }

    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until no session is in flight, or `limit` passes; true if none is.
    pub(crate) async fn wait_idle(&self, limit: Duration) -> bool {
        let idle = async {
            loop {
                let notified = self.idle.notified();
                if self.count() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, idle).await.is_ok()
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
