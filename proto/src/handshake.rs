//! The connection phase's fixed packets: the server greeting (HandshakeV10), the client's
//! SSLRequest and HandshakeResponse41. Parsing borrows from the payload; capability rewrites
//! edit the payload in place so that nothing else in it (scramble, auth data, attributes) can
//! change on the way through.

use crate::capabilities::{CapabilityFlags, MariadbCapabilities};
use crate::wire::Reader;
use crate::ProtoError;

/// Protocol version byte of HandshakeV10.
pub const PROTOCOL_VERSION_10: u8 = 0x0A;

/// Length of an SSLRequest payload (and of the fixed part of every HandshakeResponse41).
pub const SSL_REQUEST_LEN: usize = 32;

/// Offset of the MariaDB extended capabilities in an SSLRequest / HandshakeResponse41.
const RESPONSE_EXT_CAPS_AT: usize = 28;

/// The server greeting, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGreeting<'a> {
    /// Server version string, e.g. `5.5.5-10.11.19-MariaDB-0+deb12u1-log`.
    pub server_version: &'a [u8],
    /// The server's id for this connection (what `CONNECTION_ID()` and `KILL` use).
    pub connection_id: u32,
    /// Capabilities the server offers.
    pub capabilities: CapabilityFlags,
    /// MariaDB's extended capabilities, present when the server clears `CLIENT_MYSQL`.
    pub mariadb_capabilities: Option<MariadbCapabilities>,
    /// Default collation id.
    pub collation: u8,
    /// Name of the authentication plugin the scramble is meant for.
    pub auth_plugin: &'a [u8],
    /// The scramble (nonce) of this connection's authentication.
    pub scramble: [u8; crate::auth::SCRAMBLE_LEN],
}

/// Where the capability fields sit in a greeting payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GreetingLayout {
    caps_lower: usize,
    caps_upper: usize,
    ext_caps: usize,
}

/// A client's HandshakeResponse41 (or SSLRequest, which is its first 32 bytes), parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientResponse<'a> {
    /// Capabilities the client asks for.
    pub capabilities: CapabilityFlags,
    /// The client's `max_allowed_packet`.
    pub max_packet: u32,
    /// Connection collation id.
    pub collation: u8,
    /// MariaDB extended capabilities, present when the client clears `CLIENT_MYSQL`.
    pub mariadb_capabilities: Option<MariadbCapabilities>,
    /// Login user (empty for an SSLRequest).
    pub user: &'a [u8],
    /// What the client's plugin answered the greeting's scramble with (empty for an
    /// SSLRequest).
    pub auth_data: &'a [u8],
    /// Initial database, if the client sent one.
    pub database: Option<&'a [u8]>,
    /// Client authentication plugin, if the client named one.
    pub auth_plugin: Option<&'a [u8]>,
}

/// The authentication part of a `COM_CHANGE_USER` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeUser<'a> {
    /// The new user.
    pub user: &'a [u8],
    /// What the client's plugin answered the connection's scramble with.
    pub auth_data: &'a [u8],
    /// The client's plugin, if it named one.
    pub auth_plugin: Option<&'a [u8]>,
}

impl<'a> ChangeUser<'a> {
    /// Parses a `COM_CHANGE_USER` payload (command byte included) from a client that
    /// negotiated `capabilities`.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] for a request that ends early.
    pub fn parse(payload: &'a [u8], capabilities: CapabilityFlags) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        r.u8("change user command")?;
        let user = r.null_str("change user name")?;
        let auth_data = if capabilities.contains(CapabilityFlags::CLIENT_SECURE_CONNECTION) {
            let n = r.u8("change user auth data")?;
            r.take(usize::from(n), "change user auth data")?
        } else {
            r.null_str("change user auth data")?
        };
        r.null_str("change user database")?;
        let mut auth_plugin = None;
        if !r.is_empty() {
            r.u16("change user character set")?;
            if capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) && !r.is_empty() {
                auth_plugin = Some(r.null_str("change user auth plugin")?);
            }
        }
        Ok(ChangeUser {
            user,
            auth_data,
            auth_plugin,
        })
    }
}

