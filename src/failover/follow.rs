//! Following a new primary, and promoting one: the [`Control`] calls that change the primary
//! strongsync follows.

use tracing::{info, warn};

use super::candidate::{self, Candidate};
use super::promote::{self, Looked, LookedAt, Seen};
use super::{Control, ControlError, KnownPrimary, Upstream, NOT_PERSISTED};
use crate::config::ProbeAccount;
use crate::flavour::{Flavour, ServerIdentity};

/// How a follow is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Follow {
    /// `HOST:PORT` or a Unix socket's path.
    pub primary: String,
    /// Follow even if it lacks transactions of the watermark (counted and logged).
    pub force: bool,
    /// Follow even a primary followed before (the operator says it is safe again).
    pub allow_retired: bool,
}

/// What a follow did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowReport {
    /// The new epoch.
    pub epoch: u64,
    /// The primary followed now.
    pub primary: String,
    /// Who it is.
    pub identity: Option<ServerIdentity>,
    /// The one retired.
    pub retired: String,
    /// GTIDs of the watermark the new primary lacks (a forced follow only).
    pub lacking: String,
    /// Written to the state file (false: none is configured).
    pub persisted: bool,
}

/// What a promote did.
#[derive(Debug)]
pub struct PromoteReport {
    /// The replica promoted.
    pub server_id: u32,
    /// The follow that ended it.
    pub follow: FollowReport,
    /// Every replica looked at.
    pub looked: LookedAt,
}

// === impl Control (follow, promote) ===

impl Control {
    /// Follows a new primary. The server is looked at before anything changes (reachable,
    /// writable, not replicating, not a primary strongsync followed under any name, MySQL with
    /// GTIDs); then the old primary is fenced and drained, the watermark read after that, and
    /// the server looked at again: it must hold the whole watermark by identity. Only then is
    /// the epoch raised, the old primary retired with its identity, and every connection of the
    /// old epoch closed. New sessions go to it;
    /// sessions of the old epoch are closed, their next command told why; replicas
    /// reconnect through strongsync by themselves and start from their own positions.
    /// Written to the state file before it returns.
    ///
    /// # Errors
    /// [`ControlError`]: a refusal before the fence changes nothing; one after it (the server
    /// lacks transactions of the watermark) leaves the old primary fenced.
    pub async fn follow(&self, call: &Follow) -> Result<FollowReport, ControlError> {
        self.leading()?;
        let mut upstream = self.upstream.lock().await;
        self.follow_locked(&mut upstream, call).await
    }

    async fn follow_locked(
        &self,
        upstream: &mut Upstream,
        call: &Follow,
    ) -> Result<FollowReport, ControlError> {
        let addr = call.primary.trim().to_owned();
        let fence = self.durability.fence_state();
        if addr == upstream.primary.address && fence.is_none() {
            // Already followed (a manager's hook called twice): nothing changes.
            info!(primary = %addr, epoch = upstream.epoch, "follow: already following it");
            return Ok(self.report(upstream, String::new(), String::new()));
        }
        // A follow that stopped half-way (fenced, the new primary written, the fence not yet
        // lifted) left the fence of an earlier epoch: following that primary finishes it.
        let resuming =
            addr == upstream.primary.address && fence.is_some_and(|f| f.epoch < upstream.epoch);
        if !call.allow_retired {
            refuse_followed(upstream, &addr, None, resuming)?;
        }
        let account = self.account.as_ref().ok_or(ControlError::NoAccount)?;
        let before = self.check(&addr, account, upstream, call, resuming).await?;
        // The old primary is fenced first and drained: nothing more of it reaches anyone, and
        // nothing is held by the quorum that the watermark read below does not hold.
        if !resuming {
            self.fence_locked(upstream, &format!("follow {addr}"))
                .await?;
        }
        let candidate = self.check(&addr, account, upstream, call, resuming).await?;
        if candidate.identity != before.identity {
            return Err(ControlError::Changed {
                addr,
                before: before.identity,
                after: candidate.identity,
            });
        }
        let lacking = self.lacking(&addr, &candidate, call.force)?;
        let retired = if resuming {
            String::new()
        } else {
            let new = KnownPrimary {
                address: addr.clone(),
                identity: Some(candidate.identity),
            };
            let old = std::mem::replace(&mut upstream.primary, new);
            let retired = old.address.clone();
            if !upstream.retired.contains(&old) {
                upstream.retired.push(old);
            }
            upstream.epoch += 1;
            retired
        };
        // Written fenced and with the new primary first: a crash now comes back fenced, and a
        // follow to the same primary again finishes the job.
        self.save(upstream).await?;
        let drained = self
            .durability
            .open_epoch(upstream.epoch, addr.clone(), self.fence_drain)
            .await;
        if !drained {
            warn!(
                epoch = upstream.epoch,
                "statements were still being written to the old primary when the drain ran out; their connections are reset"
            );
        }
        self.current
            .send_replace((upstream.epoch, upstream.primary.address.clone()));
        let saved = self.save(upstream).await;
        self.refresh_metrics();
        warn!(epoch = upstream.epoch, primary = %addr, identity = %candidate.identity, name = %candidate.name, %retired, "FOLLOWING a new primary; the old one is retired and every connection to it closed");
        if !self.persists() {
            warn!(epoch = upstream.epoch, "follow: {NOT_PERSISTED}");
        }
        saved?;
        Ok(self.report(upstream, retired, lacking))
    }

