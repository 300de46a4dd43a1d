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
        self.stop.cancel();
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("a writer still waits for its statement a minute after the stop")
                .unwrap();
        }
        std::mem::take(&mut *self.ledger.lock().unwrap())
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
                    let gtids = e
                        .message
                        .split("transaction ")
                        .nth(1)
                        .and_then(|rest| rest.split(' ').next())
                        .unwrap_or_default()
                        .to_owned();
                    ledger.lock().unwrap().cut_off.push(gtids);
                }
                Err(_) => break,
            }
        }
    }
}

/// What a server holds of `sbtest.ledger`.
pub const IDS: &str = "SELECT id FROM sbtest.ledger";

/// The ids in the rows of [`IDS`].
pub fn ids_of(rows: Vec<Vec<String>>) -> HashSet<u64> {
    rows.iter()
        .filter_map(|row| row.first()?.parse().ok())
        .collect()
}
