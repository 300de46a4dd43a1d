//! A minimal blocking MySQL client built on `mysql_common`'s packet types, for what the common
//! client libraries do not expose: choosing capabilities (session tracking, DEPRECATE_EOF)
//! and reading the session-state block of every OK.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mysql_common::auth::plugins::caching_sha2_password::scramble_sha256;
use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use mysql_common::constants::{CapabilityFlags, StatusFlags};
use mysql_common::io::ParseBuf;
use mysql_common::packets::session_state_change::SessionStateChange;
use mysql_common::packets::{
    AuthPlugin, CommonOkPacket, ErrPacket, HandshakePacket, HandshakeResponse, OkPacket,
    OkPacketDeserializer, ResultSetTerminator,
};
use mysql_common::proto::{MyDeserialize, MySerialize};

/// One connection.
pub struct RawClient {
    stream: TcpStream,
    pub caps: CapabilityFlags,
    pub connection_id: u32,
}

/// What the client got back for one command.
#[derive(Debug, Default)]
pub struct Reply {
    /// Every OK packet (including OK-FE terminators), parsed.
    pub oks: Vec<OkPacket<'static>>,
    /// Text rows, first column only (`None` for NULL).
    pub first_values: Vec<Option<Vec<u8>>>,
    /// ERR code and message, if the command failed.
    pub error: Option<(u16, String)>,
    /// Status flags of legacy EOF terminators.
    pub eof_statuses: Vec<StatusFlags>,
}

impl RawClient {
    /// Logs in with `mysql_native_password`. `extra` capabilities are added to a basic set
    /// (protocol 4.1, secure connection, plugin auth, multi-statements, multi-results).
    pub fn connect(
        addr: SocketAddr,
        user: &str,
        password: &str,
        extra: CapabilityFlags,
    ) -> RawClient {
        RawClient::connect_to(addr, user, password, Some("sbtest"), extra)
    }

    /// Like [`connect`](Self::connect), with a chosen initial database (or none).
    pub fn connect_to(
        addr: SocketAddr,
        user: &str,
        password: &str,
        db: Option<&str>,
        extra: CapabilityFlags,
    ) -> RawClient {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        let (_, greeting) = read_packet(&mut stream);
        let handshake =
            HandshakePacket::deserialize((), &mut ParseBuf(&greeting)).expect("greeting");
        let caps = (CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_MULTI_STATEMENTS
            | CapabilityFlags::CLIENT_MULTI_RESULTS
            | extra)
            & handshake.capabilities();
        let nonce = handshake.nonce();
        // MySQL 9's accounts use caching_sha2_password: its fast path (the server has the
        // password cached from an earlier full login) needs neither TLS nor a key.
        let sha2 = handshake.auth_plugin_name_ref() == Some(b"caching_sha2_password");
        let (token, plugin) = if sha2 {
            let nonce: [u8; 20] = nonce[..20].try_into().expect("a 20-byte nonce");
            let token = scramble_sha256(&nonce, password.as_bytes()).unwrap();
            (token.to_vec(), AuthPlugin::CachingSha2Password)
        } else {
            let token = scramble_native(&nonce, password.as_bytes()).unwrap();
            (token.to_vec(), AuthPlugin::MysqlNativePassword)
        };
        let payload = handshake_response_with(user, db, &token, caps, plugin);
        write_packet(&mut stream, 1, &payload);
        let (_, mut reply) = read_packet(&mut stream);
        if sha2 && reply == [0x01, 0x03] {
            reply = read_packet(&mut stream).1;
        }
        assert_eq!(
            reply.first(),
            Some(&0x00),
            "login failed: {:?}",
            String::from_utf8_lossy(&reply)
        );
        RawClient {
            stream,
            caps,
            connection_id: handshake.connection_id(),
        }
    }

    /// Sends a `COM_QUERY` and reads its whole response.
    pub fn query(&mut self, sql: &str) -> Reply {
        let mut payload = vec![0x03];
        payload.extend_from_slice(sql.as_bytes());
        self.command(&payload)
    }

    /// Sends any command answered by OK, ERR or result sets, and reads the answer.
    pub fn command(&mut self, payload: &[u8]) -> Reply {
        write_packet(&mut self.stream, 0, payload);
        self.read_reply()
    }

