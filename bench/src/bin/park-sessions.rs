//! `park-sessions`: opens many client connections through strongsync and has each commit one
//! row into the table `parked` (which must exist) at the same moment, so that, with no replica
//! acknowledging, every one of them parks. `bench/run memory` measures the proxy's memory while
//! they wait, then lets the replicas back in.
//!
//! Prints `connected N` once every connection is open, then `released N ok M failed` when
//! every commit has been answered.

use clap::Parser;
use futures::stream::{self, StreamExt, TryStreamExt};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

#[derive(Debug, Parser)]
#[command(about = "Park many commits in strongsync at once")]
struct Args {
    /// mysql://user:password@host:port/database of strongsync's SQL port.
    #[arg(long)]
    url: String,
    /// Connections to open, each committing one row.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Logins in flight at once while connecting.
    #[arg(long, default_value_t = 64)]
    connect_concurrency: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let opts = Opts::from_url(&args.url)?;

    let conns: Vec<Conn> = stream::iter(0..args.connections)
        .map(|_| Conn::new(opts.clone()))
        .buffer_unordered(args.connect_concurrency)
        .try_collect()
        .await?;
    println!("connected {}", conns.len());

    // All at once: each commit parks until a replica acknowledges it.
    let commits = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| async move {
            conn.query_drop(format!("INSERT INTO parked (connection) VALUES ({i})"))
                .await
        });
    let mut answers = stream::iter(commits).buffer_unordered(args.connections.max(1));
    let (mut ok, mut failed) = (0usize, 0usize);
    while let Some(result) = answers.next().await {
        match result {
            Ok(()) => ok += 1,
            Err(e) => {
                if failed == 0 {
                    eprintln!("park-sessions: first failure: {e}");
                }
                failed += 1;
            }
        }
    }
    println!("released {} ok {ok} failed {failed}", ok + failed);
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
