//! A server that is to become the primary (or is the one followed), looked at: follow and the
//! identity check log in with the probe account, promote with the failover account, and ask
//! the flavour's questions (see [`crate::flavour::Inspected`]): who it is, what it holds and
//! has received, whether it is writable, whether it still replicates.

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use strongsync_proto::gtid::GtidPosition;
use strongsync_proto::ProtoError;
use thiserror::Error;

use crate::config::ProbeAccount;
use crate::flavour::{Flavour, GtidModeProblem, Inspected, ServerIdentity};
use crate::probe::connect as connect_to;

/// What the server said.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub flavour: Flavour,
    /// Who it is, however its address is spelt.
    pub identity: ServerIdentity,
    /// `host:port` as it names itself.
    pub name: String,
    /// Every GTID it holds.
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
    /// MySQL without a GTID for every transaction.
    pub gtid_mode: Option<GtidModeProblem>,
}

/// Why a server could not be looked at.
#[derive(Debug, Error)]
pub enum CandidateError {
    /// Connecting took too long.
    #[error("cannot connect to {addr} within {timeout:?}")]
    ConnectTimeout {
        /// Where.
        addr: String,
        /// The limit (`timeouts.primary_connect`).
        timeout: Duration,
    },
    /// The login failed.
    #[error("cannot log in to {addr} as {user}: {source}")]
    Login {
        /// Where.
        addr: String,
        /// The account.
        user: String,
        /// Why.
        #[source]
        source: mysql_async::Error,
    },
    /// It did not answer in time.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// A query failed.
    #[error("{query} failed ({source}): the account needs the privilege to read it")]
    Query {
        /// The query.
        query: &'static str,
        /// Why.
        #[source]
        source: mysql_async::Error,
    },
    /// A query returned no row.
    #[error("{0} returned no row")]
    NoRow(&'static str),
    /// An answer does not read.
    #[error("its {what} does not read: {source}")]
    Unreadable {
        /// What was read.
        what: &'static str,
        /// Why.
        #[source]
        source: ProtoError,
    },
}

/// Asks the server at `addr`, within `timeout`.
///
/// # Errors
/// [`CandidateError`]: why it could not be asked.
pub async fn inspect(
    addr: &str,
    account: &ProbeAccount,
    timeout: Duration,
) -> Result<Candidate, CandidateError> {
    let mut conn = connect(addr, account, timeout).await?;
    let asked = tokio::time::timeout(timeout, ask(&mut conn))
        .await
        .unwrap_or(Err(CandidateError::TimedOut(timeout)));
    let _ = conn.disconnect().await;
    asked
}

/// Logs in to the server at `addr` as `account`, within `timeout`.
///
/// # Errors
/// [`CandidateError::ConnectTimeout`], [`CandidateError::Login`].
pub async fn connect(
    addr: &str,
    account: &ProbeAccount,
    timeout: Duration,
) -> Result<Conn, CandidateError> {
    tokio::time::timeout(timeout, connect_to(addr, account, |opts| opts))
        .await
        .map_err(|_| CandidateError::ConnectTimeout {
            addr: addr.to_owned(),
            timeout,
        })?
        .map_err(|source| CandidateError::Login {
            addr: addr.to_owned(),
            user: account.user.clone(),
            source,
        })
}

const VERSION: &str = "SELECT VERSION()";

fn query(query: &'static str) -> impl FnOnce(mysql_async::Error) -> CandidateError {
    move |source| CandidateError::Query { query, source }
}

/// Who the server on `conn` is and what it holds (no look at its channels), within `timeout`:
/// what the watch of the primary asks, on a connection it keeps.
///
/// # Errors
/// [`CandidateError`].
pub async fn identify(
    conn: &mut Conn,
    timeout: Duration,
) -> Result<(Flavour, Inspected), CandidateError> {
    tokio::time::timeout(timeout, inspected_on(conn))
        .await
        .unwrap_or(Err(CandidateError::TimedOut(timeout)))
}

async fn inspected_on(conn: &mut Conn) -> Result<(Flavour, Inspected), CandidateError> {
    let version: Option<String> = conn.query_first(VERSION).await.map_err(query(VERSION))?;
    let flavour = Flavour::of_version(&version.ok_or(CandidateError::NoRow(VERSION))?);
    let inspect = flavour.inspect_query();
    let row: Row = conn
        .query_first(inspect)
        .await
        .map_err(query(inspect))?
        .ok_or(CandidateError::NoRow(inspect))?;
    let values: Vec<Option<String>> = (0..row.len())
        .map(|i| {
            row.get_opt::<Option<String>, _>(i)
                .and_then(Result::ok)
                .flatten()
        })
        .collect();
    let seen = flavour
        .inspected(&values)
        .map_err(|source| CandidateError::Unreadable {
            what: "state",
            source,
        })?;
    Ok((flavour, seen))
}

/// What `SET NAMES` gives `collation_connection` for each of `charsets` on the server,
/// asked on `conn` (the probe's own connection, never a client's) within `timeout` each. A
/// character set the server does not know, or a name that is not one, is left out; past a
/// timeout nothing more is asked (the connection is then in the middle of an exchange).
pub async fn names_collations(
    conn: &mut Conn,
    charsets: &[String],
    timeout: Duration,
) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for charset in charsets {
        if charset.is_empty()
            || !charset
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            continue;
        }
        let asked = async {
            conn.query_drop(format!("SET NAMES {charset}")).await?;
            conn.query_first::<String, _>("SELECT @@collation_connection")
                .await
        };
        match tokio::time::timeout(timeout, asked).await {
            Ok(Ok(Some(collation))) => {
                found.insert(charset.clone(), collation);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    found
}

async fn ask(conn: &mut Conn) -> Result<Candidate, CandidateError> {
    let (flavour, seen) = inspected_on(conn).await?;
    let (channels, running) = flavour.channels_query();
    let rows: Vec<Row> = conn.query(channels).await.map_err(query(channels))?;
    let (received_column, name_column) = flavour.channel_columns();
    let text = |row: &Row, column: &str| {
        row.get_opt::<String, _>(column)
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let replicating = rows
        .iter()
        .filter(|row| {
            running
                .iter()
                .any(|column| text(row, column).eq_ignore_ascii_case("yes"))
        })
        .map(|row| text(row, name_column))
        .collect();
    let mut received = seen.holds.clone();
    for row in &rows {
        let set = flavour
            .parse_position(&text(row, received_column))
            .map_err(|source| CandidateError::Unreadable {
                what: "received GTID position",
                source,
            })?;
        received.extend(&set);
    }
    Ok(Candidate {
        flavour,
        identity: seen.identity,
        name: seen.name,
        holds: seen.holds,
        received,
        read_only: seen.read_only,
        replicating,
        configured: !rows.is_empty(),
        gtid_mode: seen.gtid_mode,
    })
}
