//! Writers for the failover tests: they commit through strongsync the whole time, reconnect
//! after any error (a kill, the fence, the refusals while fenced), and record every id whose
//! INSERT came back OK, and the GTIDs each fence error named.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use tokio_util::sync::CancellationToken;

/// What the writers were told.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Ids whose INSERT came back OK.
    pub acknowledged: Vec<u64>,
    /// The fence's errors (1180): the GTIDs each named.
    pub cut_off: Vec<String>,
}

/// `count` writers inserting into `sbtest.ledger (id BIGINT PRIMARY KEY)` through `url`.
pub struct Writers {
    pub ledger: Arc<Mutex<Ledger>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    pub fn start(url: &str, count: u64) -> Writers {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let stop = CancellationToken::new();
        let tasks = (0..count)
            .map(|w| tokio::spawn(writer(url.to_owned(), w, Arc::clone(&ledger), stop.clone())))
            .collect();
        Writers {
            ledger,
            stop,
            tasks,
        }
    }

    /// Ids acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.ledger.lock().unwrap().acknowledged.len()
    }

    /// Stops the writers and waits for them (a minute at most: a writer whose commit stays
    /// parked fails the test rather than hanging it).
    pub async fn stop(self) -> Ledger {
        stop_writers(&self.stop, self.tasks).await;
        std::mem::take(&mut *self.ledger.lock().unwrap())
    }
}

/// Cancels `stop` and waits for the writers' `tasks` (a minute at most: a writer whose commit
/// stays parked fails the test rather than hanging it).
async fn stop_writers(stop: &CancellationToken, tasks: Vec<tokio::task::JoinHandle<()>>) {
    stop.cancel();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("a writer still waits for its statement a minute after the stop")
            .unwrap();
    }
}

async fn writer(url: String, writer: u64, ledger: Arc<Mutex<Ledger>>, stop: CancellationToken) {
    let mut seq = 0;
    while !stop.is_cancelled() {
        let Ok(mut conn) = Conn::new(Opts::from_url(&url).unwrap()).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !stop.is_cancelled() {
            seq += 1;
            let id = writer << 32 | seq;
            match conn
                .query_drop(format!("INSERT INTO sbtest.ledger (id) VALUES ({id})"))
                .await
            {
                Ok(()) => ledger.lock().unwrap().acknowledged.push(id),
                Err(mysql_async::Error::Server(e)) if e.code == 1180 => {
                    ledger.lock().unwrap().cut_off.push(named_gtids(&e.message));
                }
                Err(_) => break,
            }
        }
    }
}

/// The GTIDs a fence's error (1180) names.
fn named_gtids(message: &str) -> String {
    message
        .split("transaction ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_default()
        .to_owned()
}

/// What a server holds of `sbtest.ledger`.
pub const IDS: &str = "SELECT id FROM sbtest.ledger";

/// The ids in the rows of [`IDS`].
pub fn ids_of(rows: Vec<Vec<String>>) -> HashSet<u64> {
    rows.iter()
        .filter_map(|row| row.first()?.parse().ok())
        .collect()
}

/// Where a planned switch or a partition stands, as the writers see it when they send each
/// statement: what a statement may reach depends on when it was sent.
pub mod phase {
    /// Before anything happened to the primary.
    pub const BEFORE: u32 = 0;
    /// The primary was cut off from strongsync (a partition), or fenced.
    pub const CUT: u32 = 1;
    /// strongsync follows the new primary.
    pub const FOLLOWED: u32 = 2;
}

/// One statement a pooled writer sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub id: u64,
    /// [`phase`] (or a later moment a test counts) when it was sent.
    pub phase: u32,
    /// It came back OK.
    pub acknowledged: bool,
}

/// What pooled writers sent and were told.
#[derive(Debug, Default)]
pub struct PooledLedger {
    pub sent: Vec<Sent>,
    /// The fence's errors (1180): the GTIDs each named.
    pub cut_off: Vec<String>,
}

impl PooledLedger {
    /// Ids whose INSERT came back OK.
    pub fn acknowledged(&self) -> HashSet<u64> {
        self.sent
            .iter()
            .filter(|s| s.acknowledged)
            .map(|s| s.id)
            .collect()
    }

