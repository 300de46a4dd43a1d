//! Is the primary reachable? Sessions report every connection they make; a health check that
//! finds no recent report connects on its own (and reads the greeting), at most once per
//! interval, so an idle proxy does not fill the primary's log with probe connections.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::IntGauge;
use thiserror::Error;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use crate::primary;

/// How long a result counts as current.
const FRESH_FOR: Duration = Duration::from_secs(2);

/// What is known of the primary's reachability.
pub struct PrimaryHealth {
    /// The primary followed: a follow moves the check to the new one.
    upstream: crate::probe::Upstream,
    connect_timeout: Duration,
    last: Mutex<Option<Seen>>,
    up: IntGauge,
}

/// Why the primary is not reachable. Cloned, since a recent outcome answers every check
/// until it is stale.
#[derive(Debug, Clone, Error)]
pub enum Unreachable {
    /// A session could not reach it.
    #[error("{0}")]
    Session(Arc<crate::error::Error>),
    /// The check's own connection failed, or its greeting did not come whole.
    #[error("{0}")]
    Io(Arc<io::Error>),
    /// It sent an error instead of its greeting.
    #[error("the primary refuses connections (it sent an error instead of its greeting)")]
    Refused,
    /// What came is no greeting.
    #[error("unexpected greeting byte 0x{0:02x}")]
    NotAGreeting(u8),
    /// Nothing came in time.
    #[error("no greeting within {0:?}")]
    NoGreeting(Duration),
}

#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    result: Result<(), Unreachable>,
}

// === impl PrimaryHealth ===

impl PrimaryHealth {
    /// Health of the primary `upstream` names; `up` is the gauge that mirrors it.
    pub fn new(upstream: crate::probe::Upstream, connect_timeout: Duration, up: IntGauge) -> Self {
        PrimaryHealth {
            upstream,
            connect_timeout,
            last: Mutex::new(None),
            up,
        }
    }

    /// The primary's address.
    pub fn addr(&self) -> String {
        self.upstream.borrow().1.clone()
    }

    /// Records the outcome of a connection to the primary.
    pub fn record(&self, result: Result<(), Unreachable>) {
        self.up.set(i64::from(result.is_ok()));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Seen {
            at: Instant::now(),
            result,
        });
    }

    /// Whether the primary is reachable now: a recent outcome if there is one, otherwise a
    /// fresh connection that reads its greeting.
    ///
    /// # Errors
    /// Why it is not reachable.
    pub async fn check(&self) -> Result<(), Unreachable> {
        let recent = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|seen| seen.at.elapsed() < FRESH_FOR);
        if let Some(seen) = recent {
            return seen.result;
        }
        let result = self.probe().await;
        self.record(result.clone());
        result
    }

    async fn probe(&self) -> Result<(), Unreachable> {
        let io = |e| Unreachable::Io(Arc::new(e));
        let attempt = async {
            let mut stream = primary::connect(&self.addr()).await.map_err(io)?;
            // Header, then the first payload byte: 0x0A for a greeting, 0xFF for a refusal.
            let mut head = [0u8; 5];
            stream.read_exact(&mut head).await.map_err(io)?;
            match head[4] {
                0x0A => Ok(()),
                0xFF => Err(Unreachable::Refused),
                other => Err(Unreachable::NotAGreeting(other)),
            }
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Unreachable::NoGreeting(self.connect_timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use super::*;

    /// A health check against a listener that sends a packet header and the byte given
    /// (`Some(Some(byte))`), or closes at once (`Some(None)`), or says nothing (`None`).
    async fn check_against(answer: Option<Option<u8>>) -> Result<(), Unreachable> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            match answer {
                Some(Some(first)) => socket.write_all(&[1, 0, 0, 0, first]).await.unwrap(),
                Some(None) => drop(socket),
                None => std::future::pending().await,
            }
        });
        let (_keep, upstream) = tokio::sync::watch::channel((1, addr));
        let gauge = IntGauge::new("up", "up").unwrap();
        let health = PrimaryHealth::new(upstream, Duration::from_secs(5), gauge.clone());
        let result = health.check().await;
        assert_eq!(gauge.get(), i64::from(result.is_ok()));
        result
    }

    #[tokio::test(start_paused = true)]
    async fn each_way_of_being_unreachable_is_its_own_case() {
        assert!(check_against(Some(Some(0x0A))).await.is_ok());
        assert!(matches!(
            check_against(Some(Some(0xFF))).await,
            Err(Unreachable::Refused)
        ));
        assert!(matches!(
            check_against(Some(Some(0x42))).await,
            Err(Unreachable::NotAGreeting(0x42))
        ));
        assert!(matches!(
            check_against(Some(None)).await,
            Err(Unreachable::Io(_))
        ));
        assert!(matches!(
            check_against(None).await,
            Err(Unreachable::NoGreeting(limit)) if limit == Duration::from_secs(5)
        ));
    }
}
