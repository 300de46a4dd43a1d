//! Connecting a client: the primary's greeting shown to the client with capabilities
//! rewritten, TLS on the client leg, and the authentication exchange relayed untouched until
//! the primary says OK or ERR. The proxy never sees a password; the same relay serves
//! `COM_CHANGE_USER`.

use std::io;

use strongsync_proto::capabilities::{self, CapabilityFlags};
use strongsync_proto::handshake::{ClientResponse, ServerGreeting};
use strongsync_proto::ok::{ERR_HEADER, OK_HEADER};
use strongsync_proto::packet::{Packet, Sequence};
use strongsync_proto::ProtoError;
use tracing::debug;

use super::session::{Phase, Session};
use super::Shared;
use crate::conn::Conn;
use crate::error::Error;
use crate::primary::{self, PrimaryStream};

/// How an authentication exchange ended.
enum AuthOutcome {
    /// The primary accepted the client.
    Accepted,
    /// The primary refused it (its ERR was passed on).
    Refused,
}

/// One packet of an authentication exchange, from either side.
enum AuthEvent {
    Primary(Packet),
    Client(Packet),
}

/// Connects to the primary and reads its greeting (or the ERR it sends instead, e.g. when
/// it has too many connections; the caller passes that on).
pub(super) async fn connect_primary(
    shared: &Shared,
) -> Result<(Conn<PrimaryStream>, Packet), Error> {
    let config = &shared.config;
    let addr = &config.primary;
    let attempt = async {
        let stream = primary::connect(addr)
            .await
            .map_err(|source| Error::PrimaryConnect {
                addr: addr.clone(),
                source,
            })?;
        let mut primary = Conn::new(stream, config.limits.max_packet_size);
        let greeting = primary
            .read_packet()
            .await
            .map_err(|e| match Error::from_primary(e) {
                Error::PrimaryClosed => Error::PrimaryConnect {
                    addr: addr.clone(),
                    source: io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "closed before its greeting",
                    ),
                },
                other => other,
            })?;
        Ok((primary, greeting))
    };
    let limit = config.timeouts.primary_connect;
    tokio::time::timeout(limit, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(Error::PrimaryConnectTimeout {
                addr: addr.clone(),
                after: limit,
            })
        })
}

// === impl Session (login) ===

impl Session {
    /// Relays the login from the greeting to the primary's verdict.
    pub(super) async fn login(&mut self, greeting: Packet) -> Result<Phase, Error> {
        if greeting.first_byte() == Some(ERR_HEADER) {
            // The primary refused the connection outright; the client gets its words.
            self.client.forward(&greeting);
            self.flush_client().await?;
            return Ok(Phase::Closed);
        }
        self.show_greeting(&greeting).await?;
        let mut response = self.read_client_packet().await?;
        if ClientResponse::is_ssl_request(response.payload()) {
            self.start_tls().await?;
            response = self.read_client_packet().await?;
        }
        self.forward_login(&response).await?;
        match self.relay_auth().await? {
            AuthOutcome::Accepted => {
                let max_payload = self.shared.config.limits.max_packet_size;
                if self.client_caps.contains(CapabilityFlags::CLIENT_COMPRESS) {
                    // Like a server, compressed from the first command on: the login's OK
                    // went plain.
                    self.client
                        .start_compression(max_payload, self.shared.config.compression_level);
                    self.shared.metrics.compressed_logins.inc();
                } else {
                    self.client.set_max_payload(max_payload);
                }
                Ok(Phase::TrackingSetup)
            }
            AuthOutcome::Refused => Ok(Phase::Closed),
        }
    }

    /// Re-authentication after `COM_CHANGE_USER` (already forwarded); the new user's session
    /// starts without the proxy's tracking, so it is set up again.
    pub(super) async fn change_user(&mut self) -> Result<Phase, Error> {
        self.relay_auth().await?;
        Ok(Phase::TrackingSetup)
    }

