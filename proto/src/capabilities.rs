//! Capability flags, and the policy for what each leg of a proxied connection may negotiate:
//! features the proxy cannot frame are hidden from the client, session tracking is always on
//! towards the primary, and everything else is left as the client chose it.

pub use mysql_common::constants::{CapabilityFlags, MariadbCapabilities, StatusFlags};

/// MySQL 8.0.27+ multi-factor authentication (`AuthNextFactor` packets); not in `mysql_common`.
pub const CLIENT_MULTI_FACTOR_AUTHENTICATION: CapabilityFlags =
    CapabilityFlags::from_bits_retain(1 << 28);

/// Capabilities the proxy never lets a client negotiate: each changes the framing of packets
/// the proxy must read (zstd compression wraps them, optional metadata and query attributes
/// change result-set and command layouts, multi-factor auth adds an exchange, bit 29 is
/// MariaDB's obsolete progress flag). zlib compression (`CLIENT_COMPRESS`) the proxy speaks on
/// the client leg itself: it is offered to clients (see [`offered_to_client`]) and never asked
/// of the primary.
pub const MASKED: CapabilityFlags = CapabilityFlags::CLIENT_ZSTD_COMPRESSION_ALGORITHM
    .union(CapabilityFlags::CLIENT_OPTIONAL_RESULTSET_METADATA)
    .union(CapabilityFlags::CLIENT_QUERY_ATTRIBUTES)
    .union(CLIENT_MULTI_FACTOR_AUTHENTICATION)
    .union(CapabilityFlags::CLIENT_PROGRESS_OBSOLETE);

/// MariaDB extended capabilities the proxy hides: progress reports are 0xFF packets in the
/// middle of a response, cached metadata adds a byte to the column count and skips column
/// definitions.
pub const MASKED_MARIADB: MariadbCapabilities = MariadbCapabilities::MARIADB_CLIENT_PROGRESS
    .union(MariadbCapabilities::MARIADB_CLIENT_CACHE_METADATA);

/// The capabilities to show a client in the server greeting: the primary's, minus what the
/// proxy cannot frame, with `CLIENT_SSL` only if the proxy itself can terminate TLS.
/// `CLIENT_COMPRESS` stays if the primary offers it: the proxy compresses the client leg
/// itself.
pub fn offered_to_client(primary: CapabilityFlags, proxy_tls: bool) -> CapabilityFlags {
    let mut caps = primary.difference(MASKED);
    caps.set(CapabilityFlags::CLIENT_SSL, proxy_tls);
    caps
}

/// The MariaDB extended capabilities to show a client.
pub fn offered_to_client_mariadb(primary: MariadbCapabilities) -> MariadbCapabilities {
    primary.difference(MASKED_MARIADB)
}

/// The capabilities to send the primary on the client's behalf: the client's own, with session
/// tracking forced on (the proxy reads each commit's GTID from it), masked features and
/// compression off (the primary leg is a local hop, where compressing costs CPU and saves
/// nothing), and `CLIENT_SSL` as the primary leg actually is.
pub fn requested_from_primary(client: CapabilityFlags, primary_tls: bool) -> CapabilityFlags {
    let mut caps = client
        .difference(MASKED)
        .difference(CapabilityFlags::CLIENT_COMPRESS)
        .union(CapabilityFlags::CLIENT_SESSION_TRACK);
    caps.set(CapabilityFlags::CLIENT_SSL, primary_tls);
    caps
}

/// The MariaDB extended capabilities to send the primary on the client's behalf.
pub fn requested_from_primary_mariadb(client: MariadbCapabilities) -> MariadbCapabilities {
    client.difference(MASKED_MARIADB)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Greeting and response capabilities captured from MariaDB 10.11.19 and its `mariadb` CLI
    // (verified-mariadb-10.11.md §1).
    const SERVER_CAPS: u32 = 0x81ff_f7fe;
    const SERVER_EXT: u32 = 0x1d;
    const CLI_CAPS: u32 = 0x00bf_a284;

    #[test]
    fn client_sees_zlib_compression_but_no_zstd_progress_or_cached_metadata() {
        let offered = offered_to_client(CapabilityFlags::from_bits_retain(SERVER_CAPS), false);
        assert!(offered.contains(CapabilityFlags::CLIENT_COMPRESS));
        assert!(!offered.contains(CapabilityFlags::CLIENT_ZSTD_COMPRESSION_ALGORITHM));
        assert!(!offered.contains(CapabilityFlags::CLIENT_SSL));
        assert!(offered.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF));
        assert!(offered.contains(CapabilityFlags::CLIENT_SESSION_TRACK));
        assert_eq!(
            offered.bits(),
            SERVER_CAPS & !(0x800 | 0x2000_0000 | 0x0800_0000 | 0x0200_0000)
        );
        let ext = offered_to_client_mariadb(MariadbCapabilities::from_bits_retain(SERVER_EXT));
        assert_eq!(
            ext.bits(),
            0x0c,
            "keeps STMT_BULK_OPERATIONS and EXTENDED_METADATA"
        );

        let with_tls = offered_to_client(CapabilityFlags::from_bits_retain(SERVER_CAPS), true);
        assert!(with_tls.contains(CapabilityFlags::CLIENT_SSL));
    }

    #[test]
    fn primary_always_gets_session_tracking_and_the_real_ssl_bit() {
        let client = CapabilityFlags::from_bits_retain(
            (CLI_CAPS
                | CapabilityFlags::CLIENT_SSL.bits()
                | CapabilityFlags::CLIENT_COMPRESS.bits())
                & !CapabilityFlags::CLIENT_SESSION_TRACK.bits(),
        );
        let sent = requested_from_primary(client, false);
        assert!(sent.contains(CapabilityFlags::CLIENT_SESSION_TRACK));
        assert!(!sent.contains(CapabilityFlags::CLIENT_SSL));
        assert!(!sent.contains(CapabilityFlags::CLIENT_COMPRESS));
        assert_eq!(
            sent.bits() & !CapabilityFlags::CLIENT_SESSION_TRACK.bits(),
            client.bits() & !(0x800 | 0x20 | CapabilityFlags::CLIENT_SESSION_TRACK.bits()),
            "nothing else changes"
        );
    }
}
