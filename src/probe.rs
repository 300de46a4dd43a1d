//! The probe: strongsync's own connection to the primary, for one question — how far the
//! primary's binlog reaches (`@@global.gtid_binlog_pos`). MariaDB writes a transaction to its
//! binlog before the statement's response leaves, so that position, read after a response
//! arrived, bounds everything the response may have committed. Sessions ask it for the rare
//! response that must go to the client before the session's own connection can be asked what
//! it committed (a `LOAD DATA LOCAL INFILE` request, more than `max_held_response_bytes` held),
//! or when that connection cannot answer. The account needs no privilege; its password is
//! never logged.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};
use strongsync_proto::ProtoError;
use thiserror::Error;
use tokio::sync::Mutex;

use crate::config::ProbeAccount;
use crate::durability::GtidPosition;

/// The probe.
pub struct Probe {
    opts: Opts,
    timeout: Duration,
    /// The connection, opened on first use and again after a failure. Callers take turns: each
    /// needs a position read after its own response arrived.
    conn: Mutex<Option<Conn>>,
}

/// Why the probe could not say.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// Connecting or asking took longer than allowed.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The connection or the query failed.
    #[error(transparent)]
    Client(#[from] mysql_async::Error),
    /// The answer is not a GTID position.
    #[error("@@global.gtid_binlog_pos {value:?}: {source}")]
    Unreadable {
        /// What the primary said.
        value: String,
        /// Why it does not parse.
        source: ProtoError,
    },
}

// === impl Probe ===

impl Probe {
    /// A probe of `primary` (`host:port` or a Unix socket's path) as `account`; each question
    /// (connecting included) may take `timeout`.
    pub fn new(primary: &str, account: &ProbeAccount, timeout: Duration) -> Probe {
        let builder = OptsBuilder::default()
            .user(Some(account.user.clone()))
            .pass(Some(account.password.clone()))
            .prefer_socket(false)
            .stmt_cache_size(0);
        let builder = if crate::primary::is_socket_path(primary) {
            builder.socket(Some(primary))
        } else {
            let (host, port) = primary.rsplit_once(':').unwrap_or((primary, "3306"));
            builder
                .ip_or_hostname(host.trim_start_matches('[').trim_end_matches(']'))
                .tcp_port(port.parse().unwrap_or(3306))
        };
        Probe {
            opts: builder.into(),
            timeout,
            conn: Mutex::new(None),
        }
    }

    /// The primary's binlog position now: per replication domain, the newest GTID written.
    ///
    /// # Errors
    /// [`ProbeError`] if the primary could not be asked in time or answered nonsense; the
    /// connection is opened again next time.
    pub async fn binlog_position(&self) -> Result<GtidPosition, ProbeError> {
        let mut slot = self.conn.lock().await;
        let asked = tokio::time::timeout(self.timeout, async {
            if slot.is_none() {
                *slot = Some(Conn::new(self.opts.clone()).await?);
            }
            let conn = slot.as_mut().expect("just opened");
            let value: Option<String> = conn.query_first("SELECT @@global.gtid_binlog_pos").await?;
            Ok::<_, mysql_async::Error>(value.unwrap_or_default())
        })
        .await;
        let value = match asked {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => {
                *slot = None;
                return Err(error.into());
            }
            Err(_) => {
                *slot = None;
                return Err(ProbeError::TimedOut(self.timeout));
            }
        };
        GtidPosition::parse(value.as_bytes())
            .map_err(|source| ProbeError::Unreadable { value, source })
    }
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("user", &self.opts.user())
            .finish_non_exhaustive()
    }
}
