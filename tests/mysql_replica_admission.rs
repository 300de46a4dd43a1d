//! Who counts as a replica on MySQL 9.7, and with what. Clients that speak a 9.7 replica's whole
//! protocol through the SQL port (`caching_sha2_password`, the receiver's setup queries,
//! `COM_REGISTER_SLAVE`, the semisync negotiation, `COM_BINLOG_DUMP_GTID`) but whose dump is
//! refused — without `REPLICATION SLAVE`, asking for GTIDs the primary does not have, or with
//! semisync switched on in the primary's session — change nothing: a parked commit stays
//! parked until a real replica has it, and nothing shows in `/status`, metrics or failover
//! candidates. A replica whose GTID set spans several sources (its own UUID, tags, a
//! transaction of the primary's it got without receiving it) is credited with exactly that set,
//! source by source: a commit it holds counts by its connect state, one it lacks only once
//! its own `RECEIVED_TRANSACTION_SET` has it. And `/status` shows each replica's acknowledged
//! GTID set as the replica's own sets bound it (the server's `GTID_SUBSET`), with the failover
//! candidates that hold every acknowledged commit.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_common::auth::plugins::caching_sha2_password::scramble_sha256;
use mysql_common::constants::CapabilityFlags;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{AuthPlugin, HandshakePacket, HandshakeResponse};
use mysql_common::proto::{MyDeserialize, MySerialize};
use serde_json::Value;
use strongsync::config::OnTimeout;
use strongsync_proto::gtid::GtidPosition;
use support::admin;
use support::mariadb::{wait_for, REPL_PASSWORD, REPL_USER};
use support::mysql::{sql_quote, MySql};
use support::mysql_gtid::gtid_set_holds;
use support::strong::{answered, durability, spawn_watched, Strong, PATIENCE};
use support::tcp_relay::{Direction, TcpRelay};
use support::topology::MySqlTopology;

type MySqlStrong = Strong<MySqlTopology>;

/// The account without `REPLICATION SLAVE` that poses as a replica.
const PLAIN_USER: &str = "plain";
const PLAIN_PASSWORD: &str = "plain-secret";
/// How long a hand-made replica waits for an answer.
const WIRE_PATIENCE: Duration = Duration::from_secs(60);

// === GTID sets ===

/// The primary's `server_uuid`.
fn primary_uuid(s: &MySqlStrong) -> String {
    s.topology.primary.sql("SELECT @@global.server_uuid")
}

/// The newest GTID the primary executed of `source` (`uuid` or `uuid:tag`).
fn newest_of(s: &MySqlStrong, source: &str) -> String {
    let executed = s.topology.primary.gtid_executed();
    let newest = support::mysql_gtid::newest_of(&executed, source)
        .unwrap_or_else(|| panic!("the primary executed no GTID of {source}"));
    format!("{source}:{newest}")
}

/// The sequence number of a `uuid[:tag]:n` GTID.
fn number_of(gtid: &str) -> u64 {
    gtid.rsplit(':').next().unwrap().parse().unwrap()
}

/// Whether everything in `set` is in `server`'s `gtid_executed` or its
/// `RECEIVED_TRANSACTION_SET`, as the server itself computes it (read now: both only grow).
fn server_has(server: &MySql, set: &str) -> bool {
    let answer = server.sql(&format!(
        "SELECT GTID_SUBSET(GTID_SUBTRACT({}, @@global.gtid_executed), \
         (SELECT RECEIVED_TRANSACTION_SET FROM performance_schema.replication_connection_status \
          WHERE CHANNEL_NAME = ''))",
        sql_quote(set)
    ));
    answer == "1"
}

// === /status and metrics ===

