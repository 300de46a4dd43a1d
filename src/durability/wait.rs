//! A commit waiting for its quorum: until every transaction it reported is held by `quorum`
//! replicas — by position once its end is known, or by the GTIDs replicas connected with —
//! under the timeout policy, with the settings read afresh at every look.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::{Gtid, MariaGtid};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::status::UnresolvedRelease;
use super::waiters::{wake, Key};
use super::{
    Durability, DurabilityConfig, DurableState, NotAcknowledged, OnTimeout, Outcome, WithoutQuorum,
};
use crate::commit::{Commit, Release, Unresolved};
use crate::deadline;

/// What a look at the shared state decided.
enum Look {
    /// Done.
    Released(Outcome, Release),
    /// Wait for this wake-up (or the deadline).
    Wait(Registration),
    /// The quorum cannot come (no replicas, `without_quorum = immediate`): apply the policy.
    NoQuorum,
}

/// A parked commit's entry in the wait queue; dropping it takes the entry out (the commit was
/// released, the client went away, or the proxy stopped).
struct Registration {
    durability: Arc<Durability>,
    key: Key,
    wake: oneshot::Receiver<()>,
}

/// Counts the commit as parked for as long as it waits (and as overdue once `block` keeps it
/// past its timeout), and as abandoned if its future is dropped before it was released.
struct Parked {
    durability: Arc<Durability>,
    since: Instant,
    overdue: bool,
    done: bool,
}

// === impl Durability (waiting) ===

impl Durability {
    /// Waits until `commit` may be acknowledged to the client, as the policy says.
    pub(super) async fn wait(self: Arc<Self>, commit: Commit) -> Release {
        if self.config().passthrough {
            return Release::Proceed;
        }
        let gtids: Vec<MariaGtid> = commit
            .gtids
            .iter()
            .filter_map(|g| match g {
                Gtid::Maria(g) => Some(*g),
                Gtid::MySql(_) => None,
            })
            .collect();
        let unresolved = commit
            .unresolved
            .clone()
            .or_else(|| (gtids.len() < commit.gtids.len()).then_some(Unresolved::NotFollowed));
        let mut parked = Parked::new(&self);
        let (outcome, release) = self.decide(&gtids, &mut parked).await;
        // What was learnt was waited for; the rest could not be.
        let outcome = match (&unresolved, outcome) {
            (Some(_), Outcome::Quorum) => Outcome::Unresolved,
            (_, outcome) => outcome,
        };
        parked.done = true;
        let waited = parked.since.elapsed();
        self.count(outcome, waited);
        let listed = list(&gtids);
        if let Some(reason) = unresolved {
            warn!(connection_id = commit.connection_id, %reason, gtids = %listed, ?waited, "commit released without knowing everything it committed");
            self.lock().unresolved(UnresolvedRelease {
                connection_id: commit.connection_id,
                reason: reason.to_string(),
                gtids: listed,
                at: Instant::now(),
            });
        } else if outcome != Outcome::Quorum {
            debug!(connection_id = commit.connection_id, gtids = %listed, ?waited, outcome = outcome.label(), "commit released without quorum");
        }
        release
    }

    async fn decide(
        self: &Arc<Self>,
        gtids: &[MariaGtid],
        parked: &mut Parked,
    ) -> (Outcome, Release) {
        loop {
            let config = self.config();
            let registration = match self.look(gtids, &config) {
                Look::Released(outcome, release) => return (outcome, release),
                Look::NoQuorum => None,
                Look::Wait(registration) => Some(registration),
            };
            // The timeout follows the settings in force, not those the commit parked under.
            let deadline = parked.since + config.ack_timeout;
            if registration.is_none() || Instant::now() >= deadline {
                if let Some(done) = self.timed_out(gtids, parked, &config) {
                    return done;
                }
            }
            // Past its deadline under `block`, only a wake-up (or a reload) moves it.
            let timer = (!parked.overdue).then_some(deadline);
            tokio::select! {
                () = woken(registration) => {}
                () = deadline::sleep_until(timer) => {}
            }
        }
    }

