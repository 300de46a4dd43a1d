//! A commit waiting for its quorum, under the timeout policy.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use strongsync_proto::gtid::Gtid;
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

use super::inner::UnresolvedRelease;
use super::inner::{DurableState, Inner, Plan};
use super::waiters::{waking, Gtids, Verdict};
use super::{Cutoff, NotAcknowledged, Release};
use super::{Durability, Outcome};
use crate::commit::{Commit, Unresolved, WaitKind};
use crate::config::{DurabilityConfig, OnTimeout, WithoutQuorum};

/// What a look at the shared state decided.
enum Look {
    /// Done.
    Released(Outcome, Release),
    /// Parked in this slot.
    Parked(usize),
    /// The quorum cannot come (no replicas, `without_quorum = immediate`): apply the policy.
    NoQuorum,
}

/// Where a parked commit's wait stands.
enum Step {
    Released(Outcome, Release),
    /// The policy applies: the quorum cannot come, or the commit's time is up.
    TimedOut,
}

/// A commit's place in the wait queue; dropping it takes the commit out (it was released, the
/// client went away, or the proxy stopped).
struct Park<'a> {
    durability: &'a Durability,
    gtids: &'a [Gtid],
    kind: WaitKind,
    /// The quorum its session asked for, if it did.
    asked: Option<usize>,
    /// The epoch of its session's connection.
    epoch: u64,
    slot: Option<usize>,
    /// The settings of the last look (none before the first).
    config: Option<Arc<DurabilityConfig>>,
    /// The quorum it waited for at the last look.
    quorum: usize,
}

/// Counts the commit as parked for as long as it waits (and as overdue once `block` keeps it
/// past its timeout), and as abandoned if its future is dropped before it was released.
struct Parked<'a> {
    durability: &'a Durability,
    kind: WaitKind,
    since: Instant,
    /// It had to wait in the queue (the quorum did not hold it at the first look).
    queued: std::sync::atomic::AtomicBool,
    overdue: bool,
    done: bool,
}

// === waiting ===

/// Waits until `commit` may be acknowledged to the client, as the policy says: until every
/// transaction it reported is held by its quorum of replicas, by position once its end is known,
/// or by the GTIDs replicas connected with. It registers once and is woken once: while it waits,
/// the replica side moves it (its transaction relayed: to the position where it ends) and, when
/// the quorum holds it, wakes it with the verdict. It reads the settings when it looks, under
/// the lock it looks with, and looks again only when they (or the state) change.
pub(super) async fn wait(d: Arc<Durability>, commit: Commit) -> Release {
    // Relaying only, nothing waits; but nothing of a fenced primary is acknowledged, even
    // then (the look says so).
    if d.fast.passthrough.load(Ordering::Relaxed) && d.gate.admits(commit.epoch, false).is_ok() {
        return Release::Proceed;
    }
    let gtids = followed(&commit.gtids);
    let unresolved = commit.unresolved.clone();
    let mut parked = Parked::new(&d, commit.kind);
    // A session's own quorum is for its commits; what a read may reveal is others'.
    let asked = commit.quorum.filter(|_| commit.kind == WaitKind::Commit);
    let (outcome, release, quorum) = parked.decide(&gtids, asked, commit.epoch).await;
    let (outcome, release) = unless_the_lease_lapsed(
        &d,
        &commit,
        &gtids,
        (quorum, parked.since),
        outcome,
        release,
    );
    let release = naming_its_own(&commit, release);
    // What was learnt was waited for; the rest could not be.
    let outcome = match (&unresolved, outcome) {
        (Some(_), Outcome::Quorum) => Outcome::Unresolved,
        (_, outcome) => outcome,
    };
    parked.done = true;
    let waited = account_release(&d, &commit, &gtids, outcome, &release, quorum, parked.since);
    match unresolved {
        Some(reason) => remember_unresolved(&d, &commit, &reason, &gtids, waited),
        None if outcome != Outcome::Quorum => {
            debug!(connection_id = commit.connection_id, kind = ?commit.kind, gtids = %list(&gtids), ?waited, outcome = outcome.label(), "released without quorum");
        }
        None => {}
    }
    release
}

/// The outcome and release decided, or, on an instance whose lease lapsed while the commit
/// waited (or that was paused past it), a failure: looked at last, on the clock, since such
/// an instance releases nothing. `(quorum, since)`: the quorum waited for, and since when.
fn unless_the_lease_lapsed(
    d: &Durability,
    commit: &Commit,
    gtids: &[Gtid],
    (quorum, since): (usize, Instant),
    outcome: Outcome,
    release: Release,
) -> (Outcome, Release) {
    if release != Release::Proceed || d.gate.lease().may_act() {
        return (outcome, release);
    }
    let release = Release::Fail(NotAcknowledged {
        gtids: list(gtids),
        quorum,
        waited: since.elapsed(),
        cause: Cutoff::NotLeading {
            epoch: commit.epoch,
        },
        read: commit.kind == WaitKind::Read,
    });
    (Outcome::NotLeading, release)
}

