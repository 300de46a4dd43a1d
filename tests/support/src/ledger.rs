//! The acknowledged-commit ledger's common parts, for the kill tests on either server: writers
//! that record every OK, what a replica holds, and which acknowledged ids a set of replicas lacks.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};

use crate::mariadb::{wait_for, Deadline};

/// The ledger's table: a writer's rows, and its newest ones found by the index.
pub const TABLE: &str = "CREATE TABLE sbtest.ledger (id BIGINT UNSIGNED PRIMARY KEY, \
     writer INT NOT NULL, KEY newest (writer, id)) ENGINE=InnoDB";

/// Generous bound for "eventually" (a guard against hangs, not a timing expectation).
const PATIENCE: Duration = Duration::from_secs(90);

/// How a writer commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// One `INSERT` a commit.
    Autocommit,
    /// `BEGIN`, two `INSERT`s, `COMMIT`.
    Explicit,
    /// `XA START`, `INSERT`, `XA END`, `XA PREPARE` (acknowledged on its own), `XA COMMIT`.
    Xa,
}

/// What the clients were told, and what readers saw.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Ids whose commit returned OK, in the order the OKs came.
    pub committed: Vec<u64>,
    /// XA branches whose PREPARE returned OK and whose COMMIT did not: xid → its ids.
    pub prepared: HashMap<String, Vec<u64>>,
    /// Per style, the commits (or prepares) acknowledged.
    pub oks: HashMap<&'static str, u64>,
    /// Writers that ended on an error (after the kill, every one should).
    pub errors: Vec<String>,
    /// Ids a reader saw: in a result set, or in a duplicate-key error.
    pub observed: HashSet<u64>,
    /// Per way of observing, the rows observed.
    pub observations: HashMap<&'static str, u64>,
}

pub type SharedLedger = Arc<Mutex<Ledger>>;

/// The load of one round: writers (and whatever else a test spawns) on a runtime of their own,
/// so that the test thread can kill servers and run SQL meanwhile.
pub struct Load {
    runtime: tokio::runtime::Runtime,
    ledger: SharedLedger,
    styles: &'static [Style],
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What one replica holds once it has applied everything it received.
#[derive(Debug, Default)]
pub struct Held {
    pub ids: HashSet<u64>,
    /// XA branches it holds prepared (by xid).
    pub prepared: HashSet<String>,
}

// === impl Style ===

impl Style {
    pub fn name(self) -> &'static str {
        match self {
            Style::Autocommit => "autocommit",
            Style::Explicit => "explicit",
            Style::Xa => "xa",
        }
    }
}

// === impl Ledger ===

impl Ledger {
    /// Transactions acknowledged: commits, and XA branches prepared but not committed.
    pub fn acknowledged(&self) -> usize {
        self.committed.len() + self.prepared.len()
    }

    /// Acknowledged transactions found on fewer than `quorum` of `replicas`, described. A
    /// prepared XA branch counts on a replica that holds it prepared or its rows committed.
    pub fn lost(&self, replicas: &[&Held], quorum: usize) -> Vec<String> {
        let mut lost = Vec::new();
        for id in &self.committed {
            let on = replicas.iter().filter(|r| r.ids.contains(id)).count();
            if on < quorum {
                lost.push(format!("committed id {id:#x} on {on} replica(s)"));
            }
        }
        for (xid, ids) in &self.prepared {
            let on = replicas
                .iter()
                .filter(|r| r.prepared.contains(xid) || ids.iter().all(|id| r.ids.contains(id)))
                .count();
            if on < quorum {
                lost.push(format!("prepared XA branch {xid} on {on} replica(s)"));
            }
        }
        lost
    }

    /// Observed rows found on fewer than `quorum` of `replicas`, described.
    pub fn lost_observations(&self, replicas: &[&Held], quorum: usize) -> Vec<String> {
        let mut lost: Vec<String> = self
            .observed
            .iter()
            .filter(|id| replicas.iter().filter(|r| r.ids.contains(id)).count() < quorum)
            .map(|id| format!("observed id {id:#x}"))
            .collect();
        lost.sort();
        lost
    }

    /// Asserts, for `round`, that every transaction acknowledged is on at least `quorum` of
    /// `held` (what each replica holds once it applied what it received), and on each of the
    /// failover `candidates` (by index into `held`) that `/status` named, of which there are at
    /// least `quorum`: a failover tool promotes one of them, and each alone must hold it all.
    pub fn assert_survived(&self, held: &[Held], candidates: &[usize], quorum: usize, round: u64) {
        let all: Vec<&Held> = held.iter().collect();
        let lost = self.lost(&all, quorum);
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged transactions are on fewer than {quorum} \
             replica(s): {:?}",
            lost.len(),
            self.acknowledged(),
            &lost[..lost.len().min(20)]
        );
        assert!(
            candidates.len() >= quorum,
            "round {round}: /status names {candidates:?} as failover candidates"
        );
        for &pick in candidates {
            let lacks = self.lost(&[&held[pick]], 1);
            assert!(
                lacks.is_empty(),
                "round {round}: replica {pick}, a failover candidate, lacks {} acknowledged \
                 transactions: {:?}",
                lacks.len(),
                &lacks[..lacks.len().min(20)]
            );
        }
    }

    /// Asserts that every style was acknowledged at least once in `round` (the load ran).
    pub fn assert_every_style(&self, styles: &[Style], round: u64) {
        for style in styles {
            assert!(
                self.oks.get(style.name()).copied().unwrap_or(0) > 0,
                "round {round}: no {} commit was acknowledged: the load did not run",
                style.name()
            );
        }
    }
}

