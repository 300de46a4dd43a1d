//! The strong-sync service without sockets: replicas and commits driven by hand, time paused.

use std::net::SocketAddr;
use std::time::Duration;

use strongsync_proto::gtid::Gtid;

use super::testing::{admit_replica, at};
use super::*;
use crate::config::{
    DurabilityConfig, OnTimeout, ReplicaLabels, Topology, Visibility, WithoutQuorum,
};

fn gtid(seq_no: u64) -> Gtid {
    Gtid::maria(0, 1, seq_no)
}

fn commit(seqs: &[u64]) -> Commit {
    Commit {
        connection_id: 1,
        epoch: 1,
        gtids: seqs.iter().map(|&s| gtid(s)).collect(),
        unresolved: None,
        kind: crate::commit::WaitKind::Commit,
        own: seqs.len(),
        quorum: None,
    }
}

fn service(quorum: usize, on_timeout: OnTimeout) -> Arc<Durability> {
    Durability::new(DurabilityConfig {
        quorum,
        on_timeout,
        ack_timeout: Duration::from_secs(10),
        ..DurabilityConfig::default()
    })
}

fn state(text: &str) -> GtidPosition {
    GtidPosition::parse(text.as_bytes()).unwrap()
}

fn addr() -> SocketAddr {
    "127.0.0.1:1".parse().unwrap()
}

/// Spawns the wait for `commit` and lets it run until it parks.
async fn park(d: &Arc<Durability>, c: Commit) -> tokio::task::JoinHandle<Release> {
    spawn_until_counted(d, c, |s| s.parked).await
}

