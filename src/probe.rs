//! The probe: strongsync's own connection to the primary, for one question — how far the primary's
//! binlog reaches (the flavour's [`bound_queries`](Flavour::bound_queries), MariaDB's
//! `@@global.gtid_binlog_pos`, MySQL's `SHOW BINARY LOG STATUS` or, before 8.2, `SHOW MASTER
//! STATUS`).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use strongsync_proto::ProtoError;
use thiserror::Error;
use tokio::sync::{watch, Notify};
use tracing::debug;

use strongsync_proto::gtid::GtidPosition;

use crate::config::ProbeAccount;
use crate::flavour::Flavour;

/// What one reading found: the binlog position, or why there is none.
pub type Reading = Result<Arc<GtidPosition>, Arc<ProbeError>>;

/// The probe. Dropping it ends its task.
///
/// Both write a transaction to their binlog before the statement's response leaves, so that
/// position, read after a response arrived, bounds everything the response may have committed or
/// revealed. Sessions ask it for every response under `visibility = "quorum"`, and otherwise for
/// the rare response that must go to the client before the session's own connection can be asked
/// what it committed (a `LOAD DATA LOCAL INFILE` request, more than `max_held_response_bytes`
/// held), or when that connection cannot answer. On MariaDB the account needs no privilege; on
/// MySQL it needs `REPLICATION CLIENT`. Its password is never logged.
///
/// Questions are batched in rounds, as Raft's ReadIndex batches reads: one reading serves every
/// caller that asked before it was sent, and callers who ask while a reading is on its way are
/// served by the next one, sent as soon as that one is back. One reading is in flight at a time, so
/// the primary sees at most one probe query per round trip, however many sessions ask.
pub struct Probe {
    rounds: Arc<Rounds>,
    /// Wakes the task: a caller is waiting for the next round (or the probe is gone).
    wake: Arc<Notify>,
    user: String,
}

/// The primary followed, with its epoch (see [`crate::failover::Control::watch`]).
pub type Upstream = watch::Receiver<(u64, String)>;

/// The rounds of readings, shared by callers and the task that sends them.
struct Rounds {
    /// Where readings go, and as whom; a new epoch opens a connection to the new primary.
    upstream: Mutex<Upstream>,
    account: ProbeAccount,
    timeout: Duration,
    next: Mutex<NextRound>,
    /// The last round done, with what it found.
    done: watch::Sender<Done>,
}

/// The round the next reading will be, whether anyone waits for it, and the flavour of the
/// primary its callers speak to (one primary: always the same; not known until one asks).
struct NextRound {
    number: u64,
    wanted: bool,
    flavour: Option<Flavour>,
}

#[derive(Clone)]
struct Done {
    round: u64,
    reading: Reading,
}

/// Why the probe could not say.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// No probe account is configured.
    #[error("no [probe] account is configured")]
    NotConfigured,
    /// Connecting or asking took longer than allowed.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The connection or the query failed.
    #[error(transparent)]
    Client(#[from] mysql_async::Error),
    /// The answer is not a GTID position.
    #[error("the primary's binlog position {value:?}: {source}")]
    Unreadable {
        /// What the primary said.
        value: String,
        /// Why it does not parse.
        source: ProtoError,
    },
}

// === impl Probe ===

impl Probe {
    /// A probe of the primary `upstream` names (and of the next one, after a follow) as
    /// `account`; each reading (connecting included) may take `timeout`. Starts its task on
    /// the current runtime.
    pub fn new(upstream: Upstream, account: &ProbeAccount, timeout: Duration) -> Probe {
        let (done, _) = watch::channel(Done {
            round: 0,
            reading: Err(Arc::new(ProbeError::TimedOut(Duration::ZERO))),
        });
        let rounds = Arc::new(Rounds {
            upstream: Mutex::new(upstream),
            account: account.clone(),
            timeout,
            next: Mutex::new(NextRound {
                number: 1,
                wanted: false,
                flavour: None,
            }),
            done,
        });
        let wake = Arc::new(Notify::new());
        tokio::spawn(send_rounds(Arc::downgrade(&rounds), Arc::clone(&wake)));
        Probe {
            rounds,
            wake,
            user: account.user.clone(),
        }
    }

    /// The binlog position of a primary of `flavour`, read after this call began: per
    /// replication domain, the newest GTID written.
    ///
    /// # Errors
    /// [`ProbeError`] if the primary could not be asked in time or answered nonsense; the
    /// connection is opened again for the next round.
    pub async fn binlog_position(&self, flavour: Flavour) -> Reading {
        let round = {
            let mut next = self.rounds.lock();
            next.wanted = true;
            next.flavour = Some(flavour);
            next.number
        };
        self.wake.notify_one();
        let mut done = self.rounds.done.subscribe();
        let reading = match done.wait_for(|d| d.round >= round).await {
            Ok(done) => done.reading.clone(),
            // The sender lives in `rounds`, which this probe holds.
            Err(_) => unreachable!("the probe's rounds outlive its callers"),
        };
        reading
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        // The task holds only a weak reference: woken, it finds the rounds gone and ends.
        self.wake.notify_one();
    }
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// The server's answer to a statement it cannot parse.
const ER_PARSE_ERROR: u16 = 1064;

/// The probe's connection: to the primary of `epoch`, asking the flavour's bound query
/// numbered `query` (the first the server knows).
struct ProbeConn {
    epoch: u64,
    conn: Conn,
    query: usize,
}

// === impl Rounds ===

impl Rounds {
    fn lock(&self) -> std::sync::MutexGuard<'_, NextRound> {
        self.next.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims the next round if anyone waits for it.
    fn claim(&self) -> Option<(u64, Flavour)> {
        let mut next = self.lock();
        let flavour = next.flavour.filter(|_| next.wanted)?;
        next.wanted = false;
        next.number += 1;
        Some((next.number - 1, flavour))
    }