/// `/status`'s record of replica `server_id` (connected or departed).
fn replica_record(status: &Value, server_id: u32) -> Value {
    status["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["server_id"] == server_id)
        .unwrap_or_else(|| panic!("replica {server_id} is not in /status: {status:#}"))
        .clone()
}

/// What `/status` credits replica `server_id` with.
fn credited(s: &MySqlStrong, server_id: u32) -> String {
    let status = admin::status(s.proxy.admin_addr());
    replica_record(&status, server_id)["acked_gtid_position"]
        .as_str()
        .unwrap()
        .to_owned()
}

// === A hand-made MySQL 9.7 replica ===

/// A connection that speaks a MySQL 9.7 replica's protocol, packet by packet, for accounts and
/// requests a real receiver would give up on before its dump.
struct HandMade {
    stream: TcpStream,
}

/// The dump request's answer when it is an ERR.
#[derive(Debug)]
struct Refusal {
    code: u16,
    message: String,
}

/// What the server answered to one command: OK, a result set, or ERR.
#[derive(Debug)]
enum Answered {
    Ok,
    Rows,
    Err(Refusal),
}

impl HandMade {
    /// Logs in as `user` with `caching_sha2_password`'s fast path (the primary must have the
    /// account cached: [`MySql::cache_password`]).
    fn login(addr: SocketAddr, user: &str, password: &str) -> HandMade {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(WIRE_PATIENCE)).unwrap();
        let mut wire = HandMade { stream };
        let (_, greeting) = wire.read_packet();
        let handshake =
            HandshakePacket::deserialize((), &mut ParseBuf(&greeting)).expect("a greeting");
        let nonce: [u8; 20] = handshake.nonce()[..20].try_into().unwrap();
        let token = scramble_sha256(&nonce, password.as_bytes()).unwrap();
        let caps = (CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_TRANSACTIONS)
            & handshake.capabilities();
        let response = HandshakeResponse::new(
            Some(&token[..]),
            (9, 7, 4),
            Some(user.as_bytes()),
            None::<&[u8]>,
            Some(AuthPlugin::CachingSha2Password),
            caps,
            None,
            1 << 30,
        );
        let mut payload = Vec::new();
        response.serialize(&mut payload);
        wire.write_packet(1, &payload);
        let (_, reply) = wire.read_packet();
        assert_eq!(reply, [0x01, 0x03], "fast authentication for {user}");
        let (_, ok) = wire.read_packet();
        assert_eq!(ok.first(), Some(&0x00), "login of {user}: {ok:02x?}");
        wire
    }

    /// Sends one command and reads its whole answer (no `CLIENT_DEPRECATE_EOF`: a result set
    /// ends at its second EOF).
    fn command(&mut self, payload: &[u8]) -> Answered {
        self.write_packet(0, payload);
        let (_, first) = self.read_packet();
        match first.first() {
            Some(0x00) => return Answered::Ok,
            Some(0xFF) => return Answered::Err(refusal(&first)),
            _ => {}
        }
        let mut eofs = 0;
        while eofs < 2 {
            let (_, packet) = self.read_packet();
            match packet.first() {
                Some(0xFE) if packet.len() < 9 => eofs += 1,
                Some(0xFF) => return Answered::Err(refusal(&packet)),
                _ => {}
            }
        }
        Answered::Rows
    }

    fn query(&mut self, sql: &str) -> Answered {
        let mut payload = vec![0x03];
        payload.extend_from_slice(sql.as_bytes());
        self.command(&payload)
    }

    /// Does what a 9.7 receiver does before its dump (verified-notes §4) as `server_id`, the
    /// semisync negotiation if `semisync`, then `extra`, and whatever the server answers goes
    /// on, as a hostile client would; then `COM_BINLOG_DUMP_GTID` claiming `has`. The dump's
    /// first answer decides: the ERR that refused it, or `None` for an event.
    fn attempt_dump(
        &mut self,
        server_id: u32,
        semisync: bool,
        has: &[(&str, u64, u64)],
        extra: &[&str],
    ) -> Option<Refusal> {
        for sql in [
            "SELECT UNIX_TIMESTAMP()",
            "SELECT @@GLOBAL.SERVER_ID",
            "SET @master_heartbeat_period = 2000000000, @source_heartbeat_period = 2000000000",
            "SET @master_binlog_checksum = @@global.binlog_checksum, \
             @source_binlog_checksum = @@global.binlog_checksum",
            "SELECT @source_binlog_checksum",
            "SELECT @@GLOBAL.GTID_MODE",
            "SELECT @@GLOBAL.SERVER_UUID",
        ] {
            self.query(sql);
        }
        let mut register = vec![0x15];
        register.extend_from_slice(&server_id.to_le_bytes());
        register.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        self.command(&register);
        if semisync {
            self.query("SELECT @@global.rpl_semi_sync_source_enabled");
            self.query("SET @rpl_semi_sync_replica = 1");
        }
        for sql in extra {
            self.query(sql);
        }
        self.write_packet(0, &dump_gtid(server_id, has));
        let (_, first) = self.read_packet();
        (first.first() == Some(&0xFF)).then(|| refusal(&first))
    }

    fn read_packet(&mut self) -> (u8, Vec<u8>) {
        let mut header = [0u8; 4];
        self.stream
            .read_exact(&mut header)
            .expect("a packet header");
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        let mut payload = vec![0; len];
        self.stream.read_exact(&mut payload).expect("a packet body");
        (header[3], payload)
    }

    fn write_packet(&mut self, seq: u8, payload: &[u8]) {
        let mut packet = u32::try_from(payload.len()).unwrap().to_le_bytes()[..3].to_vec();
        packet.push(seq);
        packet.extend_from_slice(payload);
        self.stream.write_all(&packet).expect("write a packet");
    }
}