    /// `COM_STMT_PREPARE`: returns the statement id and its column count.
    pub fn prepare(&mut self, sql: &str) -> (u32, usize) {
        let mut payload = vec![0x16];
        payload.extend_from_slice(sql.as_bytes());
        write_packet(&mut self.stream, 0, &payload);
        let (_, ok) = read_packet(&mut self.stream);
        assert_eq!(
            ok[0],
            0x00,
            "prepare failed: {}",
            String::from_utf8_lossy(&ok)
        );
        let id = u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]]);
        let columns = u16::from_le_bytes([ok[5], ok[6]]) as usize;
        let params = u16::from_le_bytes([ok[7], ok[8]]) as usize;
        let eofs = if self.deprecate_eof() { 0 } else { 1 };
        for count in [params, columns] {
            if count > 0 {
                for _ in 0..count + eofs {
                    read_packet(&mut self.stream);
                }
            }
        }
        (id, columns)
    }

    /// `COM_STMT_EXECUTE` of a parameterless statement with a read-only cursor; returns the
    /// status flags of the packet that ends the response (it must say CURSOR_EXISTS).
    pub fn execute_with_cursor(&mut self, stmt: u32, columns: usize) -> StatusFlags {
        let mut payload = vec![0x17];
        payload.extend_from_slice(&stmt.to_le_bytes());
        payload.push(0x01); // CURSOR_TYPE_READ_ONLY
        payload.extend_from_slice(&1u32.to_le_bytes());
        write_packet(&mut self.stream, 0, &payload);
        let (_, count) = read_packet(&mut self.stream);
        assert_eq!(count[0] as usize, columns, "{count:02x?}");
        for _ in 0..columns {
            read_packet(&mut self.stream);
        }
        let (_, end) = read_packet(&mut self.stream);
        assert_eq!(end[0], 0xFE, "no rows may follow a cursor: {end:02x?}");
        terminator_status(&end)
    }

    /// `COM_STMT_FETCH` of up to `rows` rows: returns how many came and the end status.
    pub fn fetch(&mut self, stmt: u32, rows: u32) -> (usize, StatusFlags) {
        let mut payload = vec![0x1C];
        payload.extend_from_slice(&stmt.to_le_bytes());
        payload.extend_from_slice(&rows.to_le_bytes());
        write_packet(&mut self.stream, 0, &payload);
        let mut got = 0;
        loop {
            let (_, packet) = read_packet(&mut self.stream);
            match packet[0] {
                0x00 => got += 1,
                0xFE => return (got, terminator_status(&packet)),
                _ => panic!("fetch failed: {}", String::from_utf8_lossy(&packet)),
            }
        }
    }

    /// Reads one packet (sequence id, payload); panics if the connection closed.
    pub fn read_packet(&mut self) -> (u8, Vec<u8>) {
        read_packet(&mut self.stream)
    }

    /// Writes one packet with sequence id `seq`.
    pub fn write_packet(&mut self, seq: u8, payload: &[u8]) {
        write_packet(&mut self.stream, seq, payload);
    }

    /// Sends a command that gets no response (e.g. `COM_STMT_CLOSE`).
    pub fn send(&mut self, payload: &[u8]) {
        write_packet(&mut self.stream, 0, payload);
    }

    /// Writes raw bytes (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write raw bytes");
    }

    /// Reads one packet, or `None` if the connection was closed.
    pub fn try_read_packet(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut header = [0u8; 4];
        self.stream.read_exact(&mut header).ok()?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        let mut payload = vec![0u8; len];
        self.stream.read_exact(&mut payload).ok()?;
        Some((header[3], payload))
    }

    /// Reads give up after `timeout` (as if the connection had closed) instead of waiting
    /// forever.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.stream.set_read_timeout(timeout).unwrap();
    }

    /// True once the server (proxy) has closed the connection; waits up to `timeout`.
    pub fn is_closed_within(&mut self, timeout: std::time::Duration) -> bool {
        let before = self.stream.read_timeout().unwrap();
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        let mut byte = [0u8; 1];
        let closed = loop {
            match self.stream.read(&mut byte) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        self.stream.set_read_timeout(before).unwrap();
        closed
    }

    /// The socket, for tests that misbehave on it after logging in.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn deprecate_eof(&self) -> bool {
        self.caps.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
    }

    fn read_reply(&mut self) -> Reply {
        let deprecate_eof = self.deprecate_eof();
        let mut reply = Reply::default();
        loop {
            let (_, first) = read_packet(&mut self.stream);
            match first.first() {
                Some(0x00) => {
                    let ok = self.parse_ok::<CommonOkPacket>(&first);
                    let more = ok
                        .status_flags()
                        .contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS);
                    reply.oks.push(ok);
                    if !more {
                        return reply;
                    }
                }
                Some(0xFF) => {
                    let err = ErrPacket::deserialize(self.caps, &mut ParseBuf(&first)).unwrap();
                    let err = err.server_error();
                    reply.error = Some((err.error_code(), err.message_str().into_owned()));
                    return reply;
                }
                Some(_) => {
                    let columns = first[0] as usize; // fine for the small result sets tests use
                    for _ in 0..columns {
                        read_packet(&mut self.stream);
                    }
                    if !deprecate_eof {
                        read_packet(&mut self.stream);
                    }
                    let more = loop {
                        let (_, row) = read_packet(&mut self.stream);
                        match row.first() {
                            Some(0xFE) if deprecate_eof && row.len() < 0xFF_FFFF => {
                                let ok = self.parse_ok::<ResultSetTerminator>(&row);
                                let more = ok
                                    .status_flags()
                                    .contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS);
                                reply.oks.push(ok);
                                break more;
                            }
                            Some(0xFE) if row.len() < 9 => {
                                let status = StatusFlags::from_bits_retain(u16::from_le_bytes([
                                    row[3], row[4],
                                ]));
                                reply.eof_statuses.push(status);
                                break status.contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS);
                            }
                            Some(0xFF) => {
                                let err =
                                    ErrPacket::deserialize(self.caps, &mut ParseBuf(&row)).unwrap();
                                reply.error = Some((
                                    err.server_error().error_code(),
                                    err.server_error().message_str().into_owned(),
                                ));
                                return reply;
                            }
                            Some(0xFB) => reply.first_values.push(None),
                            _ => {
                                let len = row[0] as usize;
                                reply.first_values.push(Some(row[1..1 + len].to_vec()));
                            }
                        }
                    };
                    if !more {
                        return reply;
                    }
                }
                None => panic!("empty packet"),
            }
        }
    }

    fn parse_ok<K: mysql_common::packets::OkPacketKind>(
        &self,
        payload: &[u8],
    ) -> OkPacket<'static> {
        OkPacketDeserializer::<K>::deserialize(self.caps, &mut ParseBuf(payload))
            .map(|ok| OkPacket::from(ok).into_owned())
            .unwrap_or_else(|e| panic!("bad OK {payload:02x?}: {e}"))
    }
}

