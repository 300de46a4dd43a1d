//! Greeting and handshake-response parsing and in-place rewrites, checked against `mysql_common`'s
//! independent encoder.

use mysql_common::constants::{StatusFlags, UTF8MB4_GENERAL_CI};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{
    AuthPlugin, ComChangeUser, ComChangeUserMoreData, HandshakePacket, HandshakeResponse,
};
use mysql_common::proto::{MyDeserialize, MySerialize};
use proptest::prelude::*;

use super::*;

const VERSION: &[u8] = b"5.5.5-10.11.19-MariaDB-0+deb12u1-log";

/// A greeting as a MariaDB 10.11 server sends it, encoded by `mysql_common` (an independent
/// implementation of the same layout).
fn greeting(caps: u32, ext: u32) -> Vec<u8> {
    let packet = HandshakePacket::new(
        PROTOCOL_VERSION_10,
        VERSION,
        42,
        *b"abcdefgh",
        Some(&b"ijklmnopqrst\0"[..]),
        CapabilityFlags::from_bits_retain(caps),
        45,
        StatusFlags::SERVER_STATUS_AUTOCOMMIT,
        Some(&b"mysql_native_password"[..]),
    )
    .with_mariadb_ext_capabilities(MariadbCapabilities::from_bits_retain(ext));
    let mut out = Vec::new();
    packet.serialize(&mut out);
    out
}

#[test]
fn greeting_fields_and_in_place_capability_rewrite() {
    let mut payload = greeting(0x81ff_f7fe, 0x1d);
    let parsed = ServerGreeting::parse(&payload).unwrap();
    assert_eq!(parsed.server_version, VERSION);
    assert_eq!(parsed.connection_id, 42);
    assert_eq!(&parsed.scramble, b"abcdefghijklmnopqrst");
    assert_eq!(parsed.capabilities.bits(), 0x81ff_f7fe);
    assert_eq!(parsed.mariadb_capabilities.map(|c| c.bits()), Some(0x1d));
    assert_eq!(parsed.auth_plugin, b"mysql_native_password");
    assert!(parsed.is_mariadb());

    let before = payload.clone();
    ServerGreeting::set_capabilities(
        &mut payload,
        CapabilityFlags::from_bits_retain(0x010a_8204),
        Some(MariadbCapabilities::from_bits_retain(0x04)),
    )
    .unwrap();
    let theirs = HandshakePacket::deserialize((), &mut ParseBuf(&payload)).unwrap();
    assert_eq!(theirs.capabilities().bits(), 0x010a_8204);
    assert_eq!(theirs.mariadb_ext_capabilities().bits(), 0x04);
    assert_eq!(theirs.nonce(), b"abcdefghijklmnopqrst".to_vec());
    assert_eq!(theirs.connection_id(), 42);
    let changed: Vec<usize> = (0..payload.len())
        .filter(|&i| payload[i] != before[i])
        .collect();
    assert!(
        changed.iter().all(|&i| i < VERSION.len() + 40),
        "only header fields change: {changed:?}"
    );
}