    /// Looks at the server to follow: reachable, not a primary strongsync followed (by
    /// identity), writable, not replicating, of the flavour of the watermark,
    /// with GTIDs for every transaction.
    async fn check(
        &self,
        addr: &str,
        account: &ProbeAccount,
        upstream: &mut Upstream,
        call: &Follow,
        resuming: bool,
    ) -> Result<Candidate, ControlError> {
        let candidate = candidate::inspect(addr, account, self.connect_timeout)
            .await
            .map_err(|problem| ControlError::Unreachable {
                addr: addr.to_owned(),
                problem: Box::new(problem),
            })?;
        if !call.allow_retired {
            self.identify_primary(upstream).await;
            refuse_followed(upstream, addr, Some(&candidate.identity), resuming)?;
        }
        if candidate.read_only {
            return Err(ControlError::ReadOnly {
                addr: addr.to_owned(),
            });
        }
        if !candidate.replicating.is_empty() {
            return Err(ControlError::Replicating {
                addr: addr.to_owned(),
                channels: candidate.replicating,
            });
        }
        let watermark = self.durability.status().watermark;
        if let Some(expected) = Flavour::of_position(&watermark).filter(|e| *e != candidate.flavour)
        {
            return Err(ControlError::OtherFlavour {
                addr: addr.to_owned(),
                found: candidate.flavour,
                expected,
            });
        }
        if let Some(problem) = candidate.gtid_mode.clone() {
            return Err(ControlError::GtidMode {
                addr: addr.to_owned(),
                problem,
            });
        }
        Ok(candidate)
    }

    /// What of the watermark (read now, after the fence drained) `candidate` lacks, as words;
    /// a refusal unless `force`.
    fn lacking(
        &self,
        addr: &str,
        candidate: &Candidate,
        force: bool,
    ) -> Result<String, ControlError> {
        let status = self.durability.status();
        if status.watermark_inexact && !force {
            return Err(ControlError::WatermarkInexact);
        }
        let lacking: Vec<String> = candidate
            .holds
            .missing(&status.watermark)
            .map(ToString::to_string)
            .collect();
        let lacking = lacking.join(",");
        if !lacking.is_empty() {
            if !force {
                return Err(ControlError::Lacks {
                    addr: addr.to_owned(),
                    lacking,
                    holds: format!("{:#}", candidate.holds),
                });
            }
            self.metrics.forced_follows.inc();
            warn!(primary = %addr, %lacking, "FORCED follow: the new primary lacks transactions of the watermark, which are lost");
        }
        Ok(lacking)
    }

    /// Learns who the primary followed now is, if that is not known yet and it answers (a
    /// retired primary must be known under any name).
    async fn identify_primary(&self, upstream: &mut Upstream) {
        if upstream.primary.identity.is_some() {
            return;
        }
        let Some(account) = self.account.as_ref().or(self.promote_account.as_ref()) else {
            return;
        };
        let addr = upstream.primary.address.clone();
        if let Ok(seen) = candidate::inspect(&addr, account, self.connect_timeout).await {
            self.learnt(upstream, &addr, seen.identity).await;
        }
    }

    fn report(&self, upstream: &Upstream, retired: String, lacking: String) -> FollowReport {
        FollowReport {
            epoch: upstream.epoch,
            primary: upstream.primary.address.clone(),
            identity: upstream.primary.identity,
            retired,
            lacking,
            persisted: self.persists(),
        }
    }

