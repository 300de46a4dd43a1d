//! A commit waiting for its quorum: first for its transactions' end positions to be relayed,
//! then for the quorum position to pass them, under the timeout policy.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::{Gtid, MariaGtid};
use strongsync_proto::position::Position;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::warn;

use super::index::Lookup;
use super::{
    wake, Durability, DurableState, Inner, NotAcknowledged, OnTimeout, Outcome, WithoutQuorum,
};
use crate::commit::{Commit, Release};

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

enum Key {
    Position(Position, u64),
    Gtid(MariaGtid, u64),
}

/// Counts the commit as parked for as long as it waits, and as abandoned if its future is
/// dropped before it was released.
struct Parked {
    durability: Arc<Durability>,
    since: Instant,
    done: bool,
}

// === impl Durability (waiting) ===

impl Durability {
    /// Waits until `commit` may be acknowledged to the client, as the policy says.
    pub(super) async fn wait(self: Arc<Self>, commit: Commit) -> Release {
        if self.config().passthrough {
            return Release::Proceed;
        }
        let mut parked = Parked::new(&self);
        let started = parked.since;
        let (outcome, release) = self.decide(&commit, started).await;
        parked.done = true;
        self.count(outcome, started.elapsed());
        if outcome != Outcome::Quorum {
            warn!(
                connection_id = commit.connection_id,
                gtids = %list(&commit.gtids),
                waited = ?started.elapsed(),
                outcome = outcome.label(),
                "commit acknowledged to the client without quorum"
            );
        }
        release
    }