    async fn show_greeting(&mut self, greeting: &Packet) -> Result<(), Error> {
        let mut payload = greeting.payload().to_vec();
        let parsed = ServerGreeting::parse(&payload).map_err(Error::PrimaryProtocol)?;
        self.connection_id = parsed.connection_id;
        self.mariadb = parsed.is_mariadb();
        self.primary_tracks = parsed
            .capabilities
            .contains(CapabilityFlags::CLIENT_SESSION_TRACK);
        tracing::Span::current().record("conn_id", parsed.connection_id);
        let offered =
            capabilities::offered_to_client(parsed.capabilities, self.shared.tls.is_some());
        let offered_ext = parsed
            .mariadb_capabilities
            .map(capabilities::offered_to_client_mariadb);
        ServerGreeting::set_capabilities(&mut payload, offered, offered_ext)
            .map_err(Error::PrimaryProtocol)?;
        // What the client may use is what was offered and what it asks for.
        self.client_caps = offered;
        self.primary_seq = Sequence::expecting(greeting.seq().wrapping_add(1));
        self.client_seq = Sequence::expecting(0);
        self.client
            .write_packet(self.client_seq.advance(), &payload);
        self.flush_client().await
    }

    async fn start_tls(&mut self) -> Result<(), Error> {
        let Some(acceptor) = self.shared.tls.clone() else {
            return Err(Error::ClientProtocol(ProtoError::Unsupported {
                what: "TLS (the proxy has no certificate configured and did not offer it)",
            }));
        };
        self.client
            .start_tls(&acceptor)
            .await
            .map_err(Error::ClientTls)
    }

    /// Passes the client's HandshakeResponse to the primary with its capabilities adjusted
    /// for the primary leg.
    async fn forward_login(&mut self, response: &Packet) -> Result<(), Error> {
        let mut payload = response.payload().to_vec();
        let parsed = ClientResponse::parse(&payload).map_err(Error::ClientProtocol)?;
        debug!(user = %String::from_utf8_lossy(parsed.user), tls = self.client.get_ref().is_tls(), "login");
        self.logged_in = true;
        self.client_caps &= parsed.capabilities;
        self.client_ext_caps = parsed
            .mariadb_capabilities
            .map(capabilities::requested_from_primary_mariadb);
        self.tracking.client_tracks(
            self.client_caps
                .contains(CapabilityFlags::CLIENT_SESSION_TRACK),
        );
        let caps = capabilities::requested_from_primary(parsed.capabilities, false);
        let ext = parsed
            .mariadb_capabilities
            .map(capabilities::requested_from_primary_mariadb);
        ClientResponse::set_capabilities(&mut payload, caps, ext);
        self.primary
            .write_packet(self.primary_seq.advance(), &payload);
        self.flush_primary().await
    }

    /// Relays an authentication exchange (auth switch, more data, any plugin's rounds) in
    /// both directions until the primary answers OK or ERR; that answer goes to the client
    /// too. Sequence ids are renumbered per leg, which also covers TLS on one leg only.
    async fn relay_auth(&mut self) -> Result<AuthOutcome, Error> {
        loop {
            let event = tokio::select! {
                packet = self.primary.read_packet() => AuthEvent::Primary(packet.map_err(Error::from_primary)?),
                packet = self.client.read_packet() => AuthEvent::Client(packet.map_err(Error::from_client)?),
            };
            match event {
                AuthEvent::Primary(packet) => {
                    self.primary_seq
                        .check(packet.seq())
                        .map_err(Error::PrimaryProtocol)?;
                    let seq = self.client_seq.advance();
                    let outcome = match packet.first_byte() {
                        Some(OK_HEADER) => {
                            self.relay_ok(&packet, seq, None)?;
                            Some(AuthOutcome::Accepted)
                        }
                        Some(ERR_HEADER) => {
                            self.client.forward_as(&packet, seq);
                            Some(AuthOutcome::Refused)
                        }
                        _ => {
                            self.client.forward_as(&packet, seq);
                            None
                        }
                    };
                    self.flush_client().await?;
                    if let Some(outcome) = outcome {
                        return Ok(outcome);
                    }
                }
                AuthEvent::Client(packet) => {
                    self.take_client_seq(&packet)?;
                    self.primary.forward_as(&packet, self.primary_seq.advance());
                    self.flush_primary().await?;
                }
            }
        }
    }
}
