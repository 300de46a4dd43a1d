//! Hostile clients at the socket level: logins cut short, length headers that promise more than
//! ever comes, slow-loris clients, clients that never read their results, and 5,000 idle
//! sessions. Each is bounded by a configured limit and a log line, everyone else is served
//! meanwhile, and the proxy's resident memory (its process's VmRSS and peak VmHWM) stays under a
//! bound stated here. No assertion is about timing: limits are set short and the tests wait for
//! their outcomes.

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use mysql_common::constants::CapabilityFlags;
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::proxy::ProxyProcess;
use support::rawclient::{greeted, handshake_response, packet, rejection, RawClient, Rejection};

/// Generous bound for "eventually" (a guard against hangs, not a timing expectation).
const PATIENCE: Duration = Duration::from_secs(60);

/// A MiB in KiB, the unit of `/proc/<pid>/status`.
const MIB: u64 = 1024;

/// These tests open thousands of connections and measure the proxy's memory; run alone, each
/// measures only itself, and a 2-core machine is not asked to run them all at once.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resident memory of a process, in KiB.
#[derive(Debug, Clone, Copy)]
struct Memory {
    /// Now (VmRSS).
    rss: u64,
    /// The highest it has been since the process started (VmHWM).
    peak: u64,
}

fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

fn login(addr: SocketAddr) -> RawClient {
    RawClient::connect(addr, APP_USER, APP_PASSWORD, CapabilityFlags::empty())
}

/// Asks `client` for `SELECT <n>` and checks the answer.
fn select(client: &mut RawClient, n: u32) {
    let reply = client.query(&format!("SELECT {n}"));
    assert_eq!(
        reply.first_values,
        vec![Some(n.to_string().into_bytes())],
        "{reply:?}"
    );
}

/// Clients logging in and querying over and over on their own threads, until stopped: the
/// "everyone else" that hostile clients must not disturb.
struct Bystanders {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    threads: Vec<thread::JoinHandle<u32>>,
}

impl Bystanders {
    fn start(addr: SocketAddr, count: usize, sql: &'static str) -> Bystanders {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let threads = (0..count)
            .map(|_| {
                let stop = Arc::clone(&stop);
                let served = Arc::clone(&served);
                thread::spawn(move || {
                    let mut done = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let mut client = login(addr);
                        for i in 0..20 {
                            select(&mut client, i);
                            let reply = client.query(sql);
                            assert_eq!(reply.error, None, "{sql}");
                            done += 1;
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    done
                })
            })
            .collect();
        Bystanders {
            stop,
            served,
            threads,
        }
    }

    /// Waits until they have been served `queries` times between them.
    fn wait_served(&self, queries: usize) {
        wait_for("the bystanders to be served", PATIENCE, || {
            self.served.load(Ordering::Relaxed) >= queries
        });
    }

    /// Stops them; each must have been served, and none may have failed.
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let done = thread.join().expect("a bystander failed");
            assert!(done > 0, "a bystander was never served");
        }
    }
}

/// A HandshakeResponse41 for the test user (its scramble is wrong, which does not matter to a
/// login that is never finished).
fn login_packet() -> Vec<u8> {
    let caps = CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_CONNECT_WITH_DB;
    packet(
        1,
        &handshake_response(APP_USER, Some("sbtest"), &[0x5a; 20], caps),
    )
}

/// Writes `bytes` one per second on a clone of `stream` until they are all sent or the
/// connection breaks: a slow-loris client.
fn trickle(stream: &TcpStream, bytes: Vec<u8>) -> thread::JoinHandle<()> {
    let mut stream = stream.try_clone().unwrap();
    thread::spawn(move || {
        for byte in bytes {
            if stream.write_all(&[byte]).is_err() {
                return;
            }
            thread::sleep(Duration::from_secs(1));
        }
    })
}

/// Bytes waiting unread in `stream`'s receive buffer, counted up to `max`.
fn unread(stream: &TcpStream, max: usize) -> usize {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = vec![0u8; max];
    stream.peek(&mut buf).unwrap_or(0)
}

fn threads_connected(primary: &MariaDb) -> u64 {
    primary.status_var("Threads_connected").parse().unwrap()
}

fn count(log: &str, line: &str) -> usize {
    log.matches(line).count()
}

