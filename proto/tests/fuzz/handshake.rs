//! Fuzzing the connection phase: the server greeting, HandshakeResponse41 / SSLRequest, and
//! the in-place capability rewrites the proxy applies to both.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use strongsync_proto::capabilities::{CapabilityFlags as Caps, MariadbCapabilities};
use strongsync_proto::handshake::{ClientResponse, ServerGreeting, SSL_REQUEST_LEN};
use strongsync_proto::ProtoError;

use crate::alloc::bounded;
use crate::mutate::{input, neighbours};
use crate::{config, seeds};

/// Capability bits that change where later greeting fields sit.
const GREETING_LAYOUT: Caps = Caps::CLIENT_PROTOCOL_41
    .union(Caps::CLIENT_SECURE_CONNECTION)
    .union(Caps::CLIENT_PLUGIN_AUTH);

/// Capability bits that change where later response fields sit.
const RESPONSE_LAYOUT: Caps = Caps::CLIENT_PROTOCOL_41
    .union(Caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
    .union(Caps::CLIENT_SECURE_CONNECTION)
    .union(Caps::CLIENT_CONNECT_WITH_DB)
    .union(Caps::CLIENT_PLUGIN_AUTH);

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// A greeting parses into fields that are exactly its bytes, and rewriting its capabilities
/// changes them and nothing else.
fn check_greeting(payload: &[u8], caps: Caps, ext: Option<u32>) -> Result<(), TestCaseError> {
    let parsed = bounded(payload.len(), || ServerGreeting::parse(payload));
    let mut rewritten = payload.to_vec();
    let ext = ext.map(MariadbCapabilities::from_bits_retain);
    let rewrite = bounded(payload.len(), || {
        ServerGreeting::set_capabilities(&mut rewritten, caps, ext)
    });
    let g = match parsed {
        Ok(g) => g,
        Err(e) => {
            prop_assert_eq!(rewrite, Err(e), "rewrite and parse disagree");
            prop_assert_eq!(
                &rewritten[..],
                payload,
                "a failed rewrite edited the payload"
            );
            return Ok(());
        }
    };
    prop_assert_eq!(rewrite, Ok(()));
    let version = g.server_version;
    prop_assert_eq!(&payload[1..1 + version.len()], version);
    prop_assert_eq!(payload[1 + version.len()], 0);
    let id_at = 2 + version.len();
    prop_assert_eq!(
        g.connection_id.to_le_bytes(),
        [
            payload[id_at],
            payload[id_at + 1],
            payload[id_at + 2],
            payload[id_at + 3]
        ]
    );
    prop_assert!(!g.auth_plugin.contains(&0));
    prop_assert!(g.capabilities.contains(Caps::CLIENT_PROTOCOL_41));
    prop_assert_eq!(
        g.mariadb_capabilities.is_some(),
        !g.capabilities.contains(Caps::CLIENT_LONG_PASSWORD)
    );
    prop_assert_eq!(g.is_mariadb(), version.windows(7).any(|w| w == b"MariaDB"));
    // HandshakeV10 after the connection id: scramble (8) + filler, capabilities (lower 16
    // bits), collation, status, capabilities (upper 16 bits), auth data length, 6 bytes of
    // filler, MariaDB capabilities, rest of the scramble, plugin name.
    let caps_at = id_at + 4 + 9;
    let ext_at = caps_at + 14;
    prop_assert_eq!(g.collation, payload[caps_at + 2]);
    let ext_bits = le32(&payload[ext_at..]);
    prop_assert_eq!(
        g.mariadb_capabilities.map_or(ext_bits, |c| c.bits()),
        ext_bits
    );
    let mut plugin_at = ext_at + 4;
    if g.capabilities.contains(Caps::CLIENT_SECURE_CONNECTION) {
        plugin_at += usize::from(payload[caps_at + 7]).saturating_sub(8).max(13);
    }
    let plugin = match payload.get(plugin_at..) {
        Some(rest) if g.capabilities.contains(Caps::CLIENT_PLUGIN_AUTH) => {
            rest.split(|&b| b == 0).next().unwrap_or_default()
        }
        _ => &[],
    };
    prop_assert_eq!(g.auth_plugin, plugin);

    let changed: Vec<usize> = (0..payload.len())
        .filter(|&i| rewritten[i] != payload[i])
        .collect();
    let fields = [caps_at, caps_at + 1, caps_at + 5, caps_at + 6];
    prop_assert!(
        changed
            .iter()
            .all(|i| fields.contains(i) || (ext.is_some() && (ext_at..ext_at + 4).contains(i))),
        "rewrite touched bytes {:?}",
        changed
    );
    if caps.intersection(GREETING_LAYOUT) == g.capabilities.intersection(GREETING_LAYOUT) {
        let again = ServerGreeting::parse(&rewritten)?;
        prop_assert_eq!(again.capabilities, caps);
        if let (Some(ext), Some(got)) = (ext, again.mariadb_capabilities) {
            prop_assert_eq!(got, ext);
        }
        prop_assert_eq!(
            (
                again.server_version,
                again.connection_id,
                again.collation,
                again.auth_plugin
            ),
            (
                g.server_version,
                g.connection_id,
                g.collation,
                g.auth_plugin
            )
        );
    }
    Ok(())
}

/// A response parses into fields that are exactly its bytes; an SSLRequest is recognised; the
/// capability rewrite (which the proxy applies after a successful parse) cannot panic and
/// changes the capabilities only.
fn check_response(payload: &[u8], caps: Caps, ext: Option<u32>) -> Result<(), TestCaseError> {
    let parsed = bounded(payload.len(), || ClientResponse::parse(payload));
    let ssl = ClientResponse::is_ssl_request(payload);
    let declared = payload
        .get(..4)
        .map(|c| Caps::from_bits_retain(u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    if ssl {
        prop_assert_eq!(payload.len(), SSL_REQUEST_LEN);
        prop_assert!(declared.is_some_and(|c| c.contains(Caps::CLIENT_SSL)));
        if declared.is_some_and(|c| c.contains(Caps::CLIENT_PROTOCOL_41)) {
            let r = parsed.clone()?;
            prop_assert_eq!((r.user, r.database, r.auth_plugin), (&b""[..], None, None));
        }
    }
    let r = match parsed {
        Ok(r) => r,
        Err(ProtoError::Unsupported { .. }) => {
            prop_assert!(!declared.is_some_and(|c| c.contains(Caps::CLIENT_PROTOCOL_41)));
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    prop_assert!(payload.len() >= SSL_REQUEST_LEN);
    prop_assert_eq!(Some(r.capabilities), declared);
    prop_assert_eq!(
        r.max_packet.to_le_bytes(),
        [payload[4], payload[5], payload[6], payload[7]]
    );
    prop_assert_eq!(r.collation, payload[8]);
    prop_assert!(!r.user.contains(&0));
    prop_assert!(!r.database.is_some_and(|d| d.contains(&0)));
    prop_assert!(!r.auth_plugin.is_some_and(|p| p.contains(&0)));
    if payload.len() > SSL_REQUEST_LEN {
        prop_assert_eq!(
            &payload[SSL_REQUEST_LEN..SSL_REQUEST_LEN + r.user.len()],
            r.user
        );
    }

    let mut rewritten = payload.to_vec();
    let ext = ext.map(MariadbCapabilities::from_bits_retain);
    ClientResponse::set_capabilities(&mut rewritten, caps, ext);
    prop_assert_eq!(&rewritten[..4], &caps.bits().to_le_bytes()[..]);
    prop_assert_eq!(&rewritten[4..28], &payload[4..28]);
    if let Some(ext) = ext {
        prop_assert_eq!(&rewritten[28..32], &ext.bits().to_le_bytes()[..]);
    }
    prop_assert_eq!(&rewritten[32..], &payload[32..]);
    if caps.intersection(RESPONSE_LAYOUT) == r.capabilities.intersection(RESPONSE_LAYOUT) {
        let again = ClientResponse::parse(&rewritten)?;
        prop_assert_eq!(again.capabilities, caps);
        prop_assert_eq!(
            (
                again.user,
                again.database,
                again.auth_plugin,
                again.max_packet
            ),
            (r.user, r.database, r.auth_plugin, r.max_packet)
        );
    }
    Ok(())
}

/// New capabilities: random, or the parsed ones with a few bits toggled.
fn caps() -> impl Strategy<Value = Caps> {
    prop_oneof![
        any::<u32>().prop_map(Caps::from_bits_retain),
        any::<u32>().prop_map(|bits| Caps::from_bits_retain(bits) | GREETING_LAYOUT),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn greetings_parse_into_their_own_bytes(
        payload in input(seeds::greetings()),
        caps in caps(),
        ext: Option<u32>,
    ) {
        check_greeting(&payload, caps, ext)?;
    }

    #[test]
    fn handshake_responses_parse_into_their_own_bytes(
        payload in input(seeds::client_responses()),
        caps in caps(),
        ext: Option<u32>,
    ) {
        check_response(&payload, caps, ext)?;
    }
}

#[test]
fn every_truncation_and_bit_flip_of_the_handshake_seeds() {
    let caps = Caps::from_bits_retain(0x81ff_f7fe);
    for seed in seeds::greetings() {
        assert!(ServerGreeting::parse(&seed).is_ok(), "seed {seed:02x?}");
        for payload in neighbours(&seed) {
            if let Err(e) = check_greeting(&payload, caps, Some(0x1d)) {
                panic!("{e}\ngreeting {payload:02x?}");
            }
        }
    }
    for seed in seeds::client_responses() {
        assert!(ClientResponse::parse(&seed).is_ok(), "seed {seed:02x?}");
        for payload in neighbours(&seed) {
            if let Err(e) = check_response(&payload, caps, None) {
                panic!("{e}\nresponse {payload:02x?}");
            }
        }
    }
}