// === impl ServerGreeting ===

impl<'a> ServerGreeting<'a> {
    /// Parses a HandshakeV10 payload.
    ///
    /// # Errors
    /// [`ProtoError::Unsupported`] for another protocol version or a server without
    /// `CLIENT_PROTOCOL_41`; [`ProtoError::Truncated`] for a short greeting.
    pub fn parse(payload: &'a [u8]) -> Result<Self, ProtoError> {
        Self::parse_with_layout(payload).map(|(greeting, _)| greeting)
    }

    fn parse_with_layout(payload: &'a [u8]) -> Result<(Self, GreetingLayout), ProtoError> {
        let mut r = Reader::new(payload);
        if r.u8("greeting protocol version")? != PROTOCOL_VERSION_10 {
            return Err(ProtoError::Unsupported {
                what: "server protocol version other than 10",
            });
        }
        let server_version = r.null_str("greeting server version")?;
        let connection_id = r.u32("greeting connection id")?;
        let mut scramble = [0; crate::auth::SCRAMBLE_LEN];
        scramble[..8].copy_from_slice(r.take(8, "greeting scramble")?);
        r.take(1, "greeting filler")?;
        let caps_lower = r.position();
        let lower = r.u16("greeting capabilities")?;
        let collation = r.u8("greeting collation")?;
        r.u16("greeting status")?;
        let caps_upper = r.position();
        let upper = r.u16("greeting capabilities")?;
        let auth_data_len = r.u8("greeting auth data length")?;
        r.take(6, "greeting filler")?;
        let ext_caps = r.position();
        let ext = r.u32("greeting extended capabilities")?;
        let capabilities =
            CapabilityFlags::from_bits_retain(u32::from(lower) | u32::from(upper) << 16);
        if !capabilities.contains(CapabilityFlags::CLIENT_PROTOCOL_41) {
            return Err(ProtoError::Unsupported {
                what: "server without CLIENT_PROTOCOL_41",
            });
        }
        let mariadb_capabilities = (!capabilities.contains(CapabilityFlags::CLIENT_LONG_PASSWORD))
            .then(|| MariadbCapabilities::from_bits_retain(ext));
        if capabilities.contains(CapabilityFlags::CLIENT_SECURE_CONNECTION) {
            let part2 = usize::from(auth_data_len).saturating_sub(8).max(13);
            let rest = r.take(part2, "greeting scramble")?;
            let n = rest.len().min(crate::auth::SCRAMBLE_LEN - 8);
            scramble[8..8 + n].copy_from_slice(&rest[..n]);
        }
        let auth_plugin = if capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) {
            // Some servers end the name with the packet instead of a NUL.
            let rest = r.rest();
            rest.split(|&b| b == 0).next().unwrap_or(rest)
        } else {
            &[]
        };
        let greeting = ServerGreeting {
            server_version,
            connection_id,
            capabilities,
            mariadb_capabilities,
            collation,
            auth_plugin,
            scramble,
        };
        let layout = GreetingLayout {
            caps_lower,
            caps_upper,
            ext_caps,
        };
        Ok((greeting, layout))
    }

    /// True for a MariaDB server (its version string says so; MariaDB also clears
    /// `CLIENT_MYSQL`, but the version string is what MariaDB's own replicas go by).
    pub fn is_mariadb(&self) -> bool {
        self.server_version
            .windows(b"MariaDB".len())
            .any(|w| w == b"MariaDB")
    }

    /// Rewrites the capabilities a greeting `payload` offers, in place. `mariadb` is written
    /// only if given (the field is filler for MySQL servers).
    ///
    /// # Errors
    /// As for [`parse`](Self::parse); the payload is left untouched.
    pub fn set_capabilities(
        payload: &mut [u8],
        capabilities: CapabilityFlags,
        mariadb: Option<MariadbCapabilities>,
    ) -> Result<(), ProtoError> {
        let bits = capabilities.bits();
        let (
            _,
            GreetingLayout {
                caps_lower,
                caps_upper,
                ext_caps,
            },
        ) = ServerGreeting::parse_with_layout(payload)?;
        payload[caps_lower..caps_lower + 2].copy_from_slice(&(bits as u16).to_le_bytes());
        payload[caps_upper..caps_upper + 2].copy_from_slice(&((bits >> 16) as u16).to_le_bytes());
        if let Some(ext) = mariadb {
            payload[ext_caps..ext_caps + 4].copy_from_slice(&ext.bits().to_le_bytes());
        }
        Ok(())
    }
}