// === impl Load ===

impl Load {
    /// `writers` clients through `url`, each committing in one of `styles` in turn, ids of
    /// `round`.
    pub fn start(url: &str, round: u64, writers: u64, styles: &'static [Style]) -> Load {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let ledger = SharedLedger::default();
        let tasks = (0..writers)
            .map(|w| {
                let style = styles[(w % styles.len() as u64) as usize];
                runtime.spawn(writer(url.to_owned(), round, w, style, Arc::clone(&ledger)))
            })
            .collect();
        Load {
            runtime,
            ledger,
            styles,
            tasks,
        }
    }

    /// Runs `task` beside the writers, ended with them.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(self.runtime.spawn(task));
    }

    pub fn ledger(&self) -> &SharedLedger {
        &self.ledger
    }

    /// Transactions acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.ledger.lock().unwrap().acknowledged()
    }

    /// Waits until every style has had `n` acknowledgements (the load is really running).
    pub fn wait_running(&self, n: u64) {
        wait_for("every style of writer to be acknowledged", PATIENCE, || {
            let ledger = self.ledger.lock().unwrap();
            self.styles
                .iter()
                .all(|s| ledger.oks.get(s.name()).copied().unwrap_or(0) >= n)
        });
    }

    /// Ends the load and returns what the clients were told. A commit parked when the primary
    /// died may never be answered: once every task has ended, or after `grace` for the others
    /// to hear their errors, the ones still running are aborted (they were told nothing, so
    /// the ledger is complete).
    pub fn finish(self, grace: Duration) -> Ledger {
        let deadline = Deadline::after(grace);
        while !deadline.expired() && !self.tasks.iter().all(|t| t.is_finished()) {
            thread::sleep(Duration::from_millis(50));
        }
        for task in &self.tasks {
            task.abort();
        }
        self.runtime.shutdown_timeout(Duration::from_secs(5));
        Arc::try_unwrap(self.ledger)
            .expect("the writers are gone")
            .into_inner()
            .unwrap()
    }
}

/// The id of a writer's `seq`th row in `round`: unique across the whole test.
pub fn row_id(round: u64, writer: u64, seq: u64) -> u64 {
    (round << 40) | (writer << 24) | seq
}

/// Writes in `style` until an error (the kill) ends it, recording every OK in `ledger`.
async fn writer(url: String, round: u64, writer: u64, style: Style, ledger: SharedLedger) {
    let ok = |record: &dyn Fn(&mut Ledger)| {
        let mut ledger = ledger.lock().unwrap();
        record(&mut ledger);
        *ledger.oks.entry(style.name()).or_default() += 1;
    };
    let insert = |id: u64| format!("INSERT INTO ledger (id, writer) VALUES ({id}, {writer})");
    let result: mysql_async::Result<()> = async {
        let mut conn = Conn::new(Opts::from_url(&url).unwrap()).await?;
        let mut seq = 0;
        loop {
            seq += 2;
            let id = row_id(round, writer, seq);
            match style {
                Style::Autocommit => {
                    conn.query_drop(insert(id)).await?;
                    ok(&|l| l.committed.push(id));
                }
                Style::Explicit => {
                    conn.query_drop("BEGIN").await?;
                    conn.query_drop(insert(id)).await?;
                    conn.query_drop(insert(id + 1)).await?;
                    conn.query_drop("COMMIT").await?;
                    ok(&|l| l.committed.extend([id, id + 1]));
                }
                Style::Xa => {
                    let xid = format!("r{round}-w{writer}-s{seq}");
                    conn.query_drop(format!("XA START '{xid}'")).await?;
                    conn.query_drop(insert(id)).await?;
                    conn.query_drop(format!("XA END '{xid}'")).await?;
                    conn.query_drop(format!("XA PREPARE '{xid}'")).await?;
                    ok(&|l| {
                        l.prepared.insert(xid.clone(), vec![id]);
                    });
                    conn.query_drop(format!("XA COMMIT '{xid}'")).await?;
                    ok(&|l| {
                        l.prepared.remove(&xid);
                        l.committed.push(id);
                    });
                }
            }
        }
    }
    .await;
    if let Err(error) = result {
        ledger
            .lock()
            .unwrap()
            .errors
            .push(format!("writer {writer} ({}): {error}", style.name()));
    }
}

/// The ids in `replica`'s ledger table, from the output of `SELECT id FROM sbtest.ledger`.
pub fn ids(rows: &str) -> HashSet<u64> {
    rows.lines().map(|l| l.parse().expect("an id")).collect()
}