/// A commit's error names what it committed, not the others' transactions its response was
/// also bounded by.
fn naming_its_own(commit: &Commit, release: Release) -> Release {
    match release {
        Release::Fail(mut error)
            if commit.kind == WaitKind::Commit && commit.own < commit.gtids.len() =>
        {
            error.gtids = list(&followed(&commit.gtids[..commit.own]));
            Release::Fail(error)
        }
        release => release,
    }
}

/// Counts the release, remembers a commit released without its quorum for its outcome, and
/// returns how long it waited.
fn account_release(
    d: &Durability,
    commit: &Commit,
    gtids: &[Gtid],
    outcome: Outcome,
    release: &Release,
    quorum: usize,
    since: Instant,
) -> Duration {
    let released = *release == Release::Proceed;
    if commit.kind == WaitKind::Commit
        && released
        && matches!(
            outcome,
            Outcome::Timeout | Outcome::Degraded | Outcome::NoneAsked
        )
    {
        let mut inner = d.lock();
        for gtid in &gtids[..commit.own.min(gtids.len())] {
            inner.released_without_quorum.insert(*gtid);
        }
        inner.changed();
    }
    let waited = since.elapsed();
    d.counters.released(commit.kind, outcome, waited);
    if commit.kind == WaitKind::Commit && released {
        // Off unless asked for (`strongsync::release=debug`): which instance released
        // what, in which epoch, for a ledger that checks no two instances released.
        debug!(target: "strongsync::release", epoch = commit.epoch, gtids = %list(gtids), outcome = outcome.label(), "commit released");
    }
    if commit.kind == WaitKind::Commit {
        d.counters.commit_quorum(quorum);
    }
    waited
}

/// Says, and keeps for `/status`, that `commit` was released without strongsync knowing
/// everything it committed (or, a read, may reveal), and why.
fn remember_unresolved(
    d: &Durability,
    commit: &Commit,
    reason: &Unresolved,
    gtids: &[Gtid],
    waited: Duration,
) {
    let listed = list(gtids);
    match commit.kind {
        WaitKind::Commit => {
            warn!(connection_id = commit.connection_id, %reason, gtids = %listed, ?waited, "commit released without knowing everything it committed");
        }
        WaitKind::Read => {
            warn!(connection_id = commit.connection_id, %reason, ?waited, "response released without knowing everything it may reveal");
        }
    }
    d.lock().unresolved(UnresolvedRelease {
        connection_id: commit.connection_id,
        reason: reason.to_string(),
        gtids: listed,
        at: Instant::now(),
    });
}

/// A wait from an epoch that is over: never acknowledged, and a commit joins the tail.
fn retired(inner: &mut Inner, gtids: &[Gtid], kind: WaitKind, k: usize, epoch: u64) -> Look {
    if kind == WaitKind::Commit {
        inner.fencing.join_tail(gtids.iter().copied());
        inner.changed();
    }
    cut_off(gtids, kind, k, Outcome::Fenced, Cutoff::Fenced { epoch })
}

/// Released at once as `outcome`, with `cause`'s error: a wait of `kind` for `gtids` at quorum
/// `k` that is cut off before it waited.
fn cut_off(gtids: &[Gtid], kind: WaitKind, k: usize, outcome: Outcome, cause: Cutoff) -> Look {
    let error = NotAcknowledged {
        gtids: list(gtids),
        quorum: k,
        waited: Duration::ZERO,
        cause,
        read: kind == WaitKind::Read,
    };
    Look::Released(outcome, Release::Fail(error))
}

/// The GTIDs of a commit, as the wait queue keeps them.
fn followed(gtids: &[Gtid]) -> Gtids {
    gtids.iter().copied().collect()
}