    /// One reading on `conn` (opened if there is none, or if it is to a primary of an earlier
    /// epoch; dropped after a failure).
    async fn read(&self, conn: &mut Option<ProbeConn>, flavour: Flavour) -> Reading {
        let (epoch, primary) = self
            .upstream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .borrow_and_update()
            .clone();
        if conn.as_ref().is_some_and(|open| open.epoch != epoch) {
            if let Some(old) = conn.take() {
                let _ = tokio::time::timeout(self.timeout, old.conn.disconnect()).await;
            }
        }
        let asked = tokio::time::timeout(self.timeout, async {
            if conn.is_none() {
                // The one statement, prepared once per connection where the flavour prepares
                // it (`Flavour::bound_is_prepared`).
                let opened =
                    connect(&primary, &self.account, |opts| opts.stmt_cache_size(1)).await?;
                *conn = Some(ProbeConn {
                    epoch,
                    conn: opened,
                    query: 0,
                });
            }
            let open = conn.as_mut().expect("just opened");
            let queries = flavour.bound_queries();
            loop {
                let query = queries[open.query.min(queries.len() - 1)];
                let answer = if flavour.bound_is_prepared() {
                    open.conn
                        .exec_first::<mysql_async::Row, _, _>(query, ())
                        .await
                } else {
                    open.conn.query_first::<mysql_async::Row, _>(query).await
                };
                match answer {
                    Ok(row) => {
                        return Ok::<_, mysql_async::Error>(row.map(values).unwrap_or_default())
                    }
                    // A server that does not know this statement (MySQL 8.0 and
                    // `SHOW BINARY LOG STATUS`) is asked the older one, on this connection
                    // from now on; the connection itself is still good.
                    Err(mysql_async::Error::Server(error))
                        if error.code == ER_PARSE_ERROR && open.query + 1 < queries.len() =>
                    {
                        debug!(
                            query,
                            next = queries[open.query + 1],
                            "the primary does not know the bound query"
                        );
                        open.query += 1;
                    }
                    Err(error) => return Err(error),
                }
            }
        })
        .await;
        let row = match asked {
            Ok(Ok(row)) => row,
            Ok(Err(error)) => {
                *conn = None;
                return Err(Arc::new(error.into()));
            }
            Err(_) => {
                *conn = None;
                return Err(Arc::new(ProbeError::TimedOut(self.timeout)));
            }
        };
        flavour.parse_bound(&row).map(Arc::new).map_err(|source| {
            let value = row
                .iter()
                .map(|v| v.as_deref().map_or("NULL".into(), String::from_utf8_lossy))
                .collect::<Vec<_>>()
                .join(" ");
            Arc::new(ProbeError::Unreadable { value, source })
        })
    }
}

/// A text-protocol row's values as the bytes the server sent (`None` for NULL).
fn values(row: mysql_async::Row) -> Vec<Option<Vec<u8>>> {
    row.unwrap()
        .into_iter()
        .map(|value| match value {
            mysql_async::Value::NULL => None,
            mysql_async::Value::Bytes(bytes) => Some(bytes),
            other => Some(other.as_sql(true).into_bytes()),
        })
        .collect()
}

/// The probe's task: while anyone waits, sends the next round's reading (after the callers of
/// that round asked) and publishes it.
async fn send_rounds(rounds: Weak<Rounds>, wake: Arc<Notify>) {
    let mut conn = None;
    loop {
        wake.notified().await;
        let Some(rounds) = rounds.upgrade() else {
            break;
        };
        loop {
            // Sessions whose responses are already in let their turn come first, so that they
            // join this round rather than each start one.
            tokio::task::yield_now().await;
            let Some((round, flavour)) = rounds.claim() else {
                break;
            };
            let reading = rounds.read(&mut conn, flavour).await;
            if let Err(error) = &reading {
                debug!(%error, round, "probe reading failed");
            }
            rounds.done.send_replace(Done { round, reading });
        }
    }
    if let Some(open) = conn {
        let _ = open.conn.disconnect().await;
    }
}

/// Logs in to the server at `primary` as `account`, with TLS as `account.tls` says (under
/// `preferred`, plain when the server offers none); `options` adds to the connection's options.
///
/// # Errors
/// The login's error.
pub(crate) async fn connect(
    primary: &str,
    account: &ProbeAccount,
    options: impl Fn(OptsBuilder) -> OptsBuilder,
) -> Result<Conn, mysql_async::Error> {
    let mut builder = OptsBuilder::default()
        .user(Some(account.user.clone()))
        .pass(Some(account.password.clone()))
        .prefer_socket(false);
    builder = if crate::primary::is_socket_path(primary) {
        // A Unix socket is secure already: no TLS on it.
        builder.socket(Some(primary))
    } else {
        let (host, port) = primary.rsplit_once(':').unwrap_or((primary, "3306"));
        builder
            .ip_or_hostname(host.trim_start_matches('[').trim_end_matches(']'))
            .tcp_port(port.parse().unwrap_or(3306))
    };
    let builder = options(builder);
    let ssl = crate::tls::primary::ssl_opts(account.tls, account.tls_ca.as_deref())
        .filter(|_| !crate::primary::is_socket_path(primary));
    let Some(ssl) = ssl else {
        return Conn::new(builder).await;
    };
    match Conn::new(builder.clone().ssl_opts(Some(ssl))).await {
        Err(mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer))
            if !account.tls.required() =>
        {
            Conn::new(builder).await
        }
        other => other,
    }
}
