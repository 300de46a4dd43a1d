//! The delay relay holds bytes for its delay in each direction and passes them on whole, in
//! order, with the end of the stream.
#![allow(
    clippy::disallowed_types,
    reason = "the relay runs on threads in real time"
)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use strongsync_bench::relay;

/// An upstream that echoes every connection back until it ends.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for s in listener.incoming() {
            let mut s = s.unwrap();
            thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                std::io::copy(&mut s, &mut w).unwrap();
                w.shutdown(Shutdown::Write).unwrap();
            });
        }
    });
    addr
}

fn relay_to(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || relay::serve(listener, upstream, delay));
    addr
}

#[test]
fn nothing_comes_back_before_the_delay_has_passed_twice() {
    // A lower bound only: the relay must hold bytes at least this long, however fast or slow
    // the machine is.
    let delay = Duration::from_millis(5);
    let mut client = TcpStream::connect(relay_to(echo_server(), delay)).unwrap();
    for round in 0..3u8 {
        let sent = Instant::now();
        client.write_all(&[round; 100]).unwrap();
        let mut back = [0u8; 100];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, [round; 100]);
        assert!(
            sent.elapsed() >= 2 * delay,
            "round {round} came back after {:?}, before twice the delay",
            sent.elapsed()
        );
    }
}

#[test]
fn bytes_arrive_whole_and_in_order_and_the_end_is_passed_on() {
    let client = TcpStream::connect(relay_to(echo_server(), Duration::from_millis(1))).unwrap();
    let mut reader = client.try_clone().unwrap();
    let mut writer = client;

    // More than the relay's read chunk and the sockets' buffers, so both directions queue.
    let sent: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
    let to_send = sent.clone();
    let sending = thread::spawn(move || {
        for piece in to_send.chunks(7_919) {
            writer.write_all(piece).unwrap();
        }
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut received = Vec::new();
    // read_to_end returns only once the echo's end came back through the relay.
    reader.read_to_end(&mut received).unwrap();
    sending.join().unwrap();
    assert_eq!(received.len(), sent.len());
    assert!(received == sent, "bytes were reordered or changed");
}

#[test]
fn a_refused_upstream_closes_the_client() {
    // A port nothing listens on: bind, learn it, close.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut client = TcpStream::connect(relay_to(dead, Duration::ZERO)).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(client.read(&mut buf).unwrap_or(0), 0);
}