fn refusal(err: &[u8]) -> Refusal {
    // ff | code u16 | '#' sqlstate(5) | message
    Refusal {
        code: u16::from_le_bytes([err[1], err[2]]),
        message: String::from_utf8_lossy(&err[9..]).into_owned(),
    }
}

/// `COM_BINLOG_DUMP_GTID` as `server_id`, from position 4 of no file, holding `has`
/// (`(uuid, first, last)` intervals, untagged; the set in its untagged encoding).
fn dump_gtid(server_id: u32, has: &[(&str, u64, u64)]) -> Vec<u8> {
    let mut set = (has.len() as u64).to_le_bytes().to_vec();
    for (uuid, first, last) in has {
        let hex: String = uuid.chars().filter(|c| *c != '-').collect();
        set.extend((0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()));
        set.extend_from_slice(&1u64.to_le_bytes());
        set.extend_from_slice(&first.to_le_bytes());
        set.extend_from_slice(&(last + 1).to_le_bytes());
    }
    let mut dump = vec![0x1e];
    dump.extend_from_slice(&2u16.to_le_bytes());
    dump.extend_from_slice(&server_id.to_le_bytes());
    dump.extend_from_slice(&0u32.to_le_bytes());
    dump.extend_from_slice(&4u64.to_le_bytes());
    dump.extend_from_slice(&u32::try_from(set.len()).unwrap().to_le_bytes());
    dump.extend_from_slice(&set);
    dump
}

// === Tests ===

