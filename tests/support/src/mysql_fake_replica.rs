//! A MySQL 9.7 replica made by hand, packet by packet, for accounts and requests a real
//! receiver would give up on before its dump.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mysql_common::auth::plugins::caching_sha2_password::scramble_sha256;
use mysql_common::constants::CapabilityFlags;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{AuthPlugin, HandshakePacket, HandshakeResponse};
use mysql_common::proto::{MyDeserialize, MySerialize};

/// How long a hand-made replica waits for an answer.
const WIRE_PATIENCE: Duration = Duration::from_secs(60);

/// A connection that speaks a MySQL 9.7 replica's protocol, packet by packet, for accounts and
/// requests a real receiver would give up on before its dump.
pub struct HandMade {
    stream: TcpStream,
}

/// The dump request's answer when it is an ERR.
#[derive(Debug)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

/// What the server answered to one command: OK, a result set, or ERR.
#[derive(Debug)]
pub enum Answered {
    Ok,
    Rows,
    Err(Refusal),
}

impl HandMade {
    /// Logs in as `user` with `caching_sha2_password`'s fast path (the primary must have the
    /// account cached: [`crate::mysql::MySql::cache_password`]).
    pub fn login(addr: SocketAddr, user: &str, password: &str) -> HandMade {
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
    pub fn command(&mut self, payload: &[u8]) -> Answered {
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

    pub fn query(&mut self, sql: &str) -> Answered {
        let mut payload = vec![0x03];
        payload.extend_from_slice(sql.as_bytes());
        self.command(&payload)
    }

    /// Does what a 9.7 receiver does before its dump (verified-notes §4) as `server_id`, the
    /// semisync negotiation if `semisync`, then `extra`, and whatever the server answers goes
    /// on, as a hostile client would; then `COM_BINLOG_DUMP_GTID` claiming `has`. The dump's
    /// first answer decides: the ERR that refused it, or `None` for an event.
    pub fn attempt_dump(
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
pub fn dump_gtid(server_id: u32, has: &[(&str, u64, u64)]) -> Vec<u8> {
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
