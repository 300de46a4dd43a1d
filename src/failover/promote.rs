//! `strongsync promote`, for users without a failover manager: the replicas looked at, the one
//! chosen, and the steps that make it a primary.

use std::fmt;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use strongsync_proto::gtid::GtidPosition;
use thiserror::Error;
use tracing::{info, warn};

use super::candidate::{self, Candidate, CandidateError};
use crate::config::ProbeAccount;
use crate::flavour::ServerIdentity;

/// One replica promote could take, as it found it.
#[derive(Debug, Clone)]
pub struct Looked {
    pub server_id: u32,
    pub address: String,
    pub candidate: Candidate,
}

/// What promote saw of one replica.
#[derive(Debug)]
pub enum Seen {
    /// It could be promoted: what it had received.
    Received(GtidPosition),
    /// It is a primary strongsync followed, by this address or by its identity.
    Followed {
        /// The address strongsync followed it at.
        address: String,
    },
    /// It could not be looked at.
    Unreachable(CandidateError),
}

/// What promote saw of every replica, in the order of the config file.
#[derive(Debug, Default)]
pub struct LookedAt(pub Vec<(u32, Seen)>);

/// Why promote stopped at the replica it chose.
#[derive(Debug, Error)]
pub enum PromoteError {
    /// It could not be reached.
    #[error(transparent)]
    Connect(#[from] CandidateError),
    /// A step failed.
    #[error("{step}: {source}")]
    Step {
        /// What promote was doing.
        step: &'static str,
        /// Why it failed.
        #[source]
        source: mysql_async::Error,
    },
    /// It did not apply what it received in time.
    #[error("it did not apply {received} within {apply:?} (failover.promote_apply_timeout); its replication is stopped (I/O thread) and nothing else changed: rerun promote")]
    NotApplied {
        /// What it had received.
        received: String,
        /// The limit.
        apply: Duration,
    },
}

/// Looks at the replica at `address` (see [`candidate::inspect`]).
///
/// # Errors
/// [`CandidateError`].
pub async fn look(
    server_id: u32,
    address: &str,
    account: &ProbeAccount,
    timeout: Duration,
) -> Result<Looked, CandidateError> {
    let candidate = candidate::inspect(address, account, timeout).await?;
    Ok(Looked {
        server_id,
        address: address.to_owned(),
        candidate,
    })
}

/// Whether `looked` is one of `followed` (the fenced primary and the retired ones, by address
/// and, where known, identity): such a server is never promoted.
pub fn followed_as<'a>(
    looked: &Looked,
    followed: &'a [(String, Option<ServerIdentity>)],
) -> Option<&'a str> {
    followed
        .iter()
        .find(|(address, identity)| {
            *address == looked.address || identity.as_ref() == Some(&looked.candidate.identity)
        })
        .map(|(address, _)| address.as_str())
}

/// Makes `chosen` a primary: stops its I/O thread, waits up to `apply` for it to apply what
/// it received, stops and resets its replication, makes it writable. Each step is logged.
/// Skipped for one already done, so that a rerun after a failure midway picks up where it
/// stopped: a replica already promoted (not replicating, writable, holding the whole watermark)
/// is taken as it is.
///
/// # Errors
/// [`PromoteError`]: the step that failed.
pub async fn make_primary(
    chosen: &Looked,
    account: &ProbeAccount,
    timeout: Duration,
    apply: Duration,
) -> Result<(), PromoteError> {
    let seen = &chosen.candidate;
    if !seen.configured && !seen.read_only {
        info!(
            server_id = chosen.server_id,
            "promote: already a primary (a rerun): nothing to do"
        );
        return Ok(());
    }
    let sql = seen.flavour.promote_sql();
    let mut conn = candidate::connect(&chosen.address, account, timeout).await?;
    let step = |step: &'static str| move |source| PromoteError::Step { step, source };
    info!(
        server_id = chosen.server_id,
        "promote: stopping its I/O thread"
    );
    conn.query_drop(sql.stop_io)
        .await
        .map_err(step("stopping its I/O thread"))?;
    conn.query_drop(sql.start_sql)
        .await
        .map_err(step("starting its SQL thread"))?;
    let received = seen.received.to_string();
    info!(server_id = chosen.server_id, %received, ?apply, "promote: waiting for it to apply what it received");
    let waited: Option<i64> = conn
        .exec_first(sql.wait_applied, (received.clone(), apply.as_secs().max(1)))
        .await
        .map_err(step("waiting for it to apply its relay log"))?;
    if waited != Some(0) {
        warn!(server_id = chosen.server_id, %received, "promote: it did not apply what it received in time; nothing more is changed");
        return Err(PromoteError::NotApplied { received, apply });
    }
    info!(
        server_id = chosen.server_id,
        "promote: stopping and resetting its replication, making it writable"
    );
    conn.query_drop(sql.make_primary)
        .await
        .map_err(step("stopping its replication and making it writable"))?;
    let _ = conn.disconnect().await;
    Ok(())
}