    /// Promotes a replica, for users without a failover manager: fences, picks the replica that
    /// holds the whole watermark and has received the most (never the fenced primary or a
    /// retired one, however the config file spells it), makes it a primary and follows it.
    /// Never promotes one that lacks a transaction of the watermark; safe to rerun after a
    /// failure midway.
    ///
    /// # Errors
    /// [`ControlError`]; the fence stays up after any failure past it.
    pub async fn promote(&self) -> Result<PromoteReport, ControlError> {
        self.leading()?;
        let account = self
            .promote_account
            .as_ref()
            .filter(|_| !self.replicas.is_empty())
            .ok_or(ControlError::NoPromoteSetup)?;
        let mut upstream = self.upstream.lock().await;
        info!("promote: fencing the primary");
        self.fence_locked(&mut upstream, "promote").await?;
        self.identify_primary(&mut upstream).await;
        let watermark = self.durability.status().watermark;
        let followed: Vec<(String, Option<ServerIdentity>)> = std::iter::once(&upstream.primary)
            .chain(&upstream.retired)
            .map(|p| (p.address.clone(), p.identity))
            .collect();
        let (looked, summary) = self.look(account, &followed).await;
        let Some(chosen) = promote::choose(&looked, &watermark) else {
            return Err(ControlError::NoCandidate {
                watermark: format!("{watermark:#}"),
                looked: summary,
            });
        };
        info!(server_id = chosen.server_id, address = %chosen.address, received = %chosen.candidate.received, "promote: chosen");
        promote::make_primary(chosen, account, self.connect_timeout, self.apply_timeout)
            .await
            .map_err(|problem| ControlError::PromoteStep {
                server_id: chosen.server_id,
                problem: Box::new(problem),
            })?;
        let call = Follow {
            primary: chosen.address.clone(),
            force: false,
            allow_retired: false,
        };
        let follow = self.follow_locked(&mut upstream, &call).await?;
        info!(
            server_id = chosen.server_id,
            epoch = follow.epoch,
            "promote: done"
        );
        Ok(PromoteReport {
            server_id: chosen.server_id,
            follow,
            looked: summary,
        })
    }

    /// Looks at every replica the config file gives an address for.
    async fn look(
        &self,
        account: &ProbeAccount,
        followed: &[(String, Option<ServerIdentity>)],
    ) -> (Vec<Looked>, LookedAt) {
        let mut looked = Vec::new();
        let mut summary = LookedAt::default();
        for (server_id, address) in &self.replicas {
            let seen = match promote::look(*server_id, address, account, self.connect_timeout).await
            {
                Ok(l) => match promote::followed_as(&l, followed) {
                    Some(as_) => {
                        info!(server_id, %address, followed = %as_, "promote: passed over a primary strongsync followed");
                        Seen::Followed {
                            address: as_.to_owned(),
                        }
                    }
                    None => {
                        info!(server_id, received = %l.candidate.received, replicating = l.candidate.configured, "promote: looked at replica");
                        let received = l.candidate.received.clone();
                        looked.push(l);
                        Seen::Received(received)
                    }
                },
                Err(problem) => {
                    warn!(server_id, %problem, "promote: cannot look at replica");
                    Seen::Unreachable(problem)
                }
            };
            summary.0.push((*server_id, seen));
        }
        (looked, summary)
    }
}

/// Refuses `addr` (or the server it reaches, `identity`) if strongsync followed it before: a
/// retired primary, or the fenced one (unless a follow to it is being finished).
fn refuse_followed(
    upstream: &Upstream,
    addr: &str,
    identity: Option<&ServerIdentity>,
    resuming: bool,
) -> Result<(), ControlError> {
    let same = |p: &KnownPrimary| {
        p.address == addr || identity.is_some_and(|i| p.identity.as_ref() == Some(i))
    };
    if let Some(retired) = upstream.retired.iter().find(|r| same(r)) {
        return Err(ControlError::Retired {
            addr: addr.to_owned(),
            retired: describe(retired),
        });
    }
    if !resuming && same(&upstream.primary) {
        return match identity {
            Some(identity) if upstream.primary.address != addr => {
                Err(ControlError::FencedPrimary {
                    addr: addr.to_owned(),
                    identity: *identity,
                    fenced: upstream.primary.address.clone(),
                })
            }
            _ => Err(ControlError::Retired {
                addr: addr.to_owned(),
                retired: describe(&upstream.primary),
            }),
        };
    }
    Ok(())
}

fn describe(primary: &KnownPrimary) -> String {
    match &primary.identity {
        Some(identity) => format!("{} ({identity})", primary.address),
        None => primary.address.clone(),
    }
}