    async fn decide(self: &Arc<Self>, commit: &Commit, started: Instant) -> (Outcome, Release) {
        let gtids: Vec<MariaGtid> = commit
            .gtids
            .iter()
            .filter_map(|g| match g {
                Gtid::Maria(g) => Some(*g),
                Gtid::MySql(_) => None,
            })
            .collect();
        if commit.unresolved || gtids.len() < commit.gtids.len() {
            // Nothing to wait on that is known to cover it.
            return (Outcome::Unresolved, Release::Proceed);
        }
        let mut deadline = started + self.config().ack_timeout;
        loop {
            let registration = match self.look(&gtids) {
                Look::Released(outcome, release) => return (outcome, release),
                Look::NoQuorum => match self.timed_out(&gtids, started) {
                    Some(done) => return done,
                    None => None,
                },
                Look::Wait(registration) => Some(registration),
            };
            let woken = async {
                match registration {
                    Some(mut r) => {
                        let _ = (&mut r.wake).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep_until(deadline) => {
                    if let Some(done) = self.timed_out(&gtids, started) {
                        return done;
                    }
                    deadline = Instant::now() + self.config().ack_timeout;
                }
            }
        }
    }

    /// Looks at the shared state: released, or registered to be woken.
    fn look(self: &Arc<Self>, gtids: &[MariaGtid]) -> Look {
        let mut inner = self.lock();
        if self.releasing.load(Ordering::Relaxed) {
            let config = self.config();
            let error = NotAcknowledged {
                gtids: list_maria(gtids),
                quorum: config.quorum,
                waited: Duration::ZERO,
                shutdown: true,
            };
            return Look::Released(Outcome::Shutdown, Release::Fail(error));
        }
        if let DurableState::Degraded { owed, .. } = &mut inner.state {
            owe(owed, gtids);
            return Look::Released(Outcome::Degraded, Release::Proceed);
        }
        let config = self.config();
        let short = Self::semisync_replicas(&inner) < config.quorum;
        if short
            && config.without_quorum == WithoutQuorum::Immediate
            && config.on_timeout != OnTimeout::Block
        {
            return Look::NoQuorum;
        }
        let mut target: Option<Position> = None;
        for gtid in gtids {
            match inner.index.lookup(gtid) {
                Lookup::Exact(p) | Lookup::AtMost(p) => target = target.max(Some(p)),
                Lookup::Unknown => {
                    let (tx, rx) = oneshot::channel();
                    let id = inner.waiters.next_id();
                    inner
                        .waiters
                        .by_gtid
                        .entry(*gtid)
                        .or_default()
                        .push((id, tx));
                    return Look::Wait(self.registration(Key::Gtid(*gtid, id), rx));
                }
            }
        }
        let Some(target) = target else {
            inner.acknowledged_all(gtids);
            return Look::Released(Outcome::Quorum, Release::Proceed);
        };
        if inner.quorum.is_some_and(|q| q >= target) {
            inner.acknowledged_all(gtids);
            return Look::Released(Outcome::Quorum, Release::Proceed);
        }
        let (tx, rx) = oneshot::channel();
        let id = inner.waiters.next_id();
        inner.waiters.by_position.insert((target, id), tx);
        Look::Wait(self.registration(Key::Position(target, id), rx))
    }

    /// The commit's time is up (or there is no quorum to wait for): the policy decides.
    /// `None` means keep waiting.
    fn timed_out(&self, gtids: &[MariaGtid], started: Instant) -> Option<(Outcome, Release)> {
        let waited = started.elapsed();
        let config = self.config();
        match config.on_timeout {
            OnTimeout::Block => {
                warn!(gtids = %list_maria(gtids), ?waited, "commit still waiting for quorum (on_timeout = block)");
                None
            }
            OnTimeout::Degrade => {
                let mut woken = Vec::new();
                {
                    let mut inner = self.lock();
                    match &mut inner.state {
                        DurableState::Degraded { owed, .. } => owe(owed, gtids),
                        DurableState::Strong => {
                            let mut owed = Default::default();
                            owe(&mut owed, gtids);
                            warn!(
                                gtids = %list_maria(gtids),
                                ?waited,
                                quorum = config.quorum,
                                "durability state STRONG -> DEGRADED: a commit did not reach quorum in time"
                            );
                            inner.state = DurableState::Degraded {
                                since: Instant::now(),
                                owed,
                            };
                            if let Some(observer) = &self.observer {
                                observer.state_changed(super::State::Degraded);
                            }
                            // Everyone else waiting is released too: DEGRADED does not wait.
                            inner.waiters.all(&mut woken);
                        }
                    }
                }
                wake(woken);
                Some((Outcome::Timeout, Release::Proceed))
            }
            OnTimeout::Error => {
                let error = NotAcknowledged {
                    gtids: list_maria(gtids),
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

/// Remembers, per domain, the last GTID released without quorum.
fn owe(owed: &mut std::collections::HashMap<u32, MariaGtid>, gtids: &[MariaGtid]) {
    for g in gtids {
        let slot = owed.entry(g.domain).or_insert(*g);
        if g.seq_no > slot.seq_no {
            *slot = *g;
        }
    }
}

fn list(gtids: &[Gtid]) -> String {
    gtids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn list_maria(gtids: &[MariaGtid]) -> String {
    gtids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

// === impl Registration ===

impl Drop for Registration {
    fn drop(&mut self) {
        let mut inner: std::sync::MutexGuard<'_, Inner> = self.durability.lock();
        match self.key {
            Key::Position(position, id) => {
                inner.waiters.by_position.remove(&(position, id));
            }
            Key::Gtid(gtid, id) => {
                if let Some(list) = inner.waiters.by_gtid.get_mut(&gtid) {
                    list.retain(|(i, _)| *i != id);
                    if list.is_empty() {
                        inner.waiters.by_gtid.remove(&gtid);
                    }
                }
            }
        }
    }
}

// === impl Parked ===

impl Parked {
    fn new(durability: &Arc<Durability>) -> Self {
        durability.parked.fetch_add(1, Ordering::Relaxed);
        Parked {
            durability: Arc::clone(durability),
            since: Instant::now(),
            done: false,
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let d = &self.durability;
        d.parked.fetch_sub(1, Ordering::Relaxed);
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

// === impl Inner (waiting) ===

impl Inner {
    /// `gtids` were acknowledged to their client with their quorum.
    fn acknowledged_all(&mut self, gtids: &[MariaGtid]) {
        for gtid in gtids {
            self.acknowledged.advance(*gtid);
        }
    }
}
