//! `read-transactions`: read-only transactions of ten point selects beside autocommit writers,
//! through a client that ends result sets with OK packets (`CLIENT_DEPRECATE_EOF`, as
//! mysql_async does; sysbench's MariaDB client does not). What `bench/run snapshot` measures
//! strongsync's one bound per snapshot with.
//!
//! Prints one JSON object: reader transactions and writer commits per second, the readers'
//! p95 transaction latency, and the errors each side got.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use clap::Parser;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

#[derive(Debug, Parser)]
#[command(about = "Read-only transactions beside autocommit writers")]
struct Args {
    /// mysql://user:password@host:port/database to connect to.
    #[arg(long)]
    url: String,
    /// Connections running read-only transactions.
    #[arg(long, default_value_t = 32)]
    readers: usize,
    /// Connections running autocommit updates.
    #[arg(long, default_value_t = 32)]
    writers: usize,
    /// Seconds measured (after `warmup`).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds run before measuring.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// The sbtest tables `oltp_*` prepared, and their rows.
    #[arg(long, default_value_t = 4)]
    tables: u64,
    #[arg(long, default_value_t = 10_000)]
    table_size: u64,
}

/// What one connection did while measured.
#[derive(Default)]
struct Tally {
    done: u64,
    errors: u64,
    latencies_us: Vec<u64>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let opts = Opts::from_url(&args.url)?;
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for i in 0..args.readers + args.writers {
        let conn = Conn::new(opts.clone()).await?;
        let worker = Worker {
            conn,
            seed: 0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1),
            tables: args.tables,
            table_size: args.table_size,
            measuring: Arc::clone(&measuring),
            stop: Arc::clone(&stop),
        };
        if i < args.readers {
            readers.push(tokio::spawn(worker.run(true)));
        } else {
            writers.push(tokio::spawn(worker.run(false)));
        }
    }
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let sum = |tallies: Vec<Tally>| {
        tallies.into_iter().fold(Tally::default(), |mut all, t| {
            all.done += t.done;
            all.errors += t.errors;
            all.latencies_us.extend(t.latencies_us);
            all
        })
    };
    let mut read = Vec::new();
    for r in readers {
        read.push(r.await?);
    }
    let mut written = Vec::new();
    for w in writers {
        written.push(w.await?);
    }
    let (mut read, written) = (sum(read), sum(written));
    read.latencies_us.sort_unstable();
    let p95 = read
        .latencies_us
        .get(read.latencies_us.len() * 95 / 100)
        .copied()
        .unwrap_or(0);
    println!(
        "{{\"reader_tps\": {:.1}, \"writer_tps\": {:.1}, \"reader_p95_ms\": {:.2}, \
         \"reader_errors\": {}, \"writer_errors\": {}}}",
        read.done as f64 / elapsed,
        written.done as f64 / elapsed,
        p95 as f64 / 1000.0,
        read.errors,
        written.errors
    );
    Ok(())
}

struct Worker {
    conn: Conn,
    seed: u64,
    tables: u64,
    table_size: u64,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    /// xorshift64: ids spread over the tables, no dependency for it.
    fn next(&mut self, bound: u64) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed % bound + 1
    }

    async fn run(mut self, reader: bool) -> Tally {
        let mut tally = Tally::default();
        while !self.stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let result = if reader {
                self.read_transaction().await
            } else {
                let (table, id) = (self.next(self.tables), self.next(self.table_size));
                let c = self.next(u64::MAX - 1);
                self.conn
                    .query_drop(format!(
                        "UPDATE sbtest{table} SET c = '{c}' WHERE id = {id}"
                    ))
                    .await
            };
            if !self.measuring.load(Ordering::Relaxed) {
                continue;
            }
            match result {
                Ok(()) => {
                    tally.done += 1;
                    tally
                        .latencies_us
                        .push(started.elapsed().as_micros() as u64);
                }
                Err(_) => tally.errors += 1,
            }
        }
        tally
    }

    async fn read_transaction(&mut self) -> mysql_async::Result<()> {
        self.conn.query_drop("BEGIN").await?;
        let table = self.next(self.tables);
        for _ in 0..10 {
            let id = self.next(self.table_size);
            let _: Option<String> = self
                .conn
                .query_first(format!("SELECT c FROM sbtest{table} WHERE id = {id}"))
                .await?;
        }
        self.conn.query_drop("COMMIT").await
    }
}
