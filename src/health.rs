//! Is the primary reachable? Sessions report every connection they make; a health check that
//! finds no recent report connects on its own (and reads the greeting), at most once per
//! interval, so an idle proxy does not fill the primary's log with probe connections.

use std::sync::Mutex;
use std::time::Duration;

use prometheus::IntGauge;
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

#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    result: Result<(), String>,
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
    pub fn record(&self, result: Result<(), String>) {
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
    pub async fn check(&self) -> Result<(), String> {
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

    async fn probe(&self) -> Result<(), String> {
        let attempt = async {
            let mut stream = primary::connect(&self.addr())
                .await
                .map_err(|e| e.to_string())?;
            // Header, then the first payload byte: 0x0A for a greeting, 0xFF for a refusal.
            let mut head = [0u8; 5];
            stream
                .read_exact(&mut head)
                .await
                .map_err(|e| e.to_string())?;
            match head[4] {
                0x0A => Ok(()),
                0xFF => Err(
                    "the primary refuses connections (it sent an error instead of its greeting)"
                        .into(),
                ),
                other => Err(format!("unexpected greeting byte 0x{other:02x}")),
            }
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(format!("no greeting within {:?}", self.connect_timeout)),
        }
    }
}