fn list(gtids: &[Gtid]) -> String {
    gtids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

// === impl Park ===

impl Park<'_> {
    /// Looks at the shared state (under its lock): released, or parked to be woken. Returns
    /// the settings it looked under and the quorum it waits for under them.
    fn look(
        &self,
        inner: &mut Inner,
        waker: &std::task::Waker,
    ) -> (Look, Arc<DurabilityConfig>, usize) {
        let config = Arc::clone(&inner.config);
        let k = config.session_quorum(self.asked).get();
        let look = if inner.epoch_number != self.epoch {
            // Committed on a primary strongsync no longer follows (the session's statement was
            // on its way when the follow came): never acknowledged, part of the old epoch's
            // tail. Its epoch was fenced before it ended.
            retired(inner, self.gtids, self.kind, k, self.epoch)
        } else {
            self.look_under(inner, &config, k, waker)
        };
        (look, config, k)
    }

    /// Looks under the settings in force, in the epoch in force, for `k` replicas.
    fn look_under(
        &self,
        inner: &mut Inner,
        config: &DurabilityConfig,
        k: usize,
        waker: &std::task::Waker,
    ) -> Look {
        let (gtids, kind) = (self.gtids, self.kind);
        if let Some(epoch) = inner.fencing.up().map(|fence| fence.epoch) {
            // Nothing of a fenced primary is acknowledged that the quorum did not already hold.
            let rule = config.rule().with_count(k.max(1));
            if matches!(inner.plan(gtids, &rule), Plan::Held) {
                for gtid in gtids {
                    inner.watermark.take(*gtid);
                }
                return Look::Released(Outcome::Quorum, Release::Proceed);
            }
            if kind == WaitKind::Commit {
                inner.fenced_commit(gtids);
            }
            return cut_off(gtids, kind, k, Outcome::Fenced, Cutoff::Fenced { epoch });
        }
        if !self.durability.gate.lease().may_act() {
            // This instance does not lead now: whatever the quorum holds, it releases nothing.
            let cause = Cutoff::NotLeading {
                epoch: inner.epoch_number,
            };
            return cut_off(gtids, kind, k, Outcome::NotLeading, cause);
        }
        if self.durability.releasing.load(Ordering::Relaxed) {
            return cut_off(gtids, kind, k, Outcome::Shutdown, Cutoff::Shutdown);
        }
        if config.passthrough || (kind == WaitKind::Read && !config.reads_wait()) {
            // Switched to relaying only (or, for a read, to `visibility = "commit"`) while
            // this wait was parked: it stops waiting too.
            return Look::Released(Outcome::Degraded, Release::Proceed);
        }
        if k == 0 {
            return Look::Released(Outcome::NoneAsked, Release::Proceed);
        }
        // A session that raised its quorum asked for more than DEGRADED gives up: it still
        // waits for what it asked, or is told it did not get it. And DEGRADED releases only
        // while the policy is `degrade`: reloaded to `block` or `error`, a commit waits again.
        let waives = k <= config.quorum && config.on_timeout == OnTimeout::Degrade;
        if let (DurableState::Degraded { released, .. }, true) = (&mut inner.state, waives) {
            // A read is no commit to acknowledge: it only goes with what DEGRADED released.
            if kind == WaitKind::Commit {
                released.record(gtids);
            }
            return Look::Released(Outcome::Degraded, Release::Proceed);
        }
        let rule = config.rule().with_count(k);
        if config.without_quorum == WithoutQuorum::Immediate
            && config.on_timeout != OnTimeout::Block
            && inner.registry.unmet(&rule).is_some()
        {
            return Look::NoQuorum;
        }
        match inner.plan(gtids, &rule) {
            Plan::Held => {
                for gtid in gtids {
                    inner.watermark.take(*gtid);
                }
                Look::Released(Outcome::Quorum, Release::Proceed)
            }
            Plan::Wait(until) => Look::Parked(inner.waiters.park(gtids, rule, until, waker)),
        }
    }

    /// Takes the lock only to look (the first poll, or when told to look again) and to read
    /// the verdict once woken; the timer is polled outside it.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        mut timer: Pin<&mut Sleep>,
        parked: &Parked,
    ) -> Poll<Step> {
        let looked = {
            let mut inner = self.durability.lock();
            let look = match self.slot {
                None => true,
                Some(slot) => match inner.waiters.verdict(slot, cx.waker()) {
                    None => false,
                    Some(verdict) => {
                        inner.waiters.remove(slot);
                        self.slot = None;
                        if verdict == Verdict::Held {
                            return Poll::Ready(Step::Released(Outcome::Quorum, Release::Proceed));
                        }
                        true
                    }
                },
            };
            if look {
                let (look, config, quorum) = self.look(&mut inner, cx.waker());
                self.config = Some(config);
                self.quorum = quorum;
                match look {
                    Look::Released(outcome, release) => {
                        return Poll::Ready(Step::Released(outcome, release))
                    }
                    Look::NoQuorum => return Poll::Ready(Step::TimedOut),
                    Look::Parked(slot) => {
                        self.slot = Some(slot);
                        parked.queued.store(true, Ordering::Relaxed);
                    }
                }
            }
            look
        };
        // The timeout follows the settings in force, not those the commit parked under: a
        // look (after a reload) may find its time already up, even under `block`.
        let ack_timeout = self
            .config
            .as_ref()
            .map_or(Duration::ZERO, |c| c.ack_timeout);
        let deadline = parked.since + ack_timeout;
        if looked && Instant::now() >= deadline {
            return Poll::Ready(Step::TimedOut);
        }
        // Past its deadline under `block`, only a wake-up (or a reload) moves the commit.
        if parked.overdue {
            return Poll::Pending;
        }
        if looked && timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        match timer.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Step::TimedOut),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Park<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.durability.lock().waiters.remove(slot);
        }
    }
}