    /// Looks at the shared state: released, or registered to be woken.
    fn look(self: &Arc<Self>, gtids: &[MariaGtid], config: &DurabilityConfig) -> Look {
        let mut inner = self.lock();
        if self.releasing.load(Ordering::Relaxed) {
            let error = NotAcknowledged {
                gtids: list(gtids),
                quorum: config.quorum,
                waited: Duration::ZERO,
                shutdown: true,
            };
            return Look::Released(Outcome::Shutdown, Release::Fail(error));
        }
        if let DurableState::Degraded { released, .. } = &mut inner.state {
            released.record(gtids);
            return Look::Released(Outcome::Degraded, Release::Proceed);
        }
        if config.passthrough {
            // Switched to relaying only while this commit was parked: it stops waiting too.
            return Look::Released(Outcome::Degraded, Release::Proceed);
        }
        let k = config.quorum;
        let short = inner.registry.semisync_count() < k;
        if short
            && config.without_quorum == WithoutQuorum::Immediate
            && config.on_timeout != OnTimeout::Block
        {
            return Look::NoQuorum;
        }
        let mut target = None;
        let mut by_connect_state = false;
        for gtid in gtids {
            let (holders, end) = inner.holders(gtid);
            if holders.count >= k {
                continue;
            }
            let Some(end) = end else {
                // Not relayed yet: wait to learn where it ends.
                let (key, rx) = inner.waiters.on_gtid(*gtid);
                return Look::Wait(self.registration(key, rx));
            };
            target = target.max(Some(end));
            by_connect_state |= holders.by_connect_state > 0;
        }
        let Some(target) = target else {
            for gtid in gtids {
                inner.acknowledged.advance(*gtid);
            }
            return Look::Released(Outcome::Quorum, Release::Proceed);
        };
        // Counted partly by what replicas connected with, the quorum may come from any
        // replica moving on, not only from the quorum position reaching the target.
        let (key, rx) = if by_connect_state {
            inner.waiters.on_any_move()
        } else {
            inner.waiters.at_position(target)
        };
        Look::Wait(self.registration(key, rx))
    }

    /// The commit's time is up (or there is no quorum to wait for): the policy decides.
    /// `None` means keep waiting.
    fn timed_out(
        &self,
        gtids: &[MariaGtid],
        parked: &mut Parked,
        config: &DurabilityConfig,
    ) -> Option<(Outcome, Release)> {
        let waited = parked.since.elapsed();
        match config.on_timeout {
            OnTimeout::Block => {
                if !parked.overdue {
                    parked.overdue = true;
                    self.overdue.fetch_add(1, Ordering::Relaxed);
                    debug!(gtids = %list(gtids), ?waited, "commit still waiting for quorum (on_timeout = block)");
                }
                None
            }
            OnTimeout::Degrade => {
                let mut woken = Vec::new();
                {
                    let mut inner = self.lock();
                    let reason = format!(
                        "commit {} did not reach its quorum of {} within {:?} ({} semisync replica(s) connected)",
                        list(gtids),
                        config.quorum,
                        waited,
                        inner.registry.semisync_count()
                    );
                    inner.degrade(&reason, &mut woken);
                    if let DurableState::Degraded { released, .. } = &mut inner.state {
                        released.record(gtids);
                    }
                }
                wake(woken);
                Some((Outcome::Timeout, Release::Proceed))
            }
            OnTimeout::Error => {
                let error = NotAcknowledged {
                    gtids: list(gtids),
                    quorum: config.quorum,
                    waited,
                    shutdown: false,
                };
                Some((Outcome::Timeout, Release::Fail(error)))
            }
        }
    }

    fn registration(self: &Arc<Self>, key: Key, wake: oneshot::Receiver<()>) -> Registration {
        Registration {
            durability: Arc::clone(self),
            key,
            wake,
        }
    }
}

async fn woken(registration: Option<Registration>) {
    match registration {
        Some(mut r) => {
            let _ = (&mut r.wake).await;
        }
        None => std::future::pending().await,
    }
}

fn list(gtids: &[MariaGtid]) -> String {
    gtids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

// === impl Registration ===

impl Drop for Registration {
    fn drop(&mut self) {
        self.durability.lock().waiters.remove(self.key);
    }
}

// === impl Parked ===

impl Parked {
    fn new(durability: &Arc<Durability>) -> Self {
        durability.parked.fetch_add(1, Ordering::Relaxed);
        Parked {
            durability: Arc::clone(durability),
            since: Instant::now(),
            overdue: false,
            done: false,
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let d = &self.durability;
        d.parked.fetch_sub(1, Ordering::Relaxed);
        if self.overdue {
            d.overdue.fetch_sub(1, Ordering::Relaxed);
        }
        if !self.done {
            let outcome = if d.shutting_down.load(Ordering::Relaxed) {
                Outcome::Shutdown
            } else {
                Outcome::ClientGone
            };
            d.count(outcome, self.since.elapsed());
        }
    }
}
