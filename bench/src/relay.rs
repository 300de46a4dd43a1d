//! The delay relay: every byte read from one side is written to the other `delay` later, in
//! order, in both directions. A replica pointed at the relay is `delay` away (one way) from the
//! server behind it, whatever the load: bytes are timed when they arrive, and wait for the bytes
//! ahead of them only until their own due time.
//!
//! Plain threads and blocking sockets, not tasks: a thread's sleep ends within tens of
//! microseconds of its deadline, where a runtime timer rounds up to the next millisecond, which
//! would turn "1 ms away" into nearly 2. A relay carries a handful of replication connections,
//! so four threads per connection cost nothing.
#![allow(
    clippy::disallowed_types,
    reason = "the relay emulates the network in real time; nothing here runs under a paused clock"
)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Bytes read at a time, at most.
const CHUNK: usize = 64 * 1024;
/// Chunks in flight per direction; a reader that gets this far ahead of the clock waits, so a
/// relay holds at most `CHUNK * IN_FLIGHT` bytes per direction.
const IN_FLIGHT: usize = 1024;

/// Accepts connections on `listener` for ever, relaying each to `upstream` with `delay` added
/// in both directions.
pub fn serve(listener: TcpListener, upstream: SocketAddr, delay: Duration) -> io::Result<()> {
    loop {
        let (client, _) = listener.accept()?;
        thread::spawn(move || {
            if let Err(e) = relay_one(client, upstream, delay) {
                eprintln!("delay-relay: connection to {upstream} ended: {e}");
            }
        });
    }
}

/// One connection: both directions until both have ended, or either fails.
fn relay_one(client: TcpStream, upstream: SocketAddr, delay: Duration) -> io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (c, s) = (client.try_clone()?, server.try_clone()?);
    let upward = thread::spawn(move || delayed_pipe(c, s, delay));
    let downward = delayed_pipe(server, client, delay);
    let upward = upward
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("relay thread panicked")));
    downward.and(upward)
}

/// Copies `from` to `to`, each chunk written `delay` after it was read. The end of `from` is
/// passed on (as a write shutdown) once every byte before it has been written; a failure on
/// either side closes both.
pub fn delayed_pipe(mut from: TcpStream, to: TcpStream, delay: Duration) -> io::Result<()> {
    let (due_tx, due_rx) = mpsc::sync_channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let mut writer_to = to.try_clone()?;
    let reader_from = from.try_clone()?;
    let writer = thread::spawn(move || -> io::Result<()> {
        let written = (|| {
            for (due, bytes) in due_rx {
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
                writer_to.write_all(&bytes)?;
            }
            writer_to.shutdown(Shutdown::Write)
        })();
        if written.is_err() {
            // The reader may be blocked on an idle peer: end its read.
            let _ = reader_from.shutdown(Shutdown::Both);
        }
        written
    });
    let read = (|| -> io::Result<()> {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = from.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            if due_tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                // The writer failed; its error is the one reported.
                return Ok(());
            }
        }
    })();
    drop(due_tx);
    let written = writer
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("relay writer panicked")));
    if read.is_err() || written.is_err() {
        // Wake the other direction's reader and writer too.
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    }
    read.and(written)
}
