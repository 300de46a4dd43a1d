//! `strongsync promote`, for users without a failover manager: fence; look at every replica the
//! config file gives an address for; pick the one that holds everything acknowledged and has
//! received the most; stop its I/O thread and wait for it to apply what it received; stop and
//! reset its replication and make it writable; follow it. Each step is logged, and a rerun after
//! a failure midway picks up where it stopped: a replica already promoted (not replicating,
//! writable, holding everything acknowledged) is taken as it is.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use strongsync_proto::gtid::GtidPosition;
use tracing::{info, warn};

use super::candidate;
use crate::config::ProbeAccount;
use crate::flavour::Flavour;

/// What promote says to a replica of one flavour.
struct Sql {
    stop_io: &'static str,
    /// Starts the SQL thread if it is stopped, so that the relay log is applied.
    start_sql: &'static str,
    /// `SELECT …(?, ?)`: 0 once it has applied a GTID position, within seconds.
    wait_applied: &'static str,
    make_primary: &'static str,
}

fn sql(flavour: Flavour) -> Sql {
    match flavour {
        Flavour::MariaDb => Sql {
            stop_io: "STOP SLAVE IO_THREAD",
            start_sql: "START SLAVE SQL_THREAD",
            wait_applied: "SELECT MASTER_GTID_WAIT(?, ?)",
            make_primary: "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0",
        },
        Flavour::MySql => Sql {
            stop_io: "STOP REPLICA IO_THREAD",
            start_sql: "START REPLICA SQL_THREAD",
            wait_applied: "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
            make_primary: "STOP REPLICA; RESET REPLICA ALL; SET GLOBAL super_read_only = 0; SET GLOBAL read_only = 0",
        },
    }
}

/// One replica, as promote found it.
#[derive(Debug, Clone)]
pub struct Looked {
    pub server_id: u32,
    pub address: String,
    pub flavour: Flavour,
    /// What it will hold once it applied everything it received.
    pub received: GtidPosition,
    /// It has replication configured (running or not): it is not a primary yet.
    pub replicating: bool,
    pub read_only: bool,
}

/// Looks at the replica at `address` (see [`candidate::inspect`]).
///
/// # Errors
/// Why it could not be looked at, in words.
pub async fn look(
    server_id: u32,
    address: &str,
    account: &ProbeAccount,
    timeout: Duration,
) -> Result<Looked, String> {
    let seen = candidate::inspect(address, account, timeout).await?;
    Ok(Looked {
        server_id,
        address: address.to_owned(),
        flavour: seen.flavour,
        received: seen.received,
        replicating: seen.configured,
        read_only: seen.read_only,
    })
}

/// Makes `chosen` a primary: stops its I/O thread, waits up to `apply` for it to apply what
/// it received, stops and resets its replication, makes it writable. Skipped for one already
/// done.
///
/// # Errors
/// The step that failed, in words.
pub async fn make_primary(
    chosen: &Looked,
    account: &ProbeAccount,
    timeout: Duration,
    apply: Duration,
) -> Result<(), String> {
    if !chosen.replicating && !chosen.read_only {
        info!(
            server_id = chosen.server_id,
            "promote: already a primary (a rerun): nothing to do"
        );
        return Ok(());
    }
    let sql = sql(chosen.flavour);
    let mut conn = candidate::connect(&chosen.address, account, timeout).await?;
    let step = |what: &'static str| move |e: mysql_async::Error| format!("{what}: {e}");
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
    let received = chosen.received.to_string();
    info!(server_id = chosen.server_id, %received, ?apply, "promote: waiting for it to apply what it received");
    let waited: Option<i64> = conn
        .exec_first(sql.wait_applied, (received.clone(), apply.as_secs().max(1)))
        .await
        .map_err(step("waiting for it to apply its relay log"))?;
    if waited != Some(0) {
        warn!(server_id = chosen.server_id, %received, "promote: it did not apply what it received in time; nothing more is changed");
        return Err(format!(
            "it did not apply {received} within {apply:?} (failover.promote_apply_timeout); its replication is stopped (I/O thread) and nothing else changed: rerun promote"
        ));
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

/// The replica to promote among `looked`: one that holds everything `acknowledged` holds, of
/// those the one that received the most (the lowest `server_id` of equals). `None` if none
/// holds it all.
pub fn choose<'a>(looked: &'a [Looked], acknowledged: &GtidPosition) -> Option<&'a Looked> {
    looked
        .iter()
        .filter(|l| l.received.covers(acknowledged))
        .max_by_key(|l| (l.received.count(), std::cmp::Reverse(l.server_id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looked(server_id: u32, received: &str) -> Looked {
        Looked {
            server_id,
            address: format!("10.0.0.{server_id}:3306"),
            flavour: Flavour::MariaDb,
            received: GtidPosition::parse(received.as_bytes()).unwrap(),
            replicating: true,
            read_only: true,
        }
    }

    #[test]
    fn picks_the_replica_that_holds_the_acknowledged_and_received_the_most() {
        let acked = GtidPosition::parse(b"0-1-10").unwrap();
        type Case<'a> = (&'a [(u32, &'a str)], Option<u32>);
        let cases: &[Case] = &[
            (&[(2, "0-1-10"), (3, "0-1-12")], Some(3)),
            (&[(2, "0-1-12"), (3, "0-1-12")], Some(2)),
            // The one that received more lacks nothing acknowledged; the other does.
            (&[(2, "0-1-9"), (3, "0-1-11")], Some(3)),
            (&[(2, "0-1-9"), (3, "0-1-8")], None),
            // Two domains: what was received in both counts.
            (&[(2, "0-1-10,1-1-5"), (3, "0-1-12")], Some(2)),
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
}
