//! A replica made by hand, for what a real MariaDB replica will not do on command: withhold
//! or garble its ACKs, reconnect between an event and its ACK. It logs in and sets up its dump
//! as MariaDB 10.11's I/O thread does (verified-mariadb-10.11.md §4.1).

use std::net::SocketAddr;
use std::time::Duration;

use mysql_common::constants::CapabilityFlags;

use super::mariadb::{REPL_PASSWORD, REPL_USER};
use super::rawclient::RawClient;

/// How long a read waits for the next event before the dump counts as ended.
const EVENT_PATIENCE: Duration = Duration::from_secs(60);

/// Event types the tests look at.
pub const XID_EVENT: u8 = 16;
pub const HEARTBEAT_EVENT: u8 = 27;
pub const QUERY_EVENT: u8 = 2;
pub const XA_PREPARE_EVENT: u8 = 38;
pub const ROTATE_EVENT: u8 = 4;

/// A replica connection in the middle of its dump.
pub struct FakeReplica {
    client: RawClient,
    semisync: bool,
    /// The binlog file the stream is in (from the last ROTATE).
    file: String,
    /// The dump's first packet, read to see whether the dump was accepted.
    first: Option<(u8, Vec<u8>)>,
}

/// A dump request answered with an ERR instead of events.
pub struct Refused {
    pub code: u16,
    pub message: String,
    /// The connection, still open: what a client may do after its dump was refused.
    pub client: RawClient,
}

impl std::fmt::Debug for FakeReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeReplica {{ file: {:?} }}", self.file)
    }
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ERR {}: {}", self.code, self.message)
    }
}

/// One event as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The packet's sequence id.
    pub seq: u8,
    /// The ACK flag (always false without semisync).
    pub ack_requested: bool,
    pub kind: u8,
    pub log_pos: u32,
    /// The whole event (header first).
    pub event: Vec<u8>,
}

impl FakeReplica {
    /// Connects through `addr` as replica `server_id` with the replication account, asks for
    /// semisync if `semisync`, starts its dump from `connect_state` (GTIDs, comma-separated;
    /// empty for the beginning). Panics if the dump is refused.
    pub fn start(
        addr: SocketAddr,
        server_id: u32,
        semisync: bool,
        connect_state: &str,
    ) -> FakeReplica {
        FakeReplica::attempt(
            addr,
            (REPL_USER, REPL_PASSWORD),
            server_id,
            semisync,
            connect_state,
            &[],
        )
        .unwrap_or_else(|refused| panic!("the dump was refused: {refused:?}"))
    }

    /// Speaks the whole replica protocol as `account` (which need not be allowed to
    /// replicate): the setup queries (then `extra`), `COM_REGISTER_SLAVE`, the semisync
    /// negotiation if `semisync`, and the dump; whatever the server answers to the setup,
    /// it goes on, as a hostile client would. The dump's answer decides: an event, or the
    /// ERR that refused it.
    pub fn attempt(
        addr: SocketAddr,
        account: (&str, &str),
        server_id: u32,
        semisync: bool,
        connect_state: &str,
        extra: &[&str],
    ) -> Result<FakeReplica, Refused> {
        let (user, password) = account;
        let mut client =
            RawClient::connect_to(addr, user, password, None, CapabilityFlags::empty());
        let setup = [
            "SET @master_heartbeat_period= 1000000000".to_string(),
            "SET @master_binlog_checksum= @@global.binlog_checksum".to_string(),
            "SET @mariadb_slave_capability=4".to_string(),
            format!("SET @slave_connect_state='{connect_state}'"),
            "SET @slave_gtid_strict_mode=1".to_string(),
            "SET @slave_gtid_ignore_duplicates=0".to_string(),
        ];
        for sql in setup
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
        {
            client.query(sql);
        }
        let mut register = vec![0x15];
        register.extend_from_slice(&server_id.to_le_bytes());
        register.extend_from_slice(&[0, 0, 0, 0xdb, 0x62, 0, 0, 0, 0, 0, 0, 0, 0]);
        client.command(&register);
        if semisync {
            client.query("SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'");
            client.query("SET @rpl_semi_sync_slave= 1");
        }
        let mut dump = vec![0x12];
        dump.extend_from_slice(&4u32.to_le_bytes());
        dump.extend_from_slice(&2u16.to_le_bytes());
        dump.extend_from_slice(&server_id.to_le_bytes());
        client.send(&dump);
        // A test waiting for an event that never comes fails instead of hanging.
        client.set_read_timeout(Some(EVENT_PATIENCE));
        let (seq, payload) = client.read_packet();
        if payload.first() == Some(&0xFF) {
            return Err(Refused {
                code: u16::from_le_bytes([payload[1], payload[2]]),
                message: String::from_utf8_lossy(&payload[3..]).into_owned(),
                client,
            });
        }
        Ok(FakeReplica {
            client,
            semisync,
            file: String::new(),
            first: Some((seq, payload)),
        })
    }

    /// The next event, or `None` if the connection ended (EOF, ERR or closed).
    pub fn next_event(&mut self) -> Option<Received> {
        let (seq, payload) = match self.first.take() {
            Some(first) => first,
            None => self.client.try_read_packet()?,
        };
        if payload.first() != Some(&0x00) {
            return None;
        }
        let (ack_requested, event) = if self.semisync {
            assert_eq!(
                payload.get(1),
                Some(&0xEF),
                "semisync header: {payload:02x?}"
            );
            (payload[2] == 0x01, payload[3..].to_vec())
        } else {
            (false, payload[1..].to_vec())
        };
        // Events in these tests stay below 16 MiB: no continuation packets to join.
        if event[4] == ROTATE_EVENT {
            // u64 position | file name | CRC32
            self.file = String::from_utf8_lossy(&event[19 + 8..event.len() - 4]).into_owned();
        }
        Some(Received {
            seq,
            ack_requested,
            kind: event[4],
            log_pos: u32::from_le_bytes([event[13], event[14], event[15], event[16]]),
            event,
        })
    }

    /// Reads events until one matches `wanted`; panics if the dump ends first.
    pub fn until(&mut self, mut wanted: impl FnMut(&Received) -> bool) -> Received {
        loop {
            let event = self.next_event().expect("the dump ended");
            if wanted(&event) {
                return event;
            }
        }
    }

    /// The binlog file the stream is in.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Acknowledges an event as a MariaDB replica would: its end position in the current file.
    pub fn ack_event(&mut self, event: &Received) {
        let file = self.file.clone();
        self.ack(u64::from(event.log_pos), &file);
    }

    /// Sends an ACK for `position` in `file`.
    pub fn ack(&mut self, position: u64, file: &str) {
        let mut payload = vec![0xEF];
        payload.extend_from_slice(&position.to_le_bytes());
        payload.extend_from_slice(file.as_bytes());
        self.client.write_packet(0, &payload);
    }

    /// Sends any bytes as one packet with sequence id 0.
    pub fn send_packet(&mut self, payload: &[u8]) {
        self.client.write_packet(0, payload);
    }

    /// True once the proxy has closed the connection (within `timeout`); events still in
    /// flight are skipped.
    pub fn is_closed_within(&mut self, timeout: Duration) -> bool {
        self.client.is_closed_within(timeout)
    }
}