#[test]
fn a_login_cut_short_anywhere_is_closed_and_logged_and_its_primary_connection_released() {
    let _serial = serial();
    let primary = MariaDb::start(MariaDbOptions::default());
    let (proxy, addr) = ProxyProcess::passthrough(&primary.addr(), &[]);
    let baseline = threads_connected(&primary);
    let wire = login_packet();
    for cut in 0..wire.len() {
        let mut stream = greeted(addr);
        stream.write_all(&wire[..cut]).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        // Nobody to send an error to: a client that hung up is only closed.
        assert_eq!(
            rejection(stream, false, PATIENCE),
            Rejection {
                err_code: None,
                closed: true
            },
            "login cut after {cut} of {} bytes",
            wire.len()
        );
    }
    // Every cut but the one before the first byte (a client leaving, routine) is logged.
    let line = "client connection failed: closed in the middle of a packet";
    wait_for("every truncated login to be logged", PATIENCE, || {
        count(&proxy.log(), line) == wire.len() - 1
    });
    wait_for(
        "the primary connections of the truncated logins to close",
        PATIENCE,
        || threads_connected(&primary) == baseline,
    );
    select(&mut login(addr), 7);
}

/// The slow-loris and stalled clients' limit (client_read) and the slow login's (handshake).
const CLIENT_READ: &str = "4s";
const HANDSHAKE: &str = "4s";
/// Clients that announce a 16 MiB packet and send only its first bytes.
const STALLED: usize = 20;
/// Peak resident memory allowed to a proxy serving the hostile clients below and four
/// bystanders. 20 headers announce 320 MiB between them; buffers grow only with what arrives.
const STALLED_PEAK_BOUND: u64 = 64 * MIB;

/// Sends `payload` on `stream` one byte a second and returns how the proxy rejected it.
fn trickled(stream: TcpStream, payload: Vec<u8>) -> Rejection {
    let writer = trickle(&stream, payload);
    let got = rejection(stream, false, PATIENCE);
    writer.join().unwrap();
    got
}

/// The slow and stalled clients, each on its own thread, which returns what it got back.
fn start_hostile_clients(addr: SocketAddr) -> Vec<(&'static str, thread::JoinHandle<Rejection>)> {
    let mut hostile = Vec::new();
    // A login sent one byte per second: the handshake limit covers the whole login.
    hostile.push((
        "slow login",
        thread::spawn(move || trickled(greeted(addr), login_packet())),
    ));
    // A command sent one byte per second after logging in.
    hostile.push((
        "slow command",
        thread::spawn(move || {
            let stream = login(addr).into_stream();
            trickled(stream, packet(0, b"\x03SELECT 'one byte a second'"))
        }),
    ));
    // A COM_CHANGE_USER to a user of another plugin: the primary asks (through the proxy)
    // for an auth switch, which never comes. A re-authentication has the handshake limit.
    hostile.push((
        "stalled change user",
        thread::spawn(move || {
            let mut stream = login(addr).into_stream();
            let mut change_user = vec![0x11];
            change_user.extend_from_slice(b"eduser\0\0sbtest\0\x21\x00mysql_native_password\0");
            stream.write_all(&packet(0, &change_user)).unwrap();
            // The auth switch request comes first (skipped as if it were a greeting), then
            // the proxy's error.
            rejection(stream, true, PATIENCE)
        }),
    ));
    // Half a header, then nothing.
    hostile.push((
        "half a header",
        thread::spawn(move || {
            let mut stream = login(addr).into_stream();
            stream.write_all(&[0x05, 0x00]).unwrap();
            rejection(stream, false, PATIENCE)
        }),
    ));
    // A header announcing 16 MiB - 1 (within max_packet_size), a few bytes, then nothing.
    for _ in 0..STALLED {
        hostile.push((
            "stalled 16 MiB packet",
            thread::spawn(move || {
                let mut stream = login(addr).into_stream();
                stream
                    .write_all(&[0xFF, 0xFF, 0xFF, 0x00, 0x03, b'S', b'E', b'L'])
                    .unwrap();
                rejection(stream, false, PATIENCE)
            }),
        ));
    }
    hostile
}