/// The replica to promote among `looked`: one that holds the whole `watermark` (by identity),
/// of those the one that received the most (the lowest `server_id` of equals). `None` if none
/// holds it all.
pub fn choose<'a>(looked: &'a [Looked], watermark: &GtidPosition) -> Option<&'a Looked> {
    looked
        .iter()
        .filter(|l| l.candidate.received.covers(watermark))
        .max_by_key(|l| (l.candidate.received.count(), std::cmp::Reverse(l.server_id)))
}

impl fmt::Display for LookedAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (server_id, seen)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{server_id}: {seen}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Received(received) => write!(f, "received {received:#}"),
            Seen::Followed { address } => write!(
                f,
                "the primary strongsync followed as {address} (fenced or retired; strongsync reinstate makes it a candidate again)"
            ),
            Seen::Unreachable(problem) => write!(f, "{problem}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flavour::Flavour;

    fn looked(server_id: u32, received: &str) -> Looked {
        let received = GtidPosition::parse(received.as_bytes()).unwrap();
        Looked {
            server_id,
            address: format!("10.0.0.{server_id}:3306"),
            candidate: Candidate {
                flavour: Flavour::MariaDb,
                identity: ServerIdentity::MariaDb { server_id },
                name: format!("db{server_id}:3306"),
                holds: received.clone(),
                received,
                read_only: true,
                replicating: vec![String::new()],
                configured: true,
                gtid_mode: None,
            },
        }
    }

    #[test]
    fn picks_the_replica_that_holds_the_watermark_and_received_the_most() {
        let acked = GtidPosition::parse(b"0-1-10").unwrap();
        type Case<'a> = (&'a [(u32, &'a str)], Option<u32>);
        let cases: &[Case] = &[
            (&[(2, "0-1-10"), (3, "0-1-12")], Some(3)),
            (&[(2, "0-1-12"), (3, "0-1-12")], Some(2)),
            // The one that received more lacks nothing of the watermark; the other does.
            (&[(2, "0-1-9"), (3, "0-1-11")], Some(3)),
            (&[(2, "0-1-9"), (3, "0-1-8")], None),
            // Two domains: what was received in both counts.
            (&[(2, "0-1-10,1-1-5"), (3, "0-1-12")], Some(2)),
            // A replica that received more of another server's history does not hold server
            // 1's GTID of the watermark (a fenced primary's tail, a history numbered far ahead).
            (&[(2, "0-1-10"), (3, "0-4-1000000")], Some(2)),
            (&[(2, "0-1-9"), (3, "0-4-1000000")], None),
            (&[], None),
        ];
        for (replicas, want) in cases {
            let looked: Vec<Looked> = replicas.iter().map(|(id, r)| looked(*id, r)).collect();
            assert_eq!(
                choose(&looked, &acked).map(|l| l.server_id),
                *want,
                "{replicas:?}"
            );
        }
    }

    /// The case: a replica holding epoch 1's fenced tail 0-1-101..105 against epoch
    /// 2's 0-2-103 of the watermark is not taken; the rejoined old primary holding 0-2-103 is.
    #[test]
    fn a_replica_holding_a_fenced_tail_does_not_cover_the_next_epochs_commits() {
        let acked = GtidPosition::parse(b"0-2-103").unwrap();
        let tail = looked(3, "0-1-105");
        let rejoined = looked(1, "0-2-103");
        let both = [tail, rejoined];
        assert_eq!(choose(&both, &acked).map(|l| l.server_id), Some(1));
    }

    #[test]
    fn the_fenced_primary_under_another_name_is_followed_already() {
        let l = looked(1, "0-1-10");
        let fenced = vec![(
            "db1.example:3306".to_owned(),
            Some(ServerIdentity::MariaDb { server_id: 1 }),
        )];
        assert_eq!(followed_as(&l, &fenced), Some("db1.example:3306"));
        let other = vec![(
            "db9:3306".to_owned(),
            Some(ServerIdentity::MariaDb { server_id: 9 }),
        )];
        assert_eq!(followed_as(&l, &other), None);
        let by_address = vec![("10.0.0.1:3306".to_owned(), None)];
        assert_eq!(followed_as(&l, &by_address), Some("10.0.0.1:3306"));
    }
}