#[tokio::test(flavor = "multi_thread")]
async fn clients_that_speak_the_replica_protocol_but_are_refused_a_dump_change_nothing() {
    let s = MySqlStrong::start_on(
        2,
        durability(2, OnTimeout::Block, Duration::from_secs(3600)),
    );
    let primary = &s.topology.primary;
    primary.sql(&format!(
        "CREATE USER '{PLAIN_USER}'@'%' IDENTIFIED WITH caching_sha2_password BY \
         '{PLAIN_PASSWORD}'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON sbtest.* TO '{PLAIN_USER}'@'%'"
    ));
    primary.cache_password(PLAIN_USER, PLAIN_PASSWORD);
    primary.cache_password(REPL_USER, REPL_PASSWORD);
    // Replica B stops: a commit parks with A's acknowledgement only (quorum 2).
    s.stop_io(1);
    s.wait_semisync(1);
    let commit = spawn_watched(
        s.client().await,
        "INSERT INTO t (v) VALUES (1)",
        vec![s.witness(1)],
    );
    s.wait_parked(1);
    let uuid = primary_uuid(&s);
    let gtid = newest_of(&s, &uuid);
    let a = s.topology.replicas[0].server_id();
    wait_for("A to acknowledge the parked commit", PATIENCE, || {
        gtid_set_holds(&credited(&s, a), &gtid)
    });
    assert!(
        !gtid_set_holds(&s.witness(1).received(), &gtid),
        "B is stopped"
    );
    let before = admin::status(s.proxy.admin_addr());
    let metrics_before = admin::metrics(s.proxy.admin_addr());
    let far_ahead = [(uuid.as_str(), 1, number_of(&gtid) + 1_000_000)];

    // 1. An application account without REPLICATION SLAVE, claiming A's server id and every
    //    transaction there will ever be, with semisync.
    let mut plain = HandMade::login(s.proxy.addr(), PLAIN_USER, PLAIN_PASSWORD);
    let refused = plain
        .attempt_dump(a, true, &far_ahead, &[])
        .expect("the primary refuses the dump");
    assert_eq!(refused.code, 1227, "{}", refused.message);
    // What would be an ACK of everything is, on a client connection, an unknown command.
    let mut ack = vec![0xEF];
    ack.extend_from_slice(&u64::MAX.to_le_bytes());
    ack.extend_from_slice(b"binlog.999999");
    let reply = plain.command(&ack);
    assert!(
        matches!(reply, Answered::Err(Refusal { code: 1047, .. })),
        "forwarded to the primary, which does not know it: {reply:?}"
    );
    drop(plain);

    // 2. The replication account, asking for GTIDs the primary's binlog does not have.
    let mut repl = HandMade::login(s.proxy.addr(), REPL_USER, REPL_PASSWORD);
    let refused = repl
        .attempt_dump(77, true, &far_ahead, &[])
        .expect("the primary refuses the dump");
    assert_eq!(refused.code, 1236, "{}", refused.message);
    drop(repl);

    // 3. The replication account under A's server id, with semisync switched on in the
    //    primary's own session (a form the proxy does not answer itself): the proxy refuses
    //    the dump before the primary sees it.
    let mut repl = HandMade::login(s.proxy.addr(), REPL_USER, REPL_PASSWORD);
    let refused = repl
        .attempt_dump(
            a,
            false,
            &[(uuid.as_str(), 1, number_of(&gtid))],
            &["SET @rpl_semi_sync_replica := 1"],
        )
        .expect("the proxy refuses the dump");
    assert_eq!(refused.code, 1236, "{}", refused.message);
    assert!(
        refused.message.contains("strongsync"),
        "{}",
        refused.message
    );
    drop(repl);

    // Every attempt is over (each got its ERR): nothing changed.
    assert_eq!(s.parked(), 1, "the commit is still parked");
    let after = admin::status(s.proxy.admin_addr());
    assert_eq!(
        admin::replica_standing(&after),
        admin::replica_standing(&before)
    );
    assert!(
        !after["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["server_id"] == 77),
        "{after:#}"
    );
    let metrics_after = admin::metrics(s.proxy.admin_addr());
    assert_eq!(
        admin::replica_series(&metrics_after),
        admin::replica_series(&metrics_before)
    );
    assert_eq!(
        metrics_after.get("strongsync_replica_dumps_refused_total")
            - metrics_before.get("strongsync_replica_dumps_refused_total"),
        3.0
    );
    assert!(!gtid_set_holds(&s.witness(1).received(), &gtid));

    // B comes back: the OK arrives once B has the transaction — B's own record says so.
    s.start_io(1);
    let watched = answered(commit).await;
    watched.result.expect("OK");
    assert!(
        gtid_set_holds(&watched.received[0], &gtid),
        "B had received {} when the OK came, not {gtid}",
        watched.received[0]
    );
    assert_eq!(s.released("quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_reconnecting_with_two_source_uuids_is_credited_with_exactly_what_it_holds() {
    // Quorum 2: each commit parks until both replicas hold it. A is away while three commit:
    // one it will hold without receiving it (the primary's GTID, committed on A by hand), and
    // two it lacks although it holds their numbers under another source — its own UUID, and
    // the primary's UUID without the tag. A credit that mixed sources up would release them
    // as A connects.
    let s = MySqlStrong::start_on(
        2,
        durability(2, OnTimeout::Block, Duration::from_secs(3600)),
    );
    let uuid = primary_uuid(&s);
    let tag = "sometag";
    s.stop_io(0);
    s.wait_semisync(1);
    let held = spawn_watched(
        s.client().await,
        "INSERT INTO t (v) VALUES (1)",
        vec![s.witness(0), s.witness(1)],
    );
    s.wait_parked(1);
    let g_held = newest_of(&s, &uuid);
    let other_uuid = spawn_watched(
        s.client().await,
        "INSERT INTO t (v) VALUES (2)",
        vec![s.witness(0)],
    );
    s.wait_parked(2);
    let g_other_uuid = newest_of(&s, &uuid);
    let mut tagged = s.client().await;
    tagged
        .query_drop(format!("SET gtid_next = 'AUTOMATIC:{tag}'"))
        .await
        .unwrap();
    let other_tag = spawn_watched(tagged, "INSERT INTO t (v) VALUES (3)", vec![s.witness(0)]);
    s.wait_parked(3);
    let g_other_tag = newest_of(&s, &format!("{uuid}:{tag}"));

    // A, on its own: the held commit's GTID as an empty transaction; its own UUID up to the
    // second commit's number, with a real write among them; a tagged write of its own; and the
    // primary's untagged number of the tagged commit, which it has already.
    let a = &s.topology.replicas[0];
    let a_uuid = a.sql("SELECT @@global.server_uuid");
    a.sql(&format!(
        "SET gtid_next = '{g_held}'; BEGIN; COMMIT; \
         SET gtid_next = '{a_uuid}:{n}'; BEGIN; COMMIT; \
         SET gtid_next = 'AUTOMATIC'; \
         CREATE TABLE sbtest.local_only (v INT PRIMARY KEY); \
         INSERT INTO sbtest.local_only VALUES (1); \
         SET gtid_next = 'AUTOMATIC:{tag}'; INSERT INTO sbtest.local_only VALUES (2); \
         SET gtid_next = 'AUTOMATIC'",
        n = number_of(&g_other_uuid)
    ));
    let a_holds = a.gtid_executed();
    assert!(gtid_set_holds(&a_holds, &g_held), "{a_holds}");
    assert!(gtid_set_holds(
        &a_holds,
        &format!("{a_uuid}:{}", number_of(&g_other_uuid))
    ));
    assert!(
        gtid_set_holds(&a_holds, &format!("{a_uuid}:{tag}:1")),
        "{a_holds}"
    );
    assert!(gtid_set_holds(
        &a_holds,
        &format!("{uuid}:{}", number_of(&g_other_tag))
    ));
    for lacked in [&g_other_uuid, &g_other_tag] {
        assert!(!gtid_set_holds(&a_holds, lacked), "{lacked} in {a_holds}");
        assert!(!gtid_set_holds(&a.received_transaction_set(), lacked));
    }
    assert!(!gtid_set_holds(&a.received_transaction_set(), &g_held));

    // A reconnects through the proxy, its stream slowed so that what the proxy credits on
    // connecting and what A receives later cannot be confused.
    let slow = TcpRelay::start(s.proxy.addr());
    slow.set_delay(Direction::FromTarget, Duration::from_millis(500));
    s.topology.point_replica_at(0, "127.0.0.1", slow.port());

    // The commit A holds goes by A's connect state: A never received it.
    let watched = answered(held).await;
    watched.result.expect("OK");
    assert!(
        !gtid_set_holds(&watched.received[0], &g_held),
        "A received {g_held}: {}",
        watched.received[0]
    );
    assert!(gtid_set_holds(&watched.received[1], &g_held), "B has it");
    let at_first_ok = credited(&s, a.server_id());
    for gtid in [
        g_held.clone(),
        format!("{a_uuid}:{}", number_of(&g_other_uuid)),
        format!("{a_uuid}:{tag}:1"),
        format!("{uuid}:{}", number_of(&g_other_tag)),
    ] {
        assert!(
            gtid_set_holds(&at_first_ok, &gtid),
            "{gtid} not in {at_first_ok}"
        );
    }
    assert!(
        server_has(a, &at_first_ok),
        "A is credited with {at_first_ok}, more than it has"
    );

    // The commits A lacks go only once A itself has received them.
    for (commit, gtid) in [(other_uuid, &g_other_uuid), (other_tag, &g_other_tag)] {
        let watched = answered(commit).await;
        watched.result.expect("OK");
        assert!(
            gtid_set_holds(&watched.received[0], gtid),
            "A had received {} when the OK for {gtid} came",
            watched.received[0]
        );
    }
    assert_eq!(s.released("quorum"), 3);

    // What the proxy credits A with is what A itself says it holds, source by source.
    s.topology.wait_replicas_caught_up();
    let credit = credited(&s, a.server_id());
    let executed = a.gtid_executed();
    assert_eq!(
        GtidPosition::parse_mysql(&credit).unwrap(),
        GtidPosition::parse_mysql(&executed).unwrap(),
        "credited {credit}, A holds {executed}"
    );
    assert!(a.gtid_subset(&credit, &executed) && a.gtid_subset(&executed, &credit));
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_each_replicas_acknowledged_gtid_set_and_the_failover_candidates() {
    let s = MySqlStrong::start_on(
        2,
        durability(1, OnTimeout::Block, Duration::from_secs(3600)),
    );
    let uuid = primary_uuid(&s);
    let ids: Vec<u32> = s.topology.replicas.iter().map(MySql::server_id).collect();
    let mut conn = s.client().await;
    for v in 1..=3 {
        conn.query_drop(format!("INSERT INTO t (v) VALUES ({v})"))
            .await
            .unwrap();
    }
    let newest = newest_of(&s, &uuid);
    wait_for(
        "both replicas to acknowledge every commit",
        PATIENCE,
        || {
            ids.iter()
                .all(|&id| gtid_set_holds(&credited(&s, id), &newest))
        },
    );

    let status = admin::status(s.proxy.admin_addr());
    let executed = s.topology.primary.gtid_executed();
    assert_eq!(executed, format!("{uuid}:1-{}", number_of(&newest)));
    for (replica, &id) in s.topology.replicas.iter().zip(&ids) {
        let record = replica_record(&status, id);
        let acked = record["acked_gtid_position"].as_str().unwrap();
        // A MySQL GTID set, in the server's own form: here, everything the primary executed.
        assert_eq!(acked, executed, "replica {id}: {record:#}");
        assert!(
            server_has(replica, acked),
            "replica {id} lacks some of {acked}"
        );
        assert!(
            replica.gtid_subset(&newest, &replica.received_transaction_set()),
            "replica {id} acknowledged {newest} through the proxy: it received it"
        );
    }
    let acknowledged = status["acknowledged_gtid_position"].as_str().unwrap();
    assert!(gtid_set_holds(acknowledged, &newest), "{status:#}");
    assert!(s.topology.primary.gtid_subset(acknowledged, &executed));
    assert_eq!(status["failover_candidates"], serde_json::json!(ids));
    assert_eq!(status["not_failover_candidates"], serde_json::json!([]));

    // B stops; a commit goes on A's acknowledgement alone. B no longer holds every
    // acknowledged commit, and B's own record agrees.
    s.stop_io(1);
    s.wait_semisync(1);
    conn.query_drop("INSERT INTO t (v) VALUES (4)")
        .await
        .unwrap();
    let later = newest_of(&s, &uuid);
    let b = &s.topology.replicas[1];
    assert!(!gtid_set_holds(&b.received_transaction_set(), &later));
    assert!(gtid_set_holds(
        &s.topology.replicas[0].received_transaction_set(),
        &later
    ));
    let status = admin::status(s.proxy.admin_addr());
    assert!(gtid_set_holds(
        status["acknowledged_gtid_position"].as_str().unwrap(),
        &later
    ));
    assert_eq!(status["failover_candidates"], serde_json::json!([ids[0]]));
    let not = &status["not_failover_candidates"];
    assert_eq!(not.as_array().unwrap().len(), 1, "{not:#}");
    assert_eq!(not[0]["server_id"], ids[1]);
    assert!(
        not[0]["reason"].as_str().unwrap().contains(&later),
        "{not:#}"
    );
    let b_record = replica_record(&status, ids[1]);
    assert_eq!(b_record["connected"], false);
    assert!(server_has(
        b,
        b_record["acked_gtid_position"].as_str().unwrap()
    ));

    // B back: it catches up and is a candidate again.
    s.start_io(1);
    wait_for("B to acknowledge the commit it missed", PATIENCE, || {
        gtid_set_holds(&credited(&s, ids[1]), &later)
    });
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!(status["failover_candidates"], serde_json::json!(ids));
}