#[test]
fn slow_loris_and_stalled_packets_are_cut_off_by_their_limits_while_others_are_served() {
    let _serial = serial();
    let primary = MariaDb::start(MariaDbOptions::default());
    let (proxy, addr) = ProxyProcess::passthrough(
        &primary.addr(),
        &[
            "--timeouts-client-read",
            CLIENT_READ,
            "--timeouts-client-handshake",
            HANDSHAKE,
        ],
    );
    // Connected before any hostile client starts, and silent throughout: it idles for longer
    // than client_read, which never applies between commands.
    let mut idle = login(addr);
    let bystanders = Bystanders::start(addr, 4, "SELECT REPEAT('b', 10000)");

    let hostile = start_hostile_clients(addr);
    let outcomes: Vec<(&str, Rejection)> = hostile
        .into_iter()
        .map(|(what, thread)| (what, thread.join().unwrap()))
        .collect();
    let peak = memory(proxy.pid());

    for (what, got) in &outcomes {
        let want = match *what {
            "slow login" | "stalled change user" => 1043, // ER_HANDSHAKE_ERROR
            _ => 1159,                                    // ER_NET_READ_INTERRUPTED
        };
        assert_eq!(
            got,
            &Rejection {
                err_code: Some(want),
                closed: true
            },
            "{what}"
        );
    }
    let log = proxy.log();
    assert_eq!(
        count(
            &log,
            &format!("client did not complete the handshake within {HANDSHAKE}")
        ),
        2,
        "{log}"
    );
    assert_eq!(
        count(
            &log,
            &format!(
                "client did not send a complete packet within {CLIENT_READ} (timeouts.client_read)"
            )
        ),
        STALLED + 2,
        "{log}"
    );
    // The idle client has now idled past client_read (the limit that closed the others began
    // after it connected) and is still served, as were the bystanders all along.
    select(&mut idle, 42);
    bystanders.finish();
    eprintln!(
        "proxy memory with {STALLED} stalled 16 MiB packets, 4 other slow or stalled clients \
         and 4 bystanders: VmRSS {} KiB, VmHWM {} KiB (bound {} KiB)",
        peak.rss, peak.peak, STALLED_PEAK_BOUND
    );
    assert!(
        peak.peak <= STALLED_PEAK_BOUND,
        "proxy peak RSS {} KiB exceeds {} KiB",
        peak.peak,
        STALLED_PEAK_BOUND
    );
}

/// About 2 GB of results: 2,000 rows of 1 MB each.
const BIG_SELECT: &[u8] = b"\x03SELECT REPEAT('x', 1000000) FROM seq_1_to_2000";
/// Clients that ask for [`BIG_SELECT`] (four times, pipelined) and read nothing.
const NON_READERS: usize = 8;
/// Peak resident memory allowed to a proxy with [`NON_READERS`] clients stuck on 8 GB of
/// results each, while bystanders are served: each stuck session may hold what it had queued
/// (a packet or two of a MB), nothing more.
const NON_READERS_PEAK_BOUND: u64 = 96 * MIB;

