//! A TCP relay the test controls, put between a replica and the proxy (or the proxy and the
//! primary): it forwards bytes both ways until told to stall (stop forwarding, sockets kept
//! open, so the senders meet TCP backpressure), to partition (nothing arrives; once healed,
//! what was sent meanwhile arrives, as TCP resends it, unless its sender reset the connection
//! meanwhile: a reset socket resends nothing), to delay one direction, to rewrite the MySQL
//! packets going one way, or to cut every connection it carries.
//!
//! It runs on a runtime of its own, so tests may block freely, with or without a runtime of
//! their own. Delays are lower bounds (a chunk is written no earlier than its arrival plus the
//! delay in force when it arrived); nothing here promises an upper bound.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Bytes read at a time, at most.
const CHUNK: usize = 64 * 1024;
/// Chunks read but not yet written, per direction: while a direction stalls, the relay holds
/// at most this many (the rest stays in the kernel's buffers, then in the sender's).
const IN_FLIGHT: usize = 16;

/// One way through the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From whoever connected to the relay (the replica) to the target (the proxy): the ACKs.
    ToTarget,
    /// From the target to whoever connected (the binlog events).
    FromTarget,
}

/// A running relay; dropping it closes its listener and every connection.
pub struct TcpRelay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    thread: Option<thread::JoinHandle<()>>,
}

/// What the test controls and what the connections report, shared with the relay's tasks.
struct Shared {
    target: SocketAddr,
    /// True while nothing may be forwarded.
    stalled: watch::Sender<bool>,
    /// True while the network is split.
    partitioned: watch::Sender<bool>,
    /// Delay per direction, in [`Direction`] order.
    delays: Mutex<[Duration; 2]>,
    /// Rewrite of each whole packet's payload per direction (same length), if any.
    rewrites: Mutex<[Option<Rewrite>; 2]>,
    /// Cancelled by [`TcpRelay::cut`] (and replaced): the connections open now hold it.
    cut: Mutex<CancellationToken>,
    /// Bytes let through, per direction.
    forwarded: [AtomicU64; 2],
    /// Bytes read from their sender, per direction (let through, held or lost).
    received: [AtomicU64; 2],
    /// Connections whose sender reset them during a split (what they sent meanwhile is lost).
    resets: AtomicUsize,
    /// Every byte let through since [`TcpRelay::capture`], both directions in the order they
    /// crossed; `None` while nothing is captured.
    captured: Mutex<Option<Vec<u8>>>,
    accepted: AtomicUsize,
    open: AtomicUsize,
    /// The local ports of the connections it made to the target, newest last.
    target_ports: Mutex<Vec<u16>>,
}

/// Changes a packet's payload in place (its length stays).
pub type Rewrite = Arc<dyn Fn(&mut [u8]) + Send + Sync>;

/// Counts a connection as open while it lives.
struct OpenGuard(Arc<Shared>);

// === impl TcpRelay ===

