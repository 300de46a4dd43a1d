//! Framing over an in-memory pipe, and the read and write limits on a paused clock.

use tokio::io::duplex;

use super::*;

#[tokio::test]
async fn reads_packets_split_across_writes_and_reports_how_it_ended() {
    let (a, mut b) = duplex(64);
    let mut conn = Conn::new(a, 1 << 20);
    b.write_all(&[3, 0, 0, 0, b'a']).await.unwrap();
    let read = tokio::spawn(async move {
        let p = conn.read_packet().await.unwrap();
        (p.payload().to_vec(), conn)
    });
    b.write_all(b"bc").await.unwrap();
    let (payload, mut conn) = read.await.unwrap();
    assert_eq!(payload, b"abc");
    b.write_all(&[9, 0, 0, 1, b'x']).await.unwrap();
    drop(b);
    assert!(matches!(
        conn.read_packet().await,
        Err(ConnError::ClosedMidPacket)
    ));
}

#[tokio::test]
async fn clean_close_and_oversized_packets() {
    let (a, b) = duplex(64);
    let mut conn = Conn::new(a, 16);
    drop(b);
    assert!(matches!(conn.read_packet().await, Err(ConnError::Closed)));

    let (a, mut b) = duplex(64);
    let mut conn = Conn::new(a, 16);
    b.write_all(&[17, 0, 0, 0]).await.unwrap();
    assert!(matches!(
        conn.read_packet().await,
        Err(ConnError::Protocol(ProtoError::TooLarge {
            len: 17,
            max: 16
        }))
    ));
}

#[tokio::test]
async fn writes_are_queued_until_flushed_and_headers_are_fixed_up() {
    let (a, mut b) = duplex(1024);
    let mut conn = Conn::new(a, 1 << 20);
    conn.write_packet(0, b"\x03SELECT 1");
    conn.write_packet_with(1, |buf| buf.extend_from_slice(b"xyz"));
    conn.forward_as(&Packet::new(9, b"q"), 2);
    assert_eq!(conn.pending_write(), 13 + 7 + 5);
    conn.flush().await.unwrap();
    let mut got = vec![0u8; 25];
    b.read_exact(&mut got).await.unwrap();
    assert_eq!(&got[13..20], &[3, 0, 0, 1, b'x', b'y', b'z']);
    assert_eq!(&got[20..], &[1, 0, 0, 2, b'q']);
}

