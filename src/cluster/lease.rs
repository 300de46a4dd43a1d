//! The leader's lease in etcd, as Patroni keeps it: campaigned for, renewed and given up.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{Cluster, Member, Standing, Takeover, CALL_TIMEOUT};

/// How long an instance that could not reach etcd waits before it tries again.
const RETRY: Duration = Duration::from_millis(500);

/// What a campaign found.
enum Campaign {
    /// This instance holds the lease `id`, valid for `ttl` from `sent`.
    Won {
        id: i64,
        ttl: Duration,
        sent: Instant,
    },
    /// Another instance leads (it names itself, if its key could be read), as of etcd's
    /// `revision`.
    Lost {
        leader: Option<Member>,
        revision: i64,
    },
}

impl Cluster {
    /// Takes part until `cancel` fires: campaigns for the lease whenever no instance holds it,
    /// leads while it holds it, and gives it up at the end.
    pub async fn run(self: Arc<Self>, takeover: Arc<dyn Takeover>, cancel: CancellationToken) {
        let mut client = loop {
            match Client::connect(&self.endpoints, Some(self.options.clone())).await {
                Ok(client) => {
                    let _ = self.client.set(client.clone());
                    tokio::spawn(Arc::clone(&self).present(client.clone(), cancel.clone()));
                    break client;
                }
                Err(e) => {
                    self.unreachable(&e);
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        };
        while !cancel.is_cancelled() {
            match tokio::time::timeout(CALL_TIMEOUT, self.campaign(&mut client)).await {
                Ok(Ok(Campaign::Won { id, ttl, sent })) => {
                    self.lead(&mut client, id, ttl, sent, takeover.as_ref(), &cancel)
                        .await;
                    // Another instance may do better (or the operator fix what stopped this
                    // one): it waits before it campaigns again.
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = tokio::time::sleep(self.ttl / 3) => {}
                    }
                }
                Ok(Ok(Campaign::Lost { leader, revision })) => {
                    self.standing.send_replace(Standing::Following { leader });
                    // Campaigns again as soon as the leader's key goes (its lease expired or
                    // was given up), or in a third of a lease at the latest, should the watch
                    // be cut or miss it.
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = self.leader_gone(&mut client, revision) => {}
                        () = tokio::time::sleep(self.ttl / 3) => {}
                    }
                }
                Ok(Err(e)) => {
                    self.unreachable(&e);
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
                Err(_) => {
                    self.unreachable(&"no answer from etcd");
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        }
    }

    async fn present(self: Arc<Self>, client: Client, cancel: CancellationToken) {
        self.stay_present(client, cancel).await;
    }

    /// Grants a lease and puts the leader key on it if no instance holds the key (its
    /// `create_revision` is 0).
    async fn campaign(&self, client: &mut Client) -> Result<Campaign, etcd_client::Error> {
        let sent = Instant::now();
        let ttl_secs = i64::try_from(self.ttl.as_secs().max(2)).unwrap_or(i64::MAX);
        let grant = client.lease_grant(ttl_secs, None).await?;
        let key = self.key("leader");
        let me = serde_json::to_vec(&self.me).unwrap_or_default();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                me,
                Some(PutOptions::new().with_lease(grant.id())),
            )])
            .or_else([TxnOp::get(key, None)]);
        let answer = client.txn(txn).await?;
        if answer.succeeded() {
            let ttl = Duration::from_secs(u64::try_from(grant.ttl()).unwrap_or(0));
            return Ok(Campaign::Won {
                id: grant.id(),
                ttl,
                sent,
            });
        }
        // Not needed: another instance leads.
        let _ = client.lease_revoke(grant.id()).await;
        let leader = answer.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .and_then(|kv| serde_json::from_slice::<Member>(kv.value()).ok()),
            _ => None,
        });
        let revision = answer.header().map_or(0, |h| h.revision());
        Ok(Campaign::Lost { leader, revision })
    }

    /// Returns once the leader's key is deleted after `revision`. Never, if the watch cannot
    /// be made or ends: the caller's timer campaigns then.
    async fn leader_gone(&self, client: &mut Client, revision: i64) {
        let options = WatchOptions::new().with_start_revision(revision + 1);
        if let Ok(mut stream) = client.watch(self.key("leader"), Some(options)).await {
            while let Ok(Some(answer)) = stream.message().await {
                let events = answer.events();
                if events.iter().any(|e| e.event_type() == EventType::Delete) {
                    return;
                }
            }
        }
        std::future::pending().await
    }

    /// Leads on lease `id` until a renewal fails or comes too late, the takeover fails, or
    /// `cancel` fires (then the lease is given up at once, for another instance to take
    /// without waiting it out). It acts only once `takeover` is done, keeping the lease
    /// meanwhile. Once it stops leading, the instance campaigns again like any other.
    async fn lead(
        &self,
        client: &mut Client,
        id: i64,
        ttl: Duration,
        sent: Instant,
        takeover: &dyn Takeover,
        cancel: &CancellationToken,
    ) {
        let deadline = std::sync::Mutex::new(sent + ttl.saturating_sub(self.margin));
        let acting = AtomicBool::new(false);
        self.standing
            .send_replace(Standing::Leading { lease: id, ttl });
        info!(lease = id, ?ttl, name = %self.me.name, "won the cluster's lease: taking over");
        let mut keeping = client.clone();
        let keep = self.keep(&mut keeping, id, &deadline, &acting, cancel);
        let take = takeover.take_over();
        tokio::pin!(keep, take);
        let mut taken = false;
        let ended = loop {
            tokio::select! {
                ended = &mut keep => break ended,
                done = &mut take, if !taken => {
                    taken = true;
                    if let Err(why) = done {
                        tracing::error!(%why, "takeover failed: giving the lease up");
                        break Ok(());
                    }
                    // Acting from now until the deadline the last renewal set.
                    acting.store(true, Ordering::SeqCst);
                    let until = *deadline.lock().unwrap_or_else(|p| p.into_inner());
                    self.durability.gate().lease().allow_until(until);
                    self.metrics.leader.set(1);
                    info!(lease = id, name = %self.me.name, "leading the cluster");
                }
            }
        };
        let why = match ended {
            Ok(()) => {
                let _ = tokio::time::timeout(CALL_TIMEOUT, client.lease_revoke(id)).await;
                "given up"
            }
            Err(why) => why,
        };
        self.durability.stopped_leading();
        takeover.stepped_down();
        self.metrics.leader.set(0);
        self.standing
            .send_replace(Standing::Following { leader: None });
        warn!(
            lease = id,
            why, "no longer leading the cluster: relaying and releasing nothing"
        );
    }

    /// Renews lease `id` every third of its time to live, moving `deadline` (and, once
    /// `acting`, the gate's), until a renewal fails or the deadline comes first (`Err`, why),
    /// or `cancel` fires (`Ok`). Each renewal moves the deadline to when it was sent, plus the
    /// time to live etcd granted, less the margin: measured from before the request left, so
    /// the instance stops acting before etcd can have let the lease expire, however long the
    /// answer took.
    async fn keep(
        &self,
        client: &mut Client,
        id: i64,
        deadline: &std::sync::Mutex<Instant>,
        acting: &AtomicBool,
        cancel: &CancellationToken,
    ) -> Result<(), &'static str> {
        let lease = self.durability.gate().lease();
        let before_deadline =
            || Instant::now() < *deadline.lock().unwrap_or_else(|p| p.into_inner());
        let mut stream = None;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(self.ttl / 3) => {}
            }
            if !before_deadline() {
                return Err("the lease's deadline passed before it was renewed");
            }
            let sent = Instant::now();
            // No longer than the time to live: past the deadline the instance may not act
            // anyway.
            let answer = tokio::time::timeout(self.ttl, async {
                if stream.is_none() {
                    stream = Some(client.lease_keep_alive(id).await?);
                }
                let (keeper, answers) = stream.as_mut().expect("just opened");
                keeper.keep_alive().await?;
                answers.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                    let granted = Duration::from_secs(u64::try_from(answer.ttl()).unwrap_or(0));
                    let until = sent + granted.saturating_sub(self.margin);
                    *deadline.lock().unwrap_or_else(|p| p.into_inner()) = until;
                    if acting.load(Ordering::SeqCst) {
                        lease.allow_until(until);
                    }
                    self.metrics.lease_renewals.with_label_values(&["ok"]).inc();
                }
                Ok(Ok(Some(_))) => {
                    self.metrics
                        .lease_renewals
                        .with_label_values(&["expired"])
                        .inc();
                    return Err("etcd says the lease expired");
                }
                Ok(Ok(None) | Err(_)) | Err(_) => {
                    // The stream is done for: the next renewal opens another.
                    stream = None;
                    self.metrics
                        .lease_renewals
                        .with_label_values(&["failed"])
                        .inc();
                    if !before_deadline() {
                        return Err("the lease could not be renewed before its deadline");
                    }
                }
            }
        }
    }

    fn unreachable(&self, problem: &dyn std::fmt::Display) {
        let problem = problem.to_string();
        if !matches!(&*self.standing.borrow(), Standing::Unreachable { problem: p } if *p == problem)
        {
            warn!(%problem, "etcd does not answer: this instance follows no leader it knows of");
        }
        self.standing
            .send_replace(Standing::Unreachable { problem });
    }
}