impl TcpRelay {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub fn start(target: SocketAddr) -> TcpRelay {
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            target,
            stalled: watch::Sender::new(false),
            partitioned: watch::Sender::new(false),
            delays: Mutex::new([Duration::ZERO; 2]),
            rewrites: Mutex::new([None, None]),
            cut: Mutex::new(shutdown.child_token()),
            forwarded: [AtomicU64::new(0), AtomicU64::new(0)],
            received: [AtomicU64::new(0), AtomicU64::new(0)],
            resets: AtomicUsize::new(0),
            captured: Mutex::new(None),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            target_ports: Mutex::new(Vec::new()),
        });
        let (addr_tx, addr_rx) = mpsc::channel();
        let thread = {
            let shared = Arc::clone(&shared);
            let shutdown = shutdown.clone();
            thread::Builder::new()
                .name("tcp-relay".into())
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("relay runtime");
                    runtime.block_on(async move {
                        let listener = TcpListener::bind("127.0.0.1:0")
                            .await
                            .expect("relay listens");
                        addr_tx.send(listener.local_addr().unwrap()).unwrap();
                        accept_loop(listener, shared, shutdown).await;
                    });
                })
                .expect("start the relay thread")
        };
        let addr = addr_rx.recv().expect("the relay reports its address");
        TcpRelay {
            addr,
            shared,
            shutdown,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops forwarding in both directions, on every connection and on those accepted later;
    /// the sockets stay open. A chunk already read is held until [`resume`](Self::resume).
    pub fn stall(&self) {
        self.shared.stalled.send_replace(true);
    }

    /// Forwards again whatever piled up, then carries on.
    pub fn resume(&self) {
        self.shared.stalled.send_replace(false);
    }

    /// Splits the network between the two sides: nothing arrives either way, and senders
    /// are not held back (a lossy network, not a full buffer).
    pub fn partition(&self) {
        self.shared.partitioned.send_replace(true);
    }

    /// Heals the split: what each side sent meanwhile arrives, except on connections their
    /// sender reset meanwhile.
    pub fn heal(&self) {
        self.shared.partitioned.send_replace(false);
    }

    /// Holds every chunk going `direction` for `delay` after it arrived (zero: no delay).
    /// Applies to chunks arriving from now on.
    pub fn set_delay(&self, direction: Direction, delay: Duration) {
        self.shared.delays.lock().unwrap()[direction as usize] = delay;
    }

    /// Passes every MySQL packet going `direction` through `rewrite` (on connections accepted
    /// from now on): the stream is cut into whole packets first, so a packet split over
    /// several reads is still rewritten whole.
    pub fn rewrite_packets(
        &self,
        direction: Direction,
        rewrite: impl Fn(&mut [u8]) + Send + Sync + 'static,
    ) {
        self.shared.rewrites.lock().unwrap()[direction as usize] = Some(Arc::new(rewrite));
    }

    /// Closes every connection open now (what they had in flight is lost); the listener keeps
    /// accepting, stalled or not as before.
    pub fn cut(&self) {
        let fresh = self.shutdown.child_token();
        let old = std::mem::replace(&mut *self.shared.cut.lock().unwrap(), fresh);
        old.cancel();
    }

    /// Keeps a copy of every byte let through from now on, both ways: what a packet capture
    /// on this leg would show.
    pub fn capture(&self) {
        *self.shared.captured.lock().unwrap() = Some(Vec::new());
    }

    /// The bytes captured since [`capture`](Self::capture) (empty if it was not called).
    pub fn captured(&self) -> Vec<u8> {
        self.shared
            .captured
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_default()
    }

    /// Bytes forwarded so far going `direction`, counted as they are let through: once
    /// [`stall`](Self::stall) has returned, the count does not change until
    /// [`resume`](Self::resume).
    pub fn forwarded(&self, direction: Direction) -> u64 {
        self.shared.forwarded[direction as usize].load(Ordering::SeqCst)
    }

    /// Bytes read from their sender so far going `direction`, whatever became of them.
    pub fn received(&self, direction: Direction) -> u64 {
        self.shared.received[direction as usize].load(Ordering::SeqCst)
    }

    /// Senders that reset their connection during a split, so far.
    pub fn resets_in_splits(&self) -> usize {
        self.shared.resets.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// The local port of the newest connection the relay made to its target (the target's
    /// end of it has this as its peer's port).
    pub fn newest_target_port(&self) -> Option<u16> {
        self.shared.target_ports.lock().unwrap().last().copied()
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// === impl Shared ===

impl Shared {
    fn delay(&self, direction: Direction) -> Duration {
        self.delays.lock().unwrap()[direction as usize]
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((client, _)) = accepted else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        shared.open.fetch_add(1, Ordering::SeqCst);
        let guard = OpenGuard(Arc::clone(&shared));
        let cut = shared.cut.lock().unwrap().clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cut.cancelled() => {}
                _ = relay_one(client, &guard.0) => {}
            }
            drop(guard);
        });
    }
}

/// One connection: until either direction ends or fails; then both sockets close.
async fn relay_one(client: TcpStream, shared: &Shared) {
    let Ok(server) = TcpStream::connect(shared.target).await else {
        return;
    };
    if let Ok(local) = server.local_addr() {
        shared.target_ports.lock().unwrap().push(local.port());
    }
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pipe(client_read, server_write, Direction::ToTarget, shared) => {}
        _ = pipe(server_read, client_write, Direction::FromTarget, shared) => {}
    }
}