#[test]
fn greeting_errors_are_reported_not_panicked() {
    let payload = greeting(0x81ff_f7fe, 0);
    for cut in 0..payload.len() - 22 {
        assert!(
            ServerGreeting::parse(&payload[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut v9 = payload.clone();
    v9[0] = 9;
    assert!(matches!(
        ServerGreeting::parse(&v9),
        Err(ProtoError::Unsupported { .. })
    ));
}

fn response(caps: CapabilityFlags, db: Option<&[u8]>) -> Vec<u8> {
    let packet = HandshakeResponse::new(
        Some(&[7u8; 20][..]),
        (10, 11, 19),
        Some(&b"app"[..]),
        db,
        Some(AuthPlugin::MysqlNativePassword),
        caps,
        None,
        16 << 20,
    );
    let mut out = Vec::new();
    packet.serialize(&mut out);
    out
}

#[test]
fn response_fields_and_in_place_capability_rewrite() {
    let caps = CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | CapabilityFlags::CLIENT_LONG_PASSWORD;
    let mut payload = response(caps, Some(b"sbtest"));
    let parsed = ClientResponse::parse(&payload).unwrap();
    assert_eq!(parsed.user, b"app");
    assert_eq!(parsed.database, Some(&b"sbtest"[..]));
    assert_eq!(parsed.auth_plugin, Some(&b"mysql_native_password"[..]));
    assert_eq!(parsed.max_packet, 16 << 20);
    assert_eq!(
        parsed.mariadb_capabilities, None,
        "CLIENT_MYSQL set: no extended caps"
    );
    assert_eq!(parsed.collation, UTF8MB4_GENERAL_CI as u8);
    assert!(!ClientResponse::is_ssl_request(&payload));

    let wanted = parsed.capabilities | CapabilityFlags::CLIENT_SESSION_TRACK;
    let tail = payload[4..].to_vec();
    ClientResponse::set_capabilities(&mut payload, wanted, None);
    assert_eq!(&payload[4..], &tail[..], "only the capability word changes");
    assert_eq!(
        ClientResponse::parse(&payload).unwrap().capabilities,
        wanted
    );
}

#[test]
fn ssl_request_is_the_fixed_part_with_the_ssl_bit() {
    let caps = CapabilityFlags::CLIENT_PROTOCOL_41 | CapabilityFlags::CLIENT_SSL;
    let mut payload = vec![0u8; SSL_REQUEST_LEN];
    payload[..4].copy_from_slice(&caps.bits().to_le_bytes());
    payload[28] = 0x04; // MariaDB client: CLIENT_MYSQL clear, extended caps follow
    assert!(ClientResponse::is_ssl_request(&payload));
    let parsed = ClientResponse::parse(&payload).unwrap();
    assert_eq!(parsed.user, b"");
    assert_eq!(parsed.mariadb_capabilities.map(|c| c.bits()), Some(0x04));
    assert!(!ClientResponse::is_ssl_request(&payload[..31]));
}

#[test]
fn pre_41_clients_are_refused() {
    let payload = [0u8; 40];
    assert!(matches!(
        ClientResponse::parse(&payload),
        Err(ProtoError::Unsupported { .. })
    ));
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = ServerGreeting::parse(&bytes);
        let _ = ClientResponse::parse(&bytes);
        let _ = ClientResponse::is_ssl_request(&bytes);
    }
}

#[test]
fn a_change_user_request_names_its_plugin_and_auth_data() {
    let caps = CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH;
    let request = ComChangeUser::new()
        .with_user(Some(&b"app"[..]))
        .with_auth_plugin_data(Some(&b"secret\0"[..]))
        .with_database(Some(&b"db"[..]))
        .with_more_data(Some(ComChangeUserMoreData::new(45).with_auth_plugin(Some(
            AuthPlugin::Other(b"mysql_clear_password".into()),
        ))));
    let mut payload = Vec::new();
    request.serialize(&mut payload);
    let parsed = ChangeUser::parse(&payload, caps).unwrap();
    assert_eq!(parsed.user, b"app");
    assert_eq!(parsed.auth_data, b"secret\0");
    assert_eq!(parsed.auth_plugin, Some(&b"mysql_clear_password"[..]));

    let bare = ComChangeUser::new().with_user(Some(&b"app"[..]));
    let mut payload = Vec::new();
    bare.serialize(&mut payload);
    let parsed = ChangeUser::parse(&payload, caps).unwrap();
    assert_eq!((parsed.auth_data, parsed.auth_plugin), (&b""[..], None));
    assert!(ChangeUser::parse(&payload[..3], caps).is_err());
}

#[test]
fn a_response_carries_its_auth_data() {
    let caps = CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    let payload = response(caps, None);
    let parsed = ClientResponse::parse(&payload).unwrap();
    assert_eq!(parsed.auth_data, &[7u8; 20][..]);
}