    /// Ids sent from `phase` on.
    pub fn sent_from(&self, phase: u32) -> HashSet<u64> {
        self.sent
            .iter()
            .filter(|s| s.phase >= phase)
            .map(|s| s.id)
            .collect()
    }

    /// Asserts that no id sent from `phase` on, nor any of `also`, is among `on_old` (the rows
    /// of the old primary), naming the event `after`.
    pub fn assert_none_reached(
        &self,
        phase: u32,
        also: impl IntoIterator<Item = u64>,
        on_old: &HashSet<u64>,
        after: &str,
    ) {
        let late: Vec<_> = self
            .sent_from(phase)
            .into_iter()
            .chain(also)
            .filter(|id| on_old.contains(id))
            .collect();
        assert!(
            late.is_empty(),
            "the old primary got rows sent after {after}: {late:?}"
        );
    }
}

/// Writers sharing a connection pool, as an application's do: a connection is taken for each
/// statement and given back after it; one that failed is dropped and the pool opens another.
pub struct PooledWriters {
    pub ledger: Arc<Mutex<PooledLedger>>,
    pub phase: Arc<std::sync::atomic::AtomicU32>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pool: mysql_async::Pool,
}

impl PooledWriters {
    /// `count` writers inserting into `sbtest.ledger` through a pool of `count` connections
    /// to `url`; ids are `writer << 32 | n`, above `first` ones already used.
    pub fn start(url: &str, count: u64) -> PooledWriters {
        let opts = mysql_async::OptsBuilder::from_opts(Opts::from_url(url).unwrap()).pool_opts(
            mysql_async::PoolOpts::default()
                .with_constraints(mysql_async::PoolConstraints::new(1, count as usize).unwrap()),
        );
        let pool = mysql_async::Pool::new(opts);
        let ledger = Arc::new(Mutex::new(PooledLedger::default()));
        let phase = Arc::new(std::sync::atomic::AtomicU32::new(phase::BEFORE));
        let stop = CancellationToken::new();
        let tasks = (0..count)
            .map(|w| {
                tokio::spawn(pooled_writer(
                    pool.clone(),
                    w + 1,
                    Arc::clone(&ledger),
                    Arc::clone(&phase),
                    stop.clone(),
                ))
            })
            .collect();
        PooledWriters {
            ledger,
            phase,
            stop,
            tasks,
            pool,
        }
    }

    /// Statements acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        let ledger = self.ledger.lock().unwrap();
        ledger.sent.iter().filter(|s| s.acknowledged).count()
    }

    /// Statements sent from now on are of `phase`.
    pub fn enter(&self, phase: u32) {
        self.phase.store(phase, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stops the writers and waits for them (a minute at most), then closes the pool.
    pub async fn stop(self) -> PooledLedger {
        stop_writers(&self.stop, self.tasks).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.pool.disconnect()).await;
        std::mem::take(&mut *self.ledger.lock().unwrap())
    }
}

async fn pooled_writer(
    pool: mysql_async::Pool,
    writer: u64,
    ledger: Arc<Mutex<PooledLedger>>,
    phase: Arc<std::sync::atomic::AtomicU32>,
    stop: CancellationToken,
) {
    let mut seq = 0;
    while !stop.is_cancelled() {
        let Ok(mut conn) = pool.get_conn().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        seq += 1;
        let id = writer << 32 | seq;
        let now = phase.load(std::sync::atomic::Ordering::SeqCst);
        let result = conn
            .query_drop(format!("INSERT INTO sbtest.ledger (id) VALUES ({id})"))
            .await;
        let acknowledged = result.is_ok();
        {
            let mut book = ledger.lock().unwrap();
            book.sent.push(Sent {
                id,
                phase: now,
                acknowledged,
            });
            if let Err(mysql_async::Error::Server(e)) = &result {
                if e.code == 1180 {
                    book.cut_off.push(named_gtids(&e.message));
                }
            }
        }
        if !acknowledged {
            // Refused (the fence) or cut off: this connection may be closed; the pool opens
            // another. Not at once, so a fenced proxy is not asked a thousand times a second.
            drop(conn);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