// === impl ClientResponse ===

impl<'a> ClientResponse<'a> {
    /// Parses an SSLRequest or a HandshakeResponse41.
    ///
    /// # Errors
    /// [`ProtoError::Unsupported`] for a pre-4.1 client; [`ProtoError::Truncated`] or
    /// [`ProtoError::Malformed`] for a response that does not hold together.
    pub fn parse(payload: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        let capabilities =
            CapabilityFlags::from_bits_retain(r.u32("handshake response capabilities")?);
        if !capabilities.contains(CapabilityFlags::CLIENT_PROTOCOL_41) {
            return Err(ProtoError::Unsupported {
                what: "client without CLIENT_PROTOCOL_41",
            });
        }
        let max_packet = r.u32("handshake response max packet")?;
        let collation = r.u8("handshake response collation")?;
        r.take(19, "handshake response filler")?;
        let ext = r.u32("handshake response extended capabilities")?;
        let mariadb_capabilities = (!capabilities.contains(CapabilityFlags::CLIENT_LONG_PASSWORD))
            .then(|| MariadbCapabilities::from_bits_retain(ext));
        let mut response = ClientResponse {
            capabilities,
            max_packet,
            collation,
            mariadb_capabilities,
            user: &[],
            auth_data: &[],
            database: None,
            auth_plugin: None,
        };
        if r.is_empty() {
            return Ok(response); // SSLRequest
        }
        response.user = r.null_str("handshake response user")?;
        response.auth_data =
            if capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA) {
                r.lenenc_str("handshake response auth data")?
            } else if capabilities.contains(CapabilityFlags::CLIENT_SECURE_CONNECTION) {
                let n = r.u8("handshake response auth data")?;
                r.take(usize::from(n), "handshake response auth data")?
            } else {
                r.null_str("handshake response auth data")?
            };
        if capabilities.contains(CapabilityFlags::CLIENT_CONNECT_WITH_DB) && !r.is_empty() {
            response.database = Some(r.null_str("handshake response database")?);
        }
        if capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) && !r.is_empty() {
            response.auth_plugin = Some(r.null_str("handshake response auth plugin")?);
        }
        Ok(response)
    }

    /// True if this is an SSLRequest: the fixed part alone, asking for TLS.
    pub fn is_ssl_request(payload: &[u8]) -> bool {
        payload.len() == SSL_REQUEST_LEN
            && CapabilityFlags::from_bits_retain(u32::from_le_bytes([
                payload[0], payload[1], payload[2], payload[3],
            ]))
            .contains(CapabilityFlags::CLIENT_SSL)
    }

    /// Rewrites the capabilities of a response `payload` in place (at least the 32-byte fixed
    /// part, which [`parse`](Self::parse) has checked).
    pub fn set_capabilities(
        payload: &mut [u8],
        capabilities: CapabilityFlags,
        mariadb: Option<MariadbCapabilities>,
    ) {
        payload[..4].copy_from_slice(&capabilities.bits().to_le_bytes());
        if let Some(ext) = mariadb {
            payload[RESPONSE_EXT_CAPS_AT..RESPONSE_EXT_CAPS_AT + 4]
                .copy_from_slice(&ext.bits().to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests;