// === impl Parked ===

impl<'a> Parked<'a> {
    fn new(durability: &'a Durability, kind: WaitKind) -> Self {
        durability.counters.parking(kind, true);
        Parked {
            durability,
            kind,
            since: Instant::now(),
            queued: std::sync::atomic::AtomicBool::new(false),
            overdue: false,
            done: false,
        }
    }

    /// How the commit is released, and the quorum it waited for.
    async fn decide(
        &mut self,
        gtids: &[Gtid],
        asked: Option<usize>,
        epoch: u64,
    ) -> (Outcome, Release, usize) {
        let mut park = Park {
            durability: self.durability,
            gtids,
            kind: self.kind,
            asked,
            epoch,
            slot: None,
            config: None,
            quorum: 0,
        };
        // One timer for the whole wait, set by the first look and moved only by a reload.
        let timer = tokio::time::sleep_until(self.since);
        tokio::pin!(timer);
        loop {
            let step = poll_fn(|cx| park.poll(cx, timer.as_mut(), self)).await;
            match step {
                Step::Released(outcome, release) => return (outcome, release, park.quorum),
                Step::TimedOut => {
                    // A step is only taken after a look, which keeps its settings.
                    let config = park.config.clone().unwrap_or_default();
                    if let Some((outcome, release)) = self.timed_out(gtids, &config, park.quorum) {
                        return (outcome, release, park.quorum);
                    }
                }
            }
        }
    }

    /// The commit's time is up (or there is no quorum to wait for): the policy decides, for a
    /// commit that waited for `quorum`. `None` means keep waiting.
    fn timed_out(
        &mut self,
        gtids: &[Gtid],
        config: &DurabilityConfig,
        quorum: usize,
    ) -> Option<(Outcome, Release)> {
        let parked = self;
        let waited = parked.since.elapsed();
        // A session's raised quorum never degrades the proxy: its client is told instead.
        let on_timeout = match config.on_timeout {
            OnTimeout::Degrade if quorum > config.quorum => OnTimeout::Error,
            policy => policy,
        };
        match on_timeout {
            OnTimeout::Block => {
                if !parked.overdue {
                    parked.overdue = true;
                    parked.durability.counters.overdue(true);
                    debug!(gtids = %list(gtids), ?waited, "commit still waiting for quorum (on_timeout = block)");
                }
                None
            }
            OnTimeout::Degrade => {
                waking(|woken| {
                    let mut inner = parked.durability.lock();
                    let what = match parked.kind {
                        WaitKind::Commit => "commit",
                        WaitKind::Read => "a response bounded by",
                    };
                    let reason = format!(
                        "{what} {} did not reach its quorum of {} within {:?} ({} semisync replica(s) connected)",
                        list(gtids),
                        config.rule().with_count(quorum),
                        waited,
                        inner.registry.semisync_count()
                    );
                    inner.degrade(&reason, woken);
                    if let DurableState::Degraded { released, .. } = &mut inner.state {
                        if parked.kind == WaitKind::Commit {
                            released.record(gtids);
                        }
                    }
                });
                Some((Outcome::Timeout, Release::Proceed))
            }
            OnTimeout::Error => {
                let error = NotAcknowledged {
                    gtids: list(gtids),
                    quorum,
                    waited,
                    cause: Cutoff::Timeout,
                    read: parked.kind == WaitKind::Read,
                };
                Some((Outcome::Timeout, Release::Fail(error)))
            }
        }
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        let d = self.durability;
        d.counters.parking(self.kind, false);
        if self.kind == WaitKind::Read && self.queued.load(Ordering::Relaxed) {
            d.counters.read_queued();
        }
        if self.overdue {
            d.counters.overdue(false);
        }
        if !self.done {
            let outcome = if d.shutting_down.load(Ordering::Relaxed) {
                Outcome::Shutdown
            } else {
                Outcome::ClientGone
            };
            d.counters
                .released(self.kind, outcome, self.since.elapsed());
        }
    }
}