/// What came back on a connection that was sent something hostile: the ERR code (if the proxy
/// sent one) and whether the connection was then closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub err_code: Option<u16>,
    pub closed: bool,
}

/// Reads everything the proxy sends until it closes (or `patience` runs out), skipping the
/// greeting if it is still unread, and reports the first ERR after it.
pub fn rejection(mut stream: TcpStream, greeting_unread: bool, patience: Duration) -> Rejection {
    stream.set_read_timeout(Some(patience)).unwrap();
    let mut bytes = Vec::new();
    let closed = match stream.read_to_end(&mut bytes) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    let mut packets = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 4 {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], 0]) as usize;
        if rest.len() < 4 + len {
            break;
        }
        packets.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    let skip = usize::from(greeting_unread);
    let err_code = packets
        .get(skip)
        .filter(|p: &&Vec<u8>| <[u8]>::first(p) == Some(&0xFF))
        .map(|p| u16::from_le_bytes([p[1], p[2]]));
    Rejection { err_code, closed }
}

/// Connects and reads the greeting, as a client about to log in would.
pub fn greeted(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    read_packet(&mut stream);
    stream
}

/// One packet on the wire: header and payload.
pub fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    out.push(seq);
    out.extend_from_slice(payload);
    out
}

/// The system variables reported by an OK's session state, as `name=value`.
pub fn tracked_variables(ok: &OkPacket<'_>) -> Vec<String> {
    let Ok(items) = ok.session_state_info() else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| match item.decode() {
            Ok(SessionStateChange::SystemVariables(vars)) => Some(
                vars.iter()
                    .map(|v| format!("{}={}", v.name_str(), v.value_str()))
                    .collect::<Vec<_>>(),
            ),
            Ok(SessionStateChange::Schema(schema)) => {
                Some(vec![format!("schema={}", schema.as_str())])
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// Status flags of an EOF (`FE warnings status`) or a short OK-FE (`FE 00 00 status …`): both
/// put them at bytes 3..5 when affected rows and insert id are 0.
fn terminator_status(packet: &[u8]) -> StatusFlags {
    StatusFlags::from_bits_retain(u16::from_le_bytes([packet[3], packet[4]]))
}

fn read_packet(stream: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).expect("packet header");
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).expect("packet payload");
    (header[3], payload)
}

fn write_packet(stream: &mut TcpStream, seq: u8, payload: &[u8]) {
    let mut packet = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    packet.push(seq);
    packet.extend_from_slice(payload);
    stream.write_all(&packet).expect("write packet");
}

/// A HandshakeResponse41 payload logging `user` in to `db` with `mysql_native_password` and
/// the scramble `token`.
pub fn handshake_response(
    user: &str,
    db: Option<&str>,
    token: &[u8],
    caps: CapabilityFlags,
) -> Vec<u8> {
    handshake_response_with(user, db, token, caps, AuthPlugin::MysqlNativePassword)
}

/// A HandshakeResponse41 payload logging `user` in to `db` with `plugin` and its `token`.
pub fn handshake_response_with(
    user: &str,
    db: Option<&str>,
    token: &[u8],
    caps: CapabilityFlags,
    plugin: AuthPlugin<'_>,
) -> Vec<u8> {
    let response = HandshakeResponse::new(
        Some(token),
        (10, 11, 0),
        Some(user.as_bytes()),
        db.map(str::as_bytes),
        Some(plugin),
        caps,
        None,
        64 << 20,
    );
    let mut payload = Vec::new();
    response.serialize(&mut payload);
    payload
}
