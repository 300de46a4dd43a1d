//! Until when this instance may act (relay to the primary and to replicas, release commits),
//! on its own monotonic clock.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

/// The deadline, shared by the gate's readers and the lease's keeper. Alone (no `[cluster]`) an
/// instance always may act. In a cluster it may only while it holds the leader's lease, less a
/// margin, so that it has stopped before the lease can have expired in etcd and another instance
/// won it. The clock is read at every check, so a process that was paused (SIGSTOP, a frozen VM)
/// past its deadline does nothing when it wakes, before any task of its own has run.
#[derive(Debug)]
pub struct LeaseClock {
    /// The clock's zero.
    base: Instant,
    /// Nanoseconds after `base` until which acting is allowed; 0: not now; `u64::MAX`: always.
    until: AtomicU64,
}

impl LeaseClock {
    /// Acting is always allowed: one instance on its own.
    pub fn always() -> Self {
        LeaseClock {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
        }
    }

    /// Acting is not allowed until a lease is held.
    pub fn not_yet() -> Self {
        LeaseClock {
            base: Instant::now(),
            until: AtomicU64::new(0),
        }
    }

    /// Whether acting is allowed now.
    pub fn may_act(&self) -> bool {
        match self.until.load(Ordering::SeqCst) {
            u64::MAX => true,
            0 => false,
            until => self.nanos(Instant::now()) < until,
        }
    }

    /// Acting is allowed until `deadline` (an instance that renewed its lease).
    pub fn allow_until(&self, deadline: Instant) {
        self.until.store(
            self.nanos(deadline).clamp(1, u64::MAX - 1),
            Ordering::SeqCst,
        );
    }

    /// Acting is not allowed any more (the lease is lost or given up).
    pub fn stop(&self) {
        self.until.store(0, Ordering::SeqCst);
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn acting_ends_at_the_deadline_however_the_time_passed() {
        let clock = LeaseClock::not_yet();
        assert!(!clock.may_act());
        clock.allow_until(Instant::now() + Duration::from_secs(8));
        assert!(clock.may_act());
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(clock.may_act());
        // Nothing renewed it: as after a pause, the next look says no.
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!clock.may_act());
        clock.allow_until(Instant::now() + Duration::from_secs(8));
        assert!(clock.may_act());
        clock.stop();
        assert!(!clock.may_act());
        assert!(LeaseClock::always().may_act());
    }
}