/// A peer that sends `bytes` one at a time, a second apart (a slow-loris client).
async fn trickle(mut peer: tokio::io::DuplexStream, bytes: Vec<u8>) {
    for byte in bytes {
        if peer.write_all(&[byte]).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_packet_trickled_in_times_out_from_its_first_byte() {
    let (a, b) = duplex(64);
    let mut conn = Conn::new(a, 1 << 20);
    let mut wire = vec![100, 0, 0, 0];
    wire.extend_from_slice(&[b'x'; 100]);
    // An hour of silence before the packet begins is fine: that is an idle client.
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        trickle(b, wire).await;
    });
    let started = Instant::now();
    let got = conn
        .read_packet_within(Duration::from_secs(5), ReadDeadline::FromFirstByte)
        .await;
    assert!(
        matches!(got, Err(ConnError::ReadTimedOut(limit)) if limit == Duration::from_secs(5)),
        "{got:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(3605));
    assert!(conn.buffered_len() <= 6, "only what arrived is buffered");
    writer.abort();
}

#[tokio::test(start_paused = true)]
async fn an_owed_packet_times_out_from_the_call_and_the_clock_survives_cancellation() {
    let (a, _b) = duplex(64);
    let mut conn = Conn::new(a, 1 << 20);
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    // Cancelled twice along the way, as a select! arm would be; the wait does not restart.
    for _ in 0..2 {
        let read = conn.read_packet_within(limit, ReadDeadline::FromNow);
        assert!(tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .is_err());
    }
    let got = conn.read_packet_within(limit, ReadDeadline::FromNow).await;
    assert!(matches!(got, Err(ConnError::ReadTimedOut(_))), "{got:?}");
    assert_eq!(started.elapsed(), limit);
}

#[tokio::test(start_paused = true)]
async fn each_packet_gets_its_own_time() {
    let (a, mut b) = duplex(64);
    let mut conn = Conn::new(a, 1 << 20);
    let limit = Duration::from_secs(5);
    for _ in 0..3 {
        b.write_all(&[2, 0, 0, 0, b'o']).await.unwrap();
        tokio::time::sleep(Duration::from_secs(4)).await;
        b.write_all(b"k").await.unwrap();
        let packet = conn
            .read_packet_within(limit, ReadDeadline::FromFirstByte)
            .await
            .unwrap();
        assert_eq!(packet.payload(), b"ok");
    }
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_stalls_the_flush_and_one_that_reads_does_not() {
    let (a, mut b) = duplex(1024);
    let mut conn = Conn::new(a, 1 << 20);
    let limit = Duration::from_secs(60);
    conn.write_packet(1, &[b'r'; 4000]);
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; 4004];
        b.read_exact(&mut got).await.unwrap();
        b
    });
    conn.flush_within(limit).await.unwrap();
    assert_eq!(conn.pending_write(), 0);
    let _b = reader.await.unwrap();

    conn.write_packet(2, &[b'r'; 4000]);
    let started = Instant::now();
    let got = conn.flush_within(limit).await;
    assert!(
        matches!(got, Err(ConnError::WriteStalled(l)) if l == limit),
        "{got:?}"
    );
    assert_eq!(started.elapsed(), limit);
    assert_eq!(
        conn.pending_write(),
        4004 - 1024,
        "the pipe took 1024 bytes"
    );
}

#[tokio::test(start_paused = true)]
async fn compressed_a_frame_header_alone_starts_the_clock_and_packets_come_back_whole() {
    let (a, mut b) = duplex(1 << 16);
    let mut conn = Conn::new(a, 1 << 20);
    conn.start_compression(1 << 20, 1);
    // A whole compressed frame carrying two packets, the second split over two frames.
    let mut plain = vec![3, 0, 0, 0, b'a', b'b', b'c', 60, 0, 0, 1];
    plain.extend_from_slice(&[b'y'; 60]);
    let mut frames = BytesMut::new();
    let mut encoder = strongsync_proto::compress::FrameEncoder::new(6);
    let next = encoder.encode(0, &plain[..30], &mut frames);
    encoder.encode(next, &plain[30..], &mut frames);
    b.write_all(&frames).await.unwrap();
    let first = conn.read_packet().await.unwrap();
    assert_eq!(first.payload(), b"abc");
    let second = conn.read_packet().await.unwrap();
    assert_eq!(second.payload(), &[b'y'; 60][..]);
    // What goes back is framed, numbered after the last frame read.
    conn.write_packet(1, b"ok");
    conn.flush().await.unwrap();
    let mut back = [0u8; 13];
    b.read_exact(&mut back).await.unwrap();
    assert_eq!(
        &back[..7],
        &[6, 0, 0, 2, 0, 0, 0],
        "a stored frame, sequence 2"
    );
    assert_eq!(
        &back[7..],
        &[2, 0, 0, 2, b'o', b'k'],
        "its packet numbered by it"
    );

    // A frame header with nothing after it is a packet begun: the slow-loris clock runs.
    b.write_all(&[50, 0, 0, 0, 0, 1, 0]).await.unwrap();
    let started = Instant::now();
    let read = conn.read_packet_within(Duration::from_secs(5), ReadDeadline::FromFirstByte);
    let got = tokio::time::timeout(Duration::from_secs(60), read).await;
    assert!(
        matches!(got, Ok(Err(ConnError::ReadTimedOut(_)))),
        "{got:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}
