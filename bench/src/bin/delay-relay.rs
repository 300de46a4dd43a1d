//! `delay-relay`: TCP relays that add a fixed one-way delay, for `bench/run`. Runs until killed.
//!
//!   delay-relay --delay 5ms --route 127.0.0.1:4001=127.0.0.1:3306 --route ...

use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::Duration;

use clap::Parser;
use strongsync_bench::relay;

#[derive(Debug, Parser)]
#[command(about = "TCP relays that delay every byte by a fixed time in each direction")]
struct Args {
    /// One-way delay, e.g. "1ms", "5ms", "0s".
    #[arg(long, value_parser = humantime::parse_duration)]
    delay: Duration,
    /// LISTEN=UPSTREAM, both HOST:PORT; repeat for more relays.
    #[arg(long = "route", required = true, value_parser = parse_route)]
    routes: Vec<(SocketAddr, SocketAddr)>,
}

fn parse_route(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (listen, upstream) = s
        .split_once('=')
        .ok_or_else(|| format!("expected LISTEN=UPSTREAM, got {s:?}"))?;
    let parse = |a: &str| a.parse::<SocketAddr>().map_err(|e| format!("{a:?}: {e}"));
    Ok((parse(listen)?, parse(upstream)?))
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let mut relays = Vec::new();
    for (listen, upstream) in args.routes {
        let listener = TcpListener::bind(listen).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}"))
        })?;
        eprintln!(
            "delay-relay: {listen} -> {upstream}, {:?} each way",
            args.delay
        );
        let delay = args.delay;
        relays.push(thread::spawn(move || {
            relay::serve(listener, upstream, delay)
        }));
    }
    for relay in relays {
        if let Ok(Err(e)) = relay.join() {
            eprintln!("delay-relay: {e}");
            std::process::exit(1);
        }
    }
    Ok(())
}