/// Spawns the wait for `c` and lets it run until `count` of the status goes up.
async fn spawn_until_counted(
    d: &Arc<Durability>,
    c: Commit,
    count: fn(&DurabilityStatus) -> usize,
) -> tokio::task::JoinHandle<Release> {
    let before = count(&d.status());
    let task = tokio::spawn(Arc::clone(d).wait(c));
    while count(&d.status()) == before {
        tokio::task::yield_now().await;
    }
    task
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_commit_waits_for_its_position_then_for_the_quorum() {
    let d = service(2, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let b = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    // The OK comes before the events: first the position must become known.
    let waiting = park(&d, commit(&[5])).await;
    a.transaction_relayed(Some(gtid(5)), at(500));
    a.acked(at(500), Some(at(500)), None).unwrap();
    settle().await;
    assert!(!waiting.is_finished(), "one ACK of two");
    b.transaction_relayed(Some(gtid(5)), at(500));
    b.acked(at(600), Some(at(600)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!((status.parked, status.released["quorum"]), (0, 1));
    assert_eq!(status.quorum_position, Some(at(500)));
}

#[tokio::test(start_paused = true)]
async fn one_ack_wakes_only_the_commits_it_covers() {
    let d = service(1, OnTimeout::Block);
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    for seq in 1..=3 {
        r.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    let early = park(&d, commit(&[1])).await;
    let late = park(&d, commit(&[3])).await;
    r.acked(at(150), Some(at(300)), None).unwrap();
    assert_eq!(early.await.unwrap(), Release::Proceed);
    settle().await;
    assert!(!late.is_finished());
    assert_eq!(d.status().parked, 1);
    r.acked(at(300), Some(at(300)), None).unwrap();
    assert_eq!(late.await.unwrap(), Release::Proceed);
}

#[tokio::test(start_paused = true)]
async fn degrade_releases_everyone_and_returns_to_strong_when_the_quorum_has_it_all() {
    let d = service(1, OnTimeout::Degrade);
    let first = park(&d, commit(&[1])).await;
    let second = park(&d, commit(&[2])).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(first.await.unwrap(), Release::Proceed);
    assert_eq!(second.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!(status.state, State::Degraded);
    assert_eq!(status.released["timeout"] + status.released["degraded"], 2);
    // DEGRADED: no waiting.
    assert_eq!(Arc::clone(&d).wait(commit(&[3])).await, Release::Proceed);

    // A replica comes back and ACKs everything released without quorum.
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    for seq in 1..=3 {
        r.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    r.acked(at(200), Some(at(300)), None).unwrap();
    assert_eq!(d.status().state, State::Degraded, "3 is not held yet");
    r.acked(at(300), Some(at(300)), None).unwrap();
    assert_eq!(d.status().state, State::Strong);
}

#[tokio::test(start_paused = true)]
async fn a_reload_to_block_while_degraded_makes_commits_wait_again() {
    let d = service(1, OnTimeout::Degrade);
    let first = park(&d, commit(&[1])).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(first.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().state, State::Degraded);
    d.reconfigure(DurabilityConfig {
        on_timeout: OnTimeout::Block,
        ..d.config()
    });
    // Still DEGRADED (the quorum has not caught up), yet the next commit waits for it: it
    // parks, where DEGRADED would have released it at once.
    let second = tokio::spawn(Arc::clone(&d).wait(commit(&[2])));
    while d.status().parked == 0 && !second.is_finished() {
        tokio::task::yield_now().await;
    }
    assert!(
        !second.is_finished(),
        "released without its quorum under block"
    );
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    for seq in 1..=2 {
        r.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    r.acked(at(200), Some(at(200)), None).unwrap();
    assert_eq!(second.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().released["quorum"], 1);
}

#[tokio::test(start_paused = true)]
async fn error_answers_with_the_gtid_and_block_keeps_waiting() {
    let d = service(1, OnTimeout::Error);
    let waiting = park(&d, commit(&[7])).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    match waiting.await.unwrap() {
        Release::Fail(e) => assert!(
            e.to_string()
                .contains("transaction 0-1-7 committed on the primary"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.status().state, State::Strong);

    let d = service(1, OnTimeout::Block);
    let waiting = park(&d, commit(&[7])).await;
    tokio::time::advance(Duration::from_secs(35)).await;
    settle().await;
    assert!(!waiting.is_finished(), "block never gives up");
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    r.transaction_relayed(Some(gtid(7)), at(70));
    r.acked(at(70), Some(at(70)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_leaves_nothing_behind_and_is_counted() {
    let d = service(1, OnTimeout::Block);
    let waiting = park(&d, commit(&[1])).await;
    waiting.abort();
    let _ = waiting.await;
    let status = d.status();
    assert_eq!((status.parked, status.released["client_gone"]), (0, 1));
    {
        let inner = d.lock();
        assert_eq!(inner.waiters.len(), 0);
    }

    d.begin_shutdown();
    let waiting = park(&d, commit(&[2])).await;
    waiting.abort();
    let _ = waiting.await;
    assert_eq!(d.status().released["shutdown"], 1);
}

#[tokio::test(start_paused = true)]
async fn acks_beyond_the_stream_are_refused_and_replicas_that_leave_stop_counting() {
    let d = service(1, OnTimeout::Block);
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    assert_eq!(
        r.acked(at(900), Some(at(500)), None),
        Err(AckError::BeyondRelayed {
            acked: at(900),
            relayed: Some(at(500))
        })
    );
    r.acked(at(500), Some(at(500)), None).unwrap();
    assert_eq!(d.status().quorum_position, Some(at(500)));
    drop(r);
    assert_eq!(
        d.status().quorum_position,
        None,
        "only connected replicas count"
    );
    // An async replica never counts.
    let plain = admit_replica(&d, 3, addr(), false, GtidPosition::default());
    plain.acked(at(500), Some(at(500)), None).unwrap();
    assert_eq!(d.status().quorum_position, None);
}

#[tokio::test(start_paused = true)]
async fn a_reconnecting_replicas_gtid_state_holds_what_it_names() {
    let d = service(1, OnTimeout::Block);
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    r.transaction_relayed(Some(gtid(4)), at(400));
    let waiting = park(&d, commit(&[4])).await;
    drop(r); // left before ACKing
    let _back = admit_replica(&d, 2, addr(), true, state("0-1-4"));
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
}

#[tokio::test(start_paused = true)]
async fn without_quorum_immediate_acts_at_once_and_when_replicas_leave() {
    let d = Durability::new(DurabilityConfig {
        quorum: 1,
        on_timeout: OnTimeout::Error,
        without_quorum: WithoutQuorum::Immediate,
        ..DurabilityConfig::default()
    });
    assert!(matches!(
        Arc::clone(&d).wait(commit(&[1])).await,
        Release::Fail(_)
    ));
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let waiting = park(&d, commit(&[2])).await;
    drop(r);
    assert!(
        matches!(waiting.await.unwrap(), Release::Fail(_)),
        "the last replica left"
    );
}

#[tokio::test(start_paused = true)]
async fn passthrough_never_waits_and_unknown_gtids_are_not_waited_for() {
    let d = Durability::new(DurabilityConfig {
        passthrough: true,
        ..DurabilityConfig::default()
    });
    assert_eq!(Arc::clone(&d).wait(commit(&[1])).await, Release::Proceed);
    let d = service(1, OnTimeout::Block);
    let unresolved = Commit {
        connection_id: 1,
        epoch: 1,
        gtids: vec![],
        unresolved: Some(crate::commit::Unresolved::HiddenBeforeInfile),
        kind: crate::commit::WaitKind::Commit,
        own: 0,
        quorum: None,
    };
    assert_eq!(Arc::clone(&d).wait(unresolved).await, Release::Proceed);
    assert_eq!(d.status().released["unresolved"], 1);
}

#[tokio::test(start_paused = true)]
async fn an_observer_hears_of_every_release_with_its_wait() {
    #[derive(Default)]
    struct Heard(std::sync::Mutex<Vec<(Outcome, Duration)>>);
    impl WaitObserver for Heard {
        fn released(&self, outcome: Outcome, waited: Duration) {
            self.0.lock().unwrap().push((outcome, waited));
        }
    }
    let heard = Arc::new(Heard::default());
    let d = Durability::with_observer(
        DurabilityConfig {
            quorum: 1,
            on_timeout: OnTimeout::Block,
            ..DurabilityConfig::default()
        },
        Arc::clone(&heard) as Arc<dyn WaitObserver>,
    );
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    r.transaction_relayed(Some(gtid(1)), at(100));
    let waiting = park(&d, commit(&[1])).await;
    tokio::time::advance(Duration::from_millis(250)).await;
    r.acked(at(100), Some(at(100)), None).unwrap();
    waiting.await.unwrap();
    let gone = park(&d, commit(&[2])).await;
    gone.abort();
    let _ = gone.await;
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(heard.len(), 2);
    assert_eq!(heard[0].0, Outcome::Quorum);
    assert!(heard[0].1 >= Duration::from_millis(250));
    assert_eq!(heard[1].0, Outcome::ClientGone);
}

#[tokio::test(start_paused = true)]
async fn a_new_quorum_applies_to_parked_and_later_commits() {
    let d = service(2, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let _b = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    a.transaction_relayed(Some(gtid(1)), at(100));
    a.acked(at(100), Some(at(100)), None).unwrap();
    let waiting = park(&d, commit(&[1])).await;
    settle().await;
    assert!(!waiting.is_finished(), "one ACK of two");

    d.reconfigure(DurabilityConfig {
        quorum: 1,
        ..d.config()
    });
    assert_eq!(
        waiting.await.unwrap(),
        Release::Proceed,
        "one ACK is now enough"
    );
    assert_eq!(d.status().quorum, 1);

    d.reconfigure(DurabilityConfig {
        quorum: 2,
        ..d.config()
    });
    a.transaction_relayed(Some(gtid(2)), at(200));
    a.acked(at(200), Some(at(200)), None).unwrap();
    let later = park(&d, commit(&[2])).await;
    settle().await;
    assert!(!later.is_finished(), "back to two");
    later.abort();
}

#[tokio::test(start_paused = true)]
async fn reconfiguring_keeps_the_index_capacity() {
    let d = service(1, OnTimeout::Block);
    let before = d.config().gtid_index_capacity;
    d.reconfigure(DurabilityConfig {
        gtid_index_capacity: before + 1,
        passthrough: true,
        ..d.config()
    });
    assert_eq!(d.config().gtid_index_capacity, before);
    assert!(d.config().passthrough);
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_parked_commits_with_an_error_naming_it() {
    let d = service(1, OnTimeout::Block);
    let waiting = park(&d, commit(&[4])).await;
    d.release_for_shutdown();
    match waiting.await.unwrap() {
        Release::Fail(e) => {
            assert_eq!(e.cause, crate::durability::Cutoff::Shutdown);
            let message = e.to_string();
            assert!(message.starts_with("proxy shutting down"), "{message}");
            assert!(message.contains("0-1-4"), "{message}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let status = d.status();
    assert_eq!((status.parked, status.released["shutdown"]), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn status_shows_each_replicas_lag_and_degraded_time() {
    #[derive(Default)]
    struct States(std::sync::Mutex<Vec<State>>);
    impl WaitObserver for States {
        fn released(&self, _: Outcome, _: Duration) {}
        fn state_changed(&self, to: State) {
            self.0.lock().unwrap().push(to);
        }
    }
    let states = Arc::new(States::default());
    let d = Durability::with_observer(
        DurabilityConfig {
            quorum: 1,
            on_timeout: OnTimeout::Degrade,
            ack_timeout: Duration::from_secs(1),
            ..DurabilityConfig::default()
        },
        Arc::clone(&states) as Arc<dyn WaitObserver>,
    );
    let fast = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let slow = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    for seq in 1..=3 {
        fast.transaction_relayed(Some(gtid(seq)), at(seq * 100));
        slow.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    slow.acked(at(100), Some(at(100)), None).unwrap();

    // Nobody has 3 yet: the wait times out and strong sync degrades.
    let waiting = park(&d, commit(&[3])).await;
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    tokio::time::advance(Duration::from_secs(5)).await;
    fast.acked(at(300), Some(at(300)), None).unwrap();

    let status = d.status();
    assert_eq!(status.state, State::Strong);
    assert!(
        status.degraded_total >= Duration::from_secs(5),
        "{:?}",
        status.degraded_total
    );
    let lag: Vec<_> = status
        .replicas
        .iter()
        .map(|r| (r.server_id, r.lag_bytes, r.lag_transactions))
        .collect();
    assert_eq!(lag, vec![(2, Some(0), Some(0)), (3, Some(200), Some(2))]);
    assert_eq!(
        *states.0.lock().unwrap(),
        vec![State::Degraded, State::Strong]
    );
}

fn held(d: &Durability, server_id: u32) -> (String, bool) {
    let status = d.status();
    let connected = status.replicas.iter().map(|r| (r, true));
    let departed = status.departed.iter().map(|r| (r, false));
    let (r, connected) = connected
        .chain(departed)
        .find(|(r, _)| r.server_id == server_id)
        .expect("the replica is listed");
    (r.held.to_string(), connected)
}

#[tokio::test(start_paused = true)]
async fn a_replica_holds_what_it_connected_with_and_then_what_it_acked() {
    let d = service(1, OnTimeout::Block);
    let r = admit_replica(&d, 2, addr(), true, state("0-1-3,1-1-9"));
    assert_eq!(held(&d, 2), ("0-1-3,1-1-9".into(), true));
    for seq in 4..=6 {
        r.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    assert_eq!(held(&d, 2).0, "0-1-3,1-1-9", "relayed is not held");
    r.acked(at(550), Some(at(600)), None).unwrap();
    assert_eq!(held(&d, 2).0, "0-1-5,1-1-9", "ACKed through 5, not 6");
    r.acked(at(600), Some(at(600)), None).unwrap();
    assert_eq!(held(&d, 2).0, "0-1-6,1-1-9");
    // An async replica's stream, without ACKs, holds only its connect state.
    let plain = admit_replica(&d, 3, addr(), false, state("0-1-2"));
    plain.transaction_relayed(Some(gtid(7)), at(700));
    assert_eq!(held(&d, 3).0, "0-1-2");
}

#[tokio::test(start_paused = true)]
async fn a_departed_replica_is_listed_as_last_known_until_it_returns() {
    let d = service(1, OnTimeout::Block);
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    r.transaction_relayed(Some(gtid(8)), at(800));
    r.acked(at(800), Some(at(800)), None).unwrap();
    drop(r);
    let status = d.status();
    assert!(status.replicas.is_empty(), "only connected replicas count");
    assert_eq!(status.departed.len(), 1);
    assert_eq!(status.departed[0].acked, Some(at(800)));
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(
        d.status().departed[0].gone_for,
        Some(Duration::from_secs(3))
    );
    assert_eq!(held(&d, 2), ("0-1-8".into(), false));
    // Back: what it holds now is what it says it has.
    let _back = admit_replica(&d, 2, addr(), true, state("0-1-8"));
    assert!(d.status().departed.is_empty());
    assert_eq!(held(&d, 2), ("0-1-8".into(), true));
}

#[tokio::test(start_paused = true)]
async fn departed_replicas_are_bounded_keeping_the_most_recent() {
    let d = service(1, OnTimeout::Block);
    let total = registry::DEPARTED_KEPT as u32 + 5;
    for server_id in 0..total {
        drop(admit_replica(
            &d,
            server_id,
            addr(),
            true,
            GtidPosition::default(),
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    let departed = d.status().departed;
    assert_eq!(departed.len(), registry::DEPARTED_KEPT);
    assert_eq!(departed[0].server_id, 5, "the oldest five were forgotten");
}

#[tokio::test(start_paused = true)]
async fn ends_kept_for_gtids_not_acked_are_bounded() {
    let d = Durability::new(DurabilityConfig {
        quorum: 1,
        gtid_index_capacity: 4,
        ..DurabilityConfig::default()
    });
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    for seq in 1..=10 {
        r.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    r.acked(at(1000), Some(at(1000)), None).unwrap();
    // Only the newest ends were remembered; the newest is what counts.
    assert_eq!(held(&d, 2).0, "0-1-10");
}

#[tokio::test(start_paused = true)]
async fn failover_candidates_are_the_replicas_holding_the_whole_watermark() {
    let d = service(1, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let b = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    assert_eq!(
        d.status().failover_candidates,
        vec![2, 3],
        "the watermark is empty yet"
    );
    for seq in 1..=2 {
        a.transaction_relayed(Some(gtid(seq)), at(seq * 100));
        b.transaction_relayed(Some(gtid(seq)), at(seq * 100));
    }
    let first = park(&d, commit(&[1])).await;
    a.acked(at(100), Some(at(200)), None).unwrap();
    assert_eq!(first.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!(status.watermark.to_string(), "0-1-1");
    assert_eq!(status.failover_candidates, vec![2], "only a has it");
    // b goes ahead of a: the quorum (of one) holds 0-1-2 now, whoever committed it, and a,
    // which lacks it, is no candidate. b leaves: still the candidate, as last known.
    b.acked(at(200), Some(at(200)), None).unwrap();
    assert_eq!(d.status().watermark.to_string(), "0-1-2");
    assert_eq!(d.status().failover_candidates, vec![3]);
    drop(b);
    let second = park(&d, commit(&[2])).await;
    assert_eq!(d.status().failover_candidates, vec![3]);
    a.acked(at(200), Some(at(200)), None).unwrap();
    assert_eq!(second.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!(status.watermark.to_string(), "0-1-2");
    assert_eq!(status.failover_candidates, vec![2, 3]);
}

fn in_domain(domain: u32, seq_no: u64) -> Gtid {
    Gtid::maria(domain, 1, seq_no)
}

fn commit_of(gtids: &[Gtid]) -> Commit {
    Commit {
        connection_id: 1,
        epoch: 1,
        gtids: gtids.to_vec(),
        unresolved: None,
        kind: crate::commit::WaitKind::Commit,
        own: gtids.len(),
        quorum: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_connect_state_is_credited_per_domain_not_as_a_position() {
    // Domains interleave: 0-1-1 ends at 100, 1-1-1 at 200, 0-1-2 at 300, 1-1-2 at 400.
    let d = service(1, OnTimeout::Block);
    let relay = admit_replica(&d, 9, addr(), false, GtidPosition::default());
    for (gtid, end) in [
        (in_domain(0, 1), 100),
        (in_domain(1, 1), 200),
        (in_domain(0, 2), 300),
        (in_domain(1, 2), 400),
    ] {
        relay.transaction_relayed(Some(gtid), at(end));
    }
    let waiting = park(&d, commit_of(&[in_domain(0, 2)])).await;
    // A replica that has domain 1 through 1-1-2 but domain 0 only through 0-1-1.
    let r = admit_replica(&d, 2, addr(), true, state("0-1-1,1-1-2"));
    settle().await;
    assert!(!waiting.is_finished(), "0-1-2 is not among what it holds");
    assert_eq!(d.status().quorum_position, None, "nothing ACKed yet");
    // Its stream: the primary sends it 0-1-2 (it lacks it); ACKing that releases it.
    r.transaction_relayed(Some(in_domain(0, 2)), at(300));
    r.acked(at(300), Some(at(300)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    assert_eq!(held(&d, 2).0, "0-1-2,1-1-2");
}

#[tokio::test(start_paused = true)]
async fn a_commit_never_relayed_is_released_by_replicas_that_come_back_holding_it() {
    let d = service(2, OnTimeout::Block);
    let waiting = park(&d, commit(&[7])).await;
    let _a = admit_replica(&d, 2, addr(), true, state("0-1-7"));
    settle().await;
    assert!(!waiting.is_finished(), "one of two");
    let _b = admit_replica(&d, 3, addr(), true, state("0-1-9"));
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().watermark.to_string(), "0-1-7");
}

#[tokio::test(start_paused = true)]
async fn a_quorum_made_of_a_connect_state_and_an_ack_releases_the_commit() {
    let d = service(2, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    a.transaction_relayed(Some(gtid(5)), at(500));
    let waiting = park(&d, commit(&[5])).await;
    // b reconnects holding 5 (its ACK was lost with its old connection).
    let _b = admit_replica(&d, 3, addr(), true, state("0-1-5"));
    settle().await;
    assert!(!waiting.is_finished(), "only b holds it");
    // a ACKs: a by position, b by what it connected with.
    a.acked(at(500), Some(at(500)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
}

#[tokio::test(start_paused = true)]
async fn what_a_stream_shows_a_replica_holds_counts_like_an_ack() {
    let d = service(1, OnTimeout::Block);
    let relay = admit_replica(&d, 9, addr(), false, GtidPosition::default());
    relay.transaction_relayed(Some(gtid(3)), at(300));
    let waiting = park(&d, commit(&[3])).await;
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    r.covered(at(299));
    settle().await;
    assert!(!waiting.is_finished());
    r.covered(at(300));
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().replicas[0].holds_through, Some(at(300)));
    assert_eq!(d.status().replicas[0].acked, None);
}

#[tokio::test(start_paused = true)]
async fn degraded_ends_when_returning_replicas_hold_what_was_released_without_any_new_write() {
    let d = service(1, OnTimeout::Degrade);
    let first = park(&d, commit_of(&[in_domain(0, 4)])).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(first.await.unwrap(), Release::Proceed);
    Arc::clone(&d).wait(commit_of(&[in_domain(1, 2)])).await;
    Arc::clone(&d).wait(commit_of(&[in_domain(0, 6)])).await;
    let status = d.status();
    assert_eq!(status.state, State::Degraded);
    assert_eq!(
        status.released_without_quorum.to_string(),
        "0-1-4..0-1-6 (2), 1-1-2 (1)"
    );
    // A replica comes back that has domain 0 but not domain 1.
    let partial = admit_replica(&d, 2, addr(), true, state("0-1-6,1-1-1"));
    assert_eq!(d.status().state, State::Degraded, "1-1-2 is not held");
    drop(partial);
    let _all = admit_replica(&d, 2, addr(), true, state("0-1-6,1-1-2"));
    let status = d.status();
    assert_eq!(status.state, State::Strong);
    assert!(status.released_without_quorum.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_parked_commit_follows_a_new_ack_timeout_and_policy_at_once() {
    let d = Durability::new(DurabilityConfig {
        quorum: 1,
        on_timeout: OnTimeout::Block,
        ack_timeout: Duration::from_secs(3600),
        ..DurabilityConfig::default()
    });
    let waiting = park(&d, commit(&[1])).await;
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert!(!waiting.is_finished());
    d.reconfigure(DurabilityConfig {
        ack_timeout: Duration::from_secs(30),
        on_timeout: OnTimeout::Error,
        ..d.config()
    });
    assert!(
        matches!(waiting.await.unwrap(), Release::Fail(_)),
        "already waited past the new timeout: the new policy applies"
    );
}

#[tokio::test(start_paused = true)]
async fn block_counts_commits_past_their_timeout_until_they_are_released() {
    let d = service(1, OnTimeout::Block);
    let waiting = park(&d, commit(&[1])).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    settle().await;
    assert_eq!(d.status().parked_overdue, 1);
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert!(!waiting.is_finished(), "block never gives up");
    assert_eq!(d.status().parked_overdue, 1, "counted once");
    let _r = admit_replica(&d, 2, addr(), true, state("0-1-1"));
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().parked_overdue, 0);
}

#[tokio::test(start_paused = true)]
async fn an_unresolved_commit_waits_for_what_was_learnt_and_is_counted_and_listed() {
    let d = service(1, OnTimeout::Block);
    let r = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    r.transaction_relayed(Some(gtid(3)), at(300));
    let partly_known = Commit {
        connection_id: 42,
        epoch: 1,
        gtids: vec![gtid(3)],
        unresolved: Some(crate::commit::Unresolved::HeldPastLimit { limit: 10 }),
        kind: crate::commit::WaitKind::Commit,
        own: 1,
        quorum: None,
    };
    let waiting = park(&d, partly_known).await;
    settle().await;
    assert!(!waiting.is_finished(), "0-1-3 is known: it is waited for");
    r.acked(at(300), Some(at(300)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!(
        (status.released["unresolved"], status.released["quorum"]),
        (1, 0)
    );
    assert_eq!(status.unresolved.len(), 1);
    assert_eq!(status.unresolved[0].connection_id, 42);
    assert_eq!(status.unresolved[0].gtids, "0-1-3");
    assert!(status.unresolved[0]
        .reason
        .contains("max_held_response_bytes"));
}

#[tokio::test(start_paused = true)]
async fn switching_to_passthrough_releases_parked_commits_and_counts_them() {
    let d = service(1, OnTimeout::Block);
    let waiting = park(&d, commit(&[1])).await;
    d.reconfigure(DurabilityConfig {
        passthrough: true,
        ..d.config()
    });
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().released["degraded"], 1);
}

fn read(seqs: &[u64]) -> Commit {
    Commit {
        kind: crate::commit::WaitKind::Read,
        ..commit(seqs)
    }
}

/// Spawns the wait for a read and lets it run until it is held.
async fn hold(d: &Arc<Durability>, c: Commit) -> tokio::task::JoinHandle<Release> {
    spawn_until_counted(d, c, |s| s.reads_parked).await
}

#[tokio::test(start_paused = true)]
async fn a_held_read_is_counted_as_a_read_and_goes_with_the_commit_it_is_behind() {
    let d = Durability::new(DurabilityConfig {
        visibility: Visibility::Quorum,
        ..DurabilityConfig::default()
    });
    assert!(d.reads_wait());
    let commit = park(&d, commit(&[4])).await;
    let read = hold(&d, read(&[4])).await;
    let status = d.status();
    assert_eq!((status.parked, status.reads_parked), (1, 1));
    // The commit's timeout degrades the proxy: the read behind it goes with it, counted as a
    // read released while DEGRADED, and owes nothing to the return to STRONG.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(commit.await.unwrap(), Release::Proceed);
    assert_eq!(read.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!(status.released["timeout"], 1);
    assert_eq!(status.reads_released["degraded"], 1);
    assert_eq!(status.reads_queued, 1);
    assert_eq!(status.released_without_quorum.count(), 1, "the commit only");
}

#[tokio::test(start_paused = true)]
async fn under_error_a_read_past_its_timeout_is_withheld_with_an_error_saying_so() {
    let d = Durability::new(DurabilityConfig {
        visibility: Visibility::Quorum,
        on_timeout: OnTimeout::Error,
        ..DurabilityConfig::default()
    });
    let read = hold(&d, read(&[9])).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    match read.await.unwrap() {
        Release::Fail(e) => {
            let text = e.to_string();
            assert!(text.starts_with("response withheld"), "{text}");
            assert!(text.contains("0-1-9"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    let status = d.status();
    assert_eq!(status.reads_released["timeout"], 1);
    assert_eq!(status.released["timeout"], 0, "no commit was involved");
}

#[tokio::test(start_paused = true)]
async fn switching_visibility_back_to_commit_lets_held_reads_go() {
    let config = DurabilityConfig {
        visibility: Visibility::Quorum,
        on_timeout: OnTimeout::Block,
        ..DurabilityConfig::default()
    };
    let d = Durability::new(config.clone());
    let read = hold(&d, read(&[2])).await;
    let commit = park(&d, commit(&[2])).await;
    d.reconfigure(DurabilityConfig {
        visibility: Visibility::Commit,
        ..config
    });
    assert!(!d.reads_wait());
    assert_eq!(read.await.unwrap(), Release::Proceed);
    settle().await;
    assert!(!commit.is_finished(), "commits still wait for their quorum");
}

#[tokio::test(start_paused = true)]
async fn a_commit_bounded_by_others_transactions_names_only_its_own_in_its_error() {
    let d = Durability::new(DurabilityConfig {
        visibility: Visibility::Quorum,
        on_timeout: OnTimeout::Error,
        ..DurabilityConfig::default()
    });
    // Its own 0-1-5, then the binlog position read after its response: someone's 0-1-6.
    let bounded = Commit {
        own: 1,
        quorum: None,
        ..commit(&[5, 6])
    };
    let waiting = park(&d, bounded).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    match waiting.await.unwrap() {
        Release::Fail(e) => {
            let text = e.to_string();
            assert!(text.contains("transaction 0-1-5 committed"), "{text}");
            assert!(!text.contains("0-1-6"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

fn zoned(zones: &[(u32, &str)], primary_zone: Option<&str>) -> Topology {
    Topology {
        primary_zone: primary_zone.map(Into::into),
        replicas: zones
            .iter()
            .map(|(id, zone)| {
                (
                    *id,
                    ReplicaLabels {
                        zone: Some((*zone).into()),
                        labels: Default::default(),
                    },
                )
            })
            .collect(),
    }
}

/// Quorum 2 in 2 zones under `block`: replicas 2 and 3 in zone a (the primary's), 4 in zone b,
/// each relayed 0-1-1 (ending at 100).
fn two_of_three_zones() -> (Arc<Durability>, Vec<ReplicaHandle>) {
    let d = Durability::new(DurabilityConfig {
        quorum: 2,
        quorum_zones: 2,
        on_timeout: OnTimeout::Block,
        ..DurabilityConfig::default()
    });
    d.set_topology(zoned(&[(2, "a"), (3, "a"), (4, "b")], Some("a")));
    let replicas: Vec<_> = [2, 3, 4]
        .iter()
        .map(|id| admit_replica(&d, *id, addr(), true, GtidPosition::default()))
        .collect();
    for r in &replicas {
        r.transaction_relayed(Some(gtid(1)), at(100));
    }
    (d, replicas)
}

fn asking(seqs: &[u64], quorum: usize) -> Commit {
    Commit {
        quorum: Some(quorum),
        ..commit(seqs)
    }
}

#[tokio::test(start_paused = true)]
async fn a_two_zone_rule_waits_for_the_other_zone_and_a_reload_applies_to_the_next_commit() {
    let (d, replicas) = two_of_three_zones();
    let waiting = park(&d, commit(&[1])).await;
    replicas[0].acked(at(100), Some(at(100)), None).unwrap();
    replicas[1].acked(at(100), Some(at(100)), None).unwrap();
    settle().await;
    assert!(!waiting.is_finished(), "two replicas, one zone");
    assert_eq!(d.status().quorum_position, None);
    replicas[2].acked(at(100), Some(at(100)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().quorum_position, Some(at(100)));

    // Relabelled: 4 joins zone a, so no two zones hold the next one, which waits.
    for r in &replicas {
        r.transaction_relayed(Some(gtid(2)), at(200));
    }
    d.set_topology(zoned(&[(2, "a"), (3, "a"), (4, "a")], Some("a")));
    let next = park(&d, commit(&[2])).await;
    for r in &replicas {
        r.acked(at(200), Some(at(200)), None).unwrap();
    }
    settle().await;
    assert!(!next.is_finished(), "every replica now in one zone");
    assert_eq!(
        d.status().quorum_unmet,
        Some(Unmet::Zones {
            have: vec!["a".into()],
            need: 2
        })
    );
    // The rule reloaded without zones: it goes.
    d.reconfigure(DurabilityConfig {
        quorum_zones: 0,
        ..d.config()
    });
    assert_eq!(next.await.unwrap(), Release::Proceed);
}

#[tokio::test(start_paused = true)]
async fn a_cross_zone_rule_needs_a_replica_outside_the_primarys_zone() {
    let d = Durability::new(DurabilityConfig {
        quorum: 1,
        cross_zone: true,
        on_timeout: OnTimeout::Block,
        ..DurabilityConfig::default()
    });
    d.set_topology(zoned(&[(2, "a"), (3, "b")], Some("a")));
    let near = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let far = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    near.transaction_relayed(Some(gtid(1)), at(100));
    far.transaction_relayed(Some(gtid(1)), at(100));
    let waiting = park(&d, commit(&[1])).await;
    near.acked(at(100), Some(at(100)), None).unwrap();
    settle().await;
    assert!(!waiting.is_finished(), "only the primary's zone holds it");
    far.acked(at(100), Some(at(100)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
}

#[tokio::test(start_paused = true)]
async fn a_session_quorum_raises_lowers_within_the_floor_and_never_degrades_the_proxy() {
    let d = Durability::new(DurabilityConfig {
        quorum: 1,
        session_quorum_floor: Some(0),
        on_timeout: OnTimeout::Degrade,
        ack_timeout: Duration::from_secs(10),
        ..DurabilityConfig::default()
    });
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let b = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    for r in [&a, &b] {
        r.transaction_relayed(Some(gtid(1)), at(100));
    }
    // None asked: released at once, counted as such.
    let none = tokio::spawn(Arc::clone(&d).wait(asking(&[1], 0)));
    assert_eq!(none.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().released["none_asked"], 1);

    // Two asked: one ACK (the configured quorum) is not enough.
    let two = park(&d, asking(&[1], 2)).await;
    let one = park(&d, commit(&[1])).await;
    a.acked(at(100), Some(at(100)), None).unwrap();
    assert_eq!(one.await.unwrap(), Release::Proceed);
    settle().await;
    assert!(!two.is_finished(), "asked for two");
    b.acked(at(100), Some(at(100)), None).unwrap();
    assert_eq!(two.await.unwrap(), Release::Proceed);

    // Three asked of two replicas: at its timeout the client is told, the proxy stays STRONG.
    a.transaction_relayed(Some(gtid(2)), at(200));
    let three = park(&d, asking(&[2], 3)).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    match three.await.unwrap() {
        Release::Fail(error) => assert_eq!(error.quorum, 3),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.status().state, State::Strong);

    // The floor: with the default (the quorum), asking for none still waits for one.
    d.reconfigure(DurabilityConfig {
        session_quorum_floor: None,
        ..d.config()
    });
    b.transaction_relayed(Some(gtid(3)), at(300));
    let floored = park(&d, asking(&[3], 0)).await;
    b.acked(at(300), Some(at(300)), None).unwrap();
    assert_eq!(floored.await.unwrap(), Release::Proceed);
    assert_eq!(d.status().released["none_asked"], 1, "not released at once");
}

#[tokio::test(start_paused = true)]
async fn failover_candidates_honour_the_zone_rule_and_say_why_not() {
    let (d, replicas) = two_of_three_zones();
    let waiting = park(&d, commit(&[1])).await;
    replicas[0].acked(at(100), Some(at(100)), None).unwrap();
    replicas[2].acked(at(100), Some(at(100)), None).unwrap();
    waiting.await.unwrap();
    let status = d.status();
    // 3 lacks the commit; 4 holds it, but promoting it leaves replicas in zone a only.
    assert_eq!(status.failover_candidates, vec![2]);
    let why: Vec<(u32, &str)> = status
        .not_candidates
        .iter()
        .map(|n| (n.server_id, n.reason.as_str()))
        .collect();
    assert_eq!(why.len(), 2, "{why:?}");
    assert_eq!(why[0].0, 3);
    assert!(why[0].1.contains("lacks 0-1-1 of the watermark"), "{why:?}");
    assert_eq!(why[1].0, 4);
    assert!(why[1].1.contains("1 zone(s) (a)"), "{why:?}");
}

#[tokio::test(start_paused = true)]
async fn a_fence_fails_parked_commits_and_keeps_what_it_cut_off() {
    let d = service(2, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let b = admit_replica(&d, 3, addr(), true, GtidPosition::default());
    // 4 reaches its quorum; 5 only one replica.
    for r in [&a, &b] {
        r.transaction_relayed(Some(gtid(4)), at(400));
        r.acked(at(400), Some(at(400)), None).unwrap();
    }
    let waiting = park(&d, commit(&[5])).await;
    a.transaction_relayed(Some(gtid(5)), at(500));
    a.acked(at(500), Some(at(500)), None).unwrap();
    settle().await;
    assert!(!waiting.is_finished());
    assert_eq!(d.outcome(&gtid(5)), GtidOutcome::Waiting);

    // The pipes stay open: the fence waits its drain for them, then reports.
    let (fence, newly) = d.fence(7, Duration::from_millis(50)).await;
    assert_eq!((fence.epoch, newly), (7, true));
    match waiting.await.unwrap() {
        Release::Fail(error) => {
            assert_eq!(error.cause, crate::durability::Cutoff::Fenced { epoch: 7 });
            assert_eq!(error.gtids, gtid(5).to_string());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.status().released["fenced"], 1);
    assert_eq!(d.tail().to_string(), "0-1-5");
    assert_eq!(d.outcome(&gtid(5)), GtidOutcome::Tail);
    assert_eq!(d.outcome(&gtid(4)), GtidOutcome::Acknowledged);
    assert_eq!(d.outcome(&gtid(9)), GtidOutcome::Unknown);
    // What the quorum already held still goes; anything else meets the fence at once.
    assert_eq!(Arc::clone(&d).wait(commit(&[4])).await, Release::Proceed);
    assert!(matches!(
        Arc::clone(&d).wait(commit(&[6])).await,
        Release::Fail(_)
    ));
    assert_eq!(d.tail().to_string(), "0-1-5..6");
    // Again: nothing changes.
    assert_eq!(d.fence(8, Duration::from_millis(50)).await, (fence, false));

    // What a restart reads back: both replicas, the watermark, the fence and its tail.
    let (_, kept) = d.persisted();
    let held: Vec<(u32, String)> = kept
        .replicas
        .iter()
        .map(|r| (r.server_id, r.held.to_string()))
        .collect();
    assert_eq!(held, [(2, "0-1-5".to_owned()), (3, "0-1-4".to_owned())]);
    drop((a, b));
    let again = service(2, OnTimeout::Block);
    again.restore(kept);
    assert!(again.gate().fenced());
    assert_eq!(again.outcome(&gtid(6)), GtidOutcome::Tail);
    assert_eq!(again.outcome(&gtid(4)), GtidOutcome::Acknowledged);
    let status = again.status();
    assert_eq!(status.departed.len(), 2);
    assert_eq!(status.failover_candidates, [2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_new_primary_starts_the_positions_again() {
    let d = service(1, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    a.transaction_relayed(Some(gtid(4)), at(900));
    a.acked(at(900), Some(at(900)), None).unwrap();
    // The pipe outlives the drain (a replica that takes nothing): its registration stays.
    d.fence(1, Duration::from_millis(10)).await;
    assert!(
        d.open_epoch(2, "db2:3306".into(), Duration::from_millis(10))
            .await
    );
    assert_eq!(
        (d.gate().epoch_number(), d.gate().epoch().primary()),
        (2, "db2:3306")
    );
    assert_eq!(d.status().quorum_position, None);
    // The replica's dump of the new epoch: the new primary's binlog starts low, and 500
    // there is not 500 of the old one, which the replica had passed. A commit waits for an
    // ACK in the new binlog.
    let b = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let new = |seqs: &[u64]| Commit {
        epoch: 2,
        gtids: seqs.iter().map(|&s| Gtid::maria(0, 2, s)).collect(),
        ..commit(seqs)
    };
    let waiting = park(&d, new(&[7])).await;
    b.transaction_relayed(Some(Gtid::maria(0, 2, 7)), at(500));
    settle().await;
    assert!(!waiting.is_finished(), "released by the old binlog's ACK");
    // What the old epoch's pipe says now is ignored, and counted.
    a.transaction_relayed(Some(Gtid::maria(0, 2, 7)), at(600));
    a.acked(at(600), Some(at(600)), None).unwrap();
    settle().await;
    assert!(!waiting.is_finished(), "released by an old epoch's ACK");
    assert_eq!(d.stale_reports(), 2);
    b.acked(at(500), Some(at(500)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
}

/// A statement of the old epoch, on its way when the follow came: its commit happened on the
/// retired primary and is never acknowledged, whatever the replicas hold; it joins the tail.
#[tokio::test(start_paused = true)]
async fn a_commit_of_a_retired_epoch_is_never_acknowledged() {
    let d = service(1, OnTimeout::Degrade);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    d.fence(1, Duration::from_millis(10)).await;
    d.open_epoch(2, "db2:3306".into(), Duration::from_millis(10))
        .await;
    drop(a);
    let b = admit_replica(&d, 2, addr(), true, state("0-1-11"));
    // The new replica holds 0-1-11 by its connect state; still, it was committed in epoch 1.
    match Arc::clone(&d).wait(commit(&[11])).await {
        Release::Fail(error) => {
            assert_eq!(error.cause, crate::durability::Cutoff::Fenced { epoch: 1 });
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.outcome(&gtid(11)), GtidOutcome::Tail);
    drop(b);
}

/// Writes to the primary pass a gate: refused once the epoch is fenced (unless reads go on)
/// or over, and the fence waits for those under way.
#[tokio::test(start_paused = true)]
async fn the_fence_waits_for_writes_under_way_and_refuses_new_ones() {
    let d = service(1, OnTimeout::Block);
    let pass = d.gate().pass(1, false).expect("epoch 1, not fenced");
    d.raise_fence(1);
    assert_eq!(
        d.gate().pass(1, false).err(),
        Some(Refused::Fenced { epoch: 1 })
    );
    assert!(
        d.gate().pass(1, true).is_ok(),
        "fenced_reads: statements go on"
    );
    // The write under way holds the drain until it is done (or the drain runs out).
    assert!(!d.drain_fence(Duration::from_millis(20), true).await);
    let drained = tokio::spawn({
        let d = Arc::clone(&d);
        async move { d.drain_fence(Duration::from_secs(5), true).await }
    });
    settle().await;
    assert!(!drained.is_finished());
    drop(pass);
    assert!(drained.await.unwrap());
    d.open_epoch(2, "db2:3306".into(), Duration::from_millis(10))
        .await;
    assert_eq!(
        d.gate().pass(1, true).err(),
        Some(Refused::Retired { epoch: 1, now: 2 })
    );
    assert!(d.gate().pass(2, false).is_ok());
    // A dump of the old epoch is not admitted.
    assert!(d
        .admit(1, 2, addr(), true, GtidPosition::default())
        .is_err());
}

/// The watermark holds every transaction the quorum passed, whoever committed it: no gap
/// where strongsync's clients did not commit.
#[tokio::test(start_paused = true)]
async fn the_watermark_takes_every_transaction_the_quorum_holds() {
    let d = service(1, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    let mysql = |n: u64| -> Gtid {
        format!("3e11fa47-71ca-11e1-9e33-c80aa9429562:{n}")
            .parse()
            .unwrap()
    };
    // A client's commits (2, 4) and direct writes (1, 3, 5) interleave.
    for n in 1..=5 {
        a.transaction_relayed(Some(mysql(n)), at(n * 100));
    }
    let waiting = park(&d, commit_of(&[mysql(4)])).await;
    a.acked(at(500), Some(at(500)), None).unwrap();
    assert_eq!(waiting.await.unwrap(), Release::Proceed);
    let status = d.status();
    assert_eq!(
        status.watermark.to_string(),
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
    );
    for n in 1..=5 {
        assert_eq!(d.outcome(&mysql(n)), GtidOutcome::Acknowledged, "{n}");
    }
}

#[tokio::test(start_paused = true)]
async fn even_relaying_only_nothing_of_a_fenced_primary_is_acknowledged() {
    let d = service(1, OnTimeout::Block);
    d.reconfigure(DurabilityConfig {
        passthrough: true,
        ..d.config()
    });
    assert_eq!(Arc::clone(&d).wait(commit(&[3])).await, Release::Proceed);
    d.fence(1, Duration::from_millis(10)).await;
    assert!(matches!(
        Arc::clone(&d).wait(commit(&[4])).await,
        Release::Fail(_)
    ));
    assert_eq!(d.outcome(&gtid(4)), GtidOutcome::Tail);
}

#[tokio::test(start_paused = true)]
async fn without_its_lease_an_instance_relays_nothing_and_releases_nothing() {
    let d = service(1, OnTimeout::Block);
    let a = admit_replica(&d, 2, addr(), true, GtidPosition::default());
    d.gate()
        .lease()
        .allow_until(tokio::time::Instant::now() + Duration::from_secs(8));
    assert!(d.gate().pass(1, false).is_ok());
    let waiting = park(&d, commit(&[5])).await;
    // The lease lapses while the commit waits (nothing renewed it: a pause, a partition);
    // then its quorum comes.
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(
        d.gate().pass(1, false).err(),
        Some(crate::gate::Refused::NotLeading { epoch: 1 })
    );
    a.transaction_relayed(Some(gtid(5)), at(500));
    a.acked(at(500), Some(at(500)), None).unwrap();
    match waiting.await.unwrap() {
        Release::Fail(error) => {
            assert_eq!(
                error.cause,
                crate::durability::Cutoff::NotLeading { epoch: 1 }
            );
            assert!(error.to_string().contains("strongsync outcome 0-1-5"));
        }
        other => panic!("released without the lease: {other:?}"),
    }
    assert_eq!(d.status().released["not_leading"], 1);
    // Renewed: it acts again.
    d.gate()
        .lease()
        .allow_until(tokio::time::Instant::now() + Duration::from_secs(8));
    assert_eq!(Arc::clone(&d).wait(commit(&[5])).await, Release::Proceed);
    // A commit parked when the keeper gives the lease up is answered at once, not left to wait
    // for a quorum that no pipe of this instance relays any more.
    let waiting = park(&d, commit(&[6])).await;
    d.stopped_leading();
    match waiting.await.unwrap() {
        Release::Fail(error) => {
            assert_eq!(
                error.cause,
                crate::durability::Cutoff::NotLeading { epoch: 1 }
            );
        }
        other => panic!("released without the lease: {other:?}"),
    }
    assert_eq!(d.status().released["not_leading"], 2);
}
