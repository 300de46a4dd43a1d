//! What strong sync counts as it goes (waits parked, released by how, reads bounded, reports
//! ignored), and the observer it tells each of them to, for the metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::policy::{Outcome, State, OUTCOMES};
use crate::commit::WaitKind;

/// Hears of every commit released, with how and after how long, and of state changes (for
/// metrics).
pub trait WaitObserver: Send + Sync + 'static {
    /// A parked commit was released (or abandoned) after waiting `waited`.
    fn released(&self, outcome: Outcome, waited: Duration);

    /// A response held by the read barrier was released (or abandoned) after waiting
    /// `waited`.
    fn read_released(&self, _outcome: Outcome, _waited: Duration) {}

    /// A response went without a bound of its own: its transaction's snapshot was held.
    fn read_in_snapshot(&self) {}

    /// A commit was released that waited for `quorum` replicas (0: its session asked for
    /// none).
    fn commit_quorum(&self, _quorum: usize) {}

    /// The durability state changed to `to`.
    fn state_changed(&self, _to: State) {}
}

/// The counts, each an atomic read for `/status`, and the observer that hears of each change.
pub(super) struct Counters {
    /// Commits parked now.
    parked: AtomicUsize,
    /// Responses held by the read barrier now.
    reads_parked: AtomicUsize,
    /// Responses the read barrier had to queue (the quorum did not hold their bound at once).
    reads_queued: AtomicU64,
    /// Parked commits past their `ack_timeout` that `block` keeps waiting.
    overdue: AtomicUsize,
    /// Commits released, by how.
    released: [AtomicU64; OUTCOMES.len()],
    /// Responses the read barrier released, by how.
    reads_released: [AtomicU64; OUTCOMES.len()],
    /// Responses that went without a bound of their own, their transaction's snapshot held.
    reads_in_snapshot: AtomicU64,
    /// ACKs and reports of replica pipes of an epoch that is over, ignored.
    stale_reports: AtomicU64,
    observer: Option<Arc<dyn WaitObserver>>,
}

/// The counts at one moment, for `/status` (each as [`DurabilityStatus`](super::DurabilityStatus)
/// names it).
pub(super) struct Counts {
    pub(super) parked: usize,
    pub(super) parked_overdue: usize,
    pub(super) released: BTreeMap<&'static str, u64>,
    pub(super) reads_parked: usize,
    pub(super) reads_queued: u64,
    pub(super) reads_in_snapshot: u64,
    pub(super) reads_released: BTreeMap<&'static str, u64>,
    pub(super) stale_reports: u64,
}

// === impl Counters ===

impl Counters {
    pub(super) fn new(observer: Option<Arc<dyn WaitObserver>>) -> Self {
        Counters {
            parked: AtomicUsize::new(0),
            reads_parked: AtomicUsize::new(0),
            reads_queued: AtomicU64::new(0),
            overdue: AtomicUsize::new(0),
            released: Default::default(),
            reads_released: Default::default(),
            reads_in_snapshot: AtomicU64::new(0),
            stale_reports: AtomicU64::new(0),
            observer,
        }
    }

    /// A wait of `kind` ended as `outcome` after `waited`.
    pub(super) fn released(&self, kind: WaitKind, outcome: Outcome, waited: Duration) {
        match kind {
            WaitKind::Commit => {
                self.released[outcome.index()].fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = &self.observer {
                    observer.released(outcome, waited);
                }
            }
            WaitKind::Read => {
                self.reads_released[outcome.index()].fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = &self.observer {
                    observer.read_released(outcome, waited);
                }
            }
        }
    }

    /// A commit was released that waited for `quorum` replicas.
    pub(super) fn commit_quorum(&self, quorum: usize) {
        if let Some(observer) = &self.observer {
            observer.commit_quorum(quorum);
        }
    }

    /// A response went without a bound of its own.
    pub(super) fn read_in_snapshot(&self) {
        self.reads_in_snapshot.fetch_add(1, Ordering::Relaxed);
        if let Some(observer) = &self.observer {
            observer.read_in_snapshot();
        }
    }

    /// A wait of `kind` parks (`true`) or stops waiting (`false`).
    pub(super) fn parking(&self, kind: WaitKind, parks: bool) {
        let count = match kind {
            WaitKind::Commit => &self.parked,
            WaitKind::Read => &self.reads_parked,
        };
        if parks {
            count.fetch_add(1, Ordering::Relaxed);
        } else {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A response had to wait in the queue.
    pub(super) fn read_queued(&self) {
        self.reads_queued.fetch_add(1, Ordering::Relaxed);
    }

    /// A commit `block` keeps waiting goes past its `ack_timeout` (`true`), or stops waiting
    /// (`false`).
    pub(super) fn overdue(&self, past: bool) {
        if past {
            self.overdue.fetch_add(1, Ordering::Relaxed);
        } else {
            self.overdue.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A replica pipe of an epoch that is over reported something, ignored.
    pub(super) fn stale_report(&self) {
        self.stale_reports.fetch_add(1, Ordering::Relaxed);
    }

    /// Parked commits past their `ack_timeout` that `block` keeps waiting, now.
    pub(super) fn parked_overdue(&self) -> usize {
        self.overdue.load(Ordering::Relaxed)
    }

    pub(super) fn stale_reports(&self) -> u64 {
        self.stale_reports.load(Ordering::Relaxed)
    }

    /// Every count as it stands (each read on its own: the counts move independently).
    pub(super) fn counts(&self) -> Counts {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Counts {
            parked: self.parked.load(Ordering::Relaxed),
            parked_overdue: self.parked_overdue(),
            released: by_outcome(&self.released),
            reads_parked: self.reads_parked.load(Ordering::Relaxed),
            reads_queued: load(&self.reads_queued),
            reads_in_snapshot: load(&self.reads_in_snapshot),
            reads_released: by_outcome(&self.reads_released),
            stale_reports: load(&self.stale_reports),
        }
    }
}

fn by_outcome(counts: &[AtomicU64; OUTCOMES.len()]) -> BTreeMap<&'static str, u64> {
    OUTCOMES
        .iter()
        .zip(counts)
        .map(|(o, n)| (o.label(), n.load(Ordering::Relaxed)))
        .collect()
}