/// Copies `from` to `to`: each chunk is stamped with its due time when it is read, and written
/// once that time has come and the relay is not stalled. Reading also waits while stalled, so
/// the sender's bytes pile up in the kernel and then in the sender.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    shared: &Shared,
) {
    let (chunks_tx, mut chunks_rx) = tokio::sync::mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let rewrite = shared.rewrites.lock().unwrap()[direction as usize].clone();
    // The sender reset the connection during a partition: what it sent meanwhile is gone.
    let reset = std::sync::atomic::AtomicBool::new(false);
    let reset = &reset;
    let read = async move {
        let mut stalled = shared.stalled.subscribe();
        let mut split = shared.partitioned.subscribe();
        let mut buf = vec![0u8; CHUNK];
        let mut partial = Vec::new();
        // What arrived during a partition, in order: sent on once it heals.
        let mut held: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
        loop {
            if stalled.wait_for(|s| !*s).await.is_err() {
                return;
            }
            let partitioned = *split.borrow_and_update();
            if !partitioned && !held.is_empty() {
                while let Some(chunk) = held.pop_front() {
                    if chunks_tx.send((Instant::now(), chunk)).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            let read = if partitioned {
                // Read on, so a reset shows at once; wake up when the split heals.
                tokio::select! {
                    read = from.read(&mut buf) => Some(read),
                    _ = split.changed() => None,
                }
            } else {
                Some(from.read(&mut buf).await)
            };
            // A split may have come while the read waited: what it returned was sent after it,
            // and is held as anything sent across a split; a reset it returned loses what is
            // still on its way, as it would on a network.
            let partitioned = partitioned || *split.borrow();
            let n = match read {
                None => continue,
                Some(Ok(0)) if partitioned => {
                    // A clean end: what came before it is resent and arrives once healed.
                    if split.wait_for(|p| !*p).await.is_err() {
                        return;
                    }
                    while let Some(chunk) = held.pop_front() {
                        if chunks_tx.send((Instant::now(), chunk)).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
                Some(Ok(0)) => return,
                Some(Err(_)) => {
                    if partitioned {
                        reset.store(true, Ordering::SeqCst);
                        shared.resets.fetch_add(1, Ordering::SeqCst);
                    }
                    return;
                }
                Some(Ok(n)) => n,
            };
            shared.received[direction as usize].fetch_add(n as u64, Ordering::SeqCst);
            let chunk = match &rewrite {
                None => buf[..n].to_vec(),
                Some(rewrite) => {
                    partial.extend_from_slice(&buf[..n]);
                    whole_packets(&mut partial, rewrite.as_ref())
                }
            };
            if partitioned {
                held.push_back(chunk);
                continue;
            }
            let due = Instant::now() + shared.delay(direction);
            if chunks_tx.send((due, chunk)).await.is_err() {
                return;
            }
        }
    };
    let write = async move {
        let mut stalled = shared.stalled.subscribe();
        let mut split = shared.partitioned.subscribe();
        while let Some((due, chunk)) = chunks_rx.recv().await {
            tokio::time::sleep_until(due).await;
            // Nothing crosses a split; what was on its way when it came is lost if its
            // sender resets, and arrives otherwise.
            if split.wait_for(|p| !*p).await.is_err() || reset.load(Ordering::SeqCst) {
                return;
            }
            loop {
                // Counted under the flag's lock: once `stall` has returned, the count stays.
                let let_through = {
                    let flag = stalled.borrow_and_update();
                    if !*flag {
                        shared.forwarded[direction as usize]
                            .fetch_add(chunk.len() as u64, Ordering::SeqCst);
                    }
                    !*flag
                };
                if let_through {
                    break;
                }
                if stalled.changed().await.is_err() {
                    return;
                }
            }
            if let Some(captured) = shared.captured.lock().unwrap().as_mut() {
                captured.extend_from_slice(&chunk);
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // The writer ends once the reader has ended (dropping the sender) and every chunk it read
    // has been written.
    tokio::join!(read, write);
}

/// Takes the whole packets at the front of `partial`, each rewritten, leaving the rest.
fn whole_packets(partial: &mut Vec<u8>, rewrite: &(dyn Fn(&mut [u8]) + Send + Sync)) -> Vec<u8> {
    let mut at = 0;
    while partial.len() >= at + 4 {
        let len = u32::from_le_bytes([partial[at], partial[at + 1], partial[at + 2], 0]) as usize;
        if partial.len() < at + 4 + len {
            break;
        }
        rewrite(&mut partial[at + 4..at + 4 + len]);
        at += 4 + len;
    }
    partial.drain(..at).collect()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// Bytes on their way when a split comes (read by the relay, not yet written) are lost if
    /// their sender then resets, as a reset discards a real sender's unacknowledged data,
    /// even when the relay's read that sees the reset began before the split.
    #[test]
    fn bytes_on_their_way_when_a_split_comes_are_lost_if_the_sender_resets() {
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = TcpRelay::start(target.local_addr().unwrap());
        // Held a while inside the relay after it reads them: on their way at the split.
        relay.set_delay(Direction::ToTarget, Duration::from_secs(2));
        let mut client = TcpStream::connect(relay.addr()).unwrap();
        let (mut server, _) = target.accept().unwrap();
        client.write_all(b"on its way").unwrap();
        while relay.received(Direction::ToTarget) < 10 {
            std::thread::sleep(Duration::from_millis(10));
        }
        relay.partition();
        // Reset, not closed: SO_LINGER of zero.
        let reset = nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(&client, nix::sys::socket::sockopt::Linger, &reset).unwrap();
        drop(client);
        // The relay notes the reset (a relay that does not is caught below, after a while).
        for _ in 0..500 {
            if relay.resets_in_splits() > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        relay.heal();
        server
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut rest = Vec::new();
        let _ = server.read_to_end(&mut rest);
        assert!(
            rest.is_empty(),
            "arrived after the reset: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }
}