#[test]
fn clients_that_never_read_their_results_hold_bounded_memory_and_are_closed_after_client_write() {
    let _serial = serial();
    let primary = MariaDb::start(MariaDbOptions::default());

    // Stuck for as long as the test likes.
    let (proxy, addr) =
        ProxyProcess::passthrough(&primary.addr(), &["--timeouts-client-write", "1h"]);
    let stuck: Vec<TcpStream> = (0..NON_READERS)
        .map(|_| {
            let mut client = login(addr);
            for _ in 0..4 {
                client.send(BIG_SELECT);
            }
            client.into_stream()
        })
        .collect();
    // Results piled up unread in each client's socket: the proxy has relayed to each, and as a
    // client that does not read keeps its receive window small (about 128 KiB here) while rows
    // are 1 MB, the proxy is now blocked writing to it.
    wait_for(
        "every non-reading client to have 64 KiB unread",
        PATIENCE,
        || stuck.iter().all(|s| unread(s, 64 << 10) == 64 << 10),
    );
    // Meanwhile others are served, with results larger than a socket buffer.
    let bystanders = Bystanders::start(addr, 4, "SELECT REPEAT('b', 1000000)");
    bystanders.wait_served(400);
    bystanders.finish();
    let held = memory(proxy.pid());
    eprintln!(
        "proxy memory with {NON_READERS} clients stuck on 8 GB of results each and 4 \
         bystanders: VmRSS {} KiB, VmHWM {} KiB (bound {} KiB)",
        held.rss, held.peak, NON_READERS_PEAK_BOUND
    );
    assert!(
        held.peak <= NON_READERS_PEAK_BOUND,
        "proxy peak RSS {} KiB exceeds {} KiB",
        held.peak,
        NON_READERS_PEAK_BOUND
    );
    assert!(
        stuck.iter().all(|s| unread(s, 1) == 1),
        "the stuck clients are still connected"
    );

    // With a short client_write, a client that reads nothing is closed and logged, and its
    // primary connection (in the middle of sending 2 GB) goes with it.
    let (proxy, addr) =
        ProxyProcess::passthrough(&primary.addr(), &["--timeouts-client-write", "2s"]);
    let mut client = login(addr);
    let id = client.connection_id;
    client.send(BIG_SELECT);
    let stream = client.into_stream();
    let line = "client stopped reading its results: nothing could be written for 2s \
                (timeouts.client_write)";
    wait_for("the stalled write to be logged", PATIENCE, || {
        proxy.log().contains(line)
    });
    assert!(rejection(stream, false, PATIENCE).closed);
    wait_for("its primary connection to close", PATIENCE, || {
        primary.sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}"
        )) == "0"
    });
    select(&mut login(addr), 9);
}

/// Idle sessions held at once.
const IDLE_SESSIONS: usize = 5_000;
/// Resident memory allowed to a proxy holding [`IDLE_SESSIONS`] logged-in idle sessions (each
/// with its primary connection).
const IDLE_RSS_BOUND: u64 = 200 * MIB;

/// Each idle session is a socket here, two in the proxy and one in the primary.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= 2 * IDLE_SESSIONS as u64 + 500,
        "the hard open-files limit {hard} is too low for {IDLE_SESSIONS} sessions"
    );
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

#[test]
fn five_thousand_idle_sessions_stay_under_a_stated_memory_bound_and_new_clients_are_served() {
    let _serial = serial();
    // Before anything starts: the proxy and the primary inherit the raised limit.
    raise_open_files_limit();
    let primary = MariaDb::start(MariaDbOptions {
        extra_cnf: vec![
            format!("max_connections={}", IDLE_SESSIONS + 200),
            // Idle connections hold no thread of their own in the pool: the primary stays small.
            "thread_handling=pool-of-threads".into(),
        ],
        ..MariaDbOptions::default()
    });
    let max_connections = (IDLE_SESSIONS + 100).to_string();
    let (proxy, addr) = ProxyProcess::passthrough(
        &primary.addr(),
        &["--limits-max-connections", &max_connections],
    );
    let before = memory(proxy.pid());

    let per_thread = IDLE_SESSIONS / 4;
    let mut sessions: Vec<RawClient> = (0..4)
        .map(|_| thread::spawn(move || (0..per_thread).map(|_| login(addr)).collect::<Vec<_>>()))
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(sessions.len(), IDLE_SESSIONS);
    assert!(threads_connected(&primary) >= IDLE_SESSIONS as u64);
    let held = memory(proxy.pid());

    // A new client is served while they are all connected.
    select(&mut login(addr), 5001);
    // And every idle session is really there: each answers a COM_PING.
    for session in &mut sessions {
        let reply = session.command(&[0x0e]);
        assert_eq!((reply.oks.len(), reply.error), (1, None));
    }
    let per_session = (held.rss.saturating_sub(before.rss)) as f64 / IDLE_SESSIONS as f64;
    eprintln!(
        "proxy memory: {} KiB before, {} KiB with {IDLE_SESSIONS} idle sessions ({per_session:.1} \
         KiB each), peak {} KiB (bound {} KiB)",
        before.rss, held.rss, held.peak, IDLE_RSS_BOUND
    );
    assert!(
        held.rss <= IDLE_RSS_BOUND,
        "proxy RSS {} KiB with {IDLE_SESSIONS} idle sessions exceeds {} KiB",
        held.rss,
        IDLE_RSS_BOUND
    );
}
