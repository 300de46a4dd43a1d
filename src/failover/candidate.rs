//! A server that is to become the primary, looked at before it does (by follow, with the probe
//! account; by promote, with the failover account): which flavour it is, what it holds and has
//! received, whether it is writable and whether it replicates. On MariaDB reading the channels
//! needs `SLAVE MONITOR`; on MySQL `REPLICATION CLIENT` covers them.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use strongsync_proto::gtid::GtidPosition;

use crate::config::ProbeAccount;
use crate::flavour::Flavour;
use crate::probe::opts_for;

/// What the server said.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub flavour: Flavour,
    /// Every GTID it holds: its binlog's and (MariaDB) the ones it applied as a replica.
    pub holds: GtidPosition,
    /// What it will hold once it has applied everything it received: `holds` and what its
    /// channels received.
    pub received: GtidPosition,
    /// `read_only` or `super_read_only` is on.
    pub read_only: bool,
    /// Replication channels whose I/O or SQL thread still runs, by name (`''` the default).
    pub replicating: Vec<String>,
    /// It has a replication channel at all, running or not.
    pub configured: bool,
}

/// The column of the channels' rows with what the channel received (MariaDB `Gtid_IO_Pos`,
/// MySQL `Retrieved_Gtid_Set`, which is `RECEIVED_TRANSACTION_SET`).
fn received_column(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::MariaDb => "Gtid_IO_Pos",
        Flavour::MySql => "Retrieved_Gtid_Set",
    }
}

/// Asks the server at `addr`, within `timeout`.
///
/// # Errors
/// Why it could not be asked, in words.
pub async fn inspect(
    addr: &str,
    account: &ProbeAccount,
    timeout: Duration,
) -> Result<Candidate, String> {
    let mut conn = connect(addr, account, timeout).await?;
    let asked = tokio::time::timeout(timeout, ask(&mut conn))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")));
    let _ = conn.disconnect().await;
    asked
}

/// Logs in to the server at `addr` as `account`, within `timeout`.
///
/// # Errors
/// Why not, in words.
pub(super) async fn connect(
    addr: &str,
    account: &ProbeAccount,
    timeout: Duration,
) -> Result<Conn, String> {
    tokio::time::timeout(timeout, Conn::new(opts_for(addr, account)))
        .await
        .map_err(|_| format!("cannot connect to {addr} within {timeout:?}"))?
        .map_err(|e| format!("cannot log in to {addr} as {}: {e}", account.user))
}

/// Which flavour the server on `conn` is.
async fn flavour_of(conn: &mut Conn) -> Result<Flavour, String> {
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(|e| e.to_string())?;
    Ok(if version.unwrap_or_default().contains("MariaDB") {
        Flavour::MariaDb
    } else {
        Flavour::MySql
    })
}

async fn ask(conn: &mut Conn) -> Result<Candidate, String> {
    let flavour = flavour_of(conn).await?;
    let row: Option<(String, String, u8, u8)> = conn
        .query_first(flavour.candidate_query())
        .await
        .map_err(|e| e.to_string())?;
    let (binlog, applied, read_only, super_read_only) =
        row.ok_or("it returned no row for its GTID position")?;
    let mut holds = flavour
        .parse_position(&binlog)
        .map_err(|e| format!("its GTID position {binlog:?}: {e}"))?;
    let applied = flavour
        .parse_position(&applied)
        .map_err(|e| format!("its applied GTID position {applied:?}: {e}"))?;
    holds.extend(&applied);
    let (channels, running) = flavour.channels_query();
    let rows: Vec<Row> = conn.query(channels).await.map_err(|e| {
        format!("{channels} failed ({e}): the account needs the privilege to read it")
    })?;
    let replicating = rows
        .iter()
        .filter(|row| {
            running.iter().any(|column| {
                row.get_opt::<String, _>(*column)
                    .and_then(Result::ok)
                    .is_some_and(|v| v.eq_ignore_ascii_case("yes"))
            })
        })
        .map(|row| {
            row.get_opt::<String, _>("Connection_name")
                .or_else(|| row.get_opt::<String, _>("Channel_Name"))
                .and_then(Result::ok)
                .unwrap_or_default()
        })
        .collect();
    let mut received = holds.clone();
    let sets = rows.iter().filter_map(|row| {
        row.get_opt::<String, _>(received_column(flavour))
            .and_then(Result::ok)
    });
    for text in sets {
        let set = flavour
            .parse_position(&text)
            .map_err(|e| format!("its received GTID position {text:?}: {e}"))?;
        received.extend(&set);
    }
    Ok(Candidate {
        flavour,
        holds,
        received,
        read_only: read_only != 0 || super_read_only != 0,
        replicating,
        configured: !rows.is_empty(),
    })
}
