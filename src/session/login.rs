//! Connecting a client: a [`Login`] takes both connections and, once the primary accepts the
//! client, hands them on as a [`LoggedIn`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BufMut;
use strongsync_proto::auth::{FromClient, PasswordWatch, AUTH_MORE_DATA};
use strongsync_proto::capabilities::{self, CapabilityFlags, MariadbCapabilities, StatusFlags};
use strongsync_proto::handshake::{ClientResponse, ServerGreeting, SSL_REQUEST_LEN};
use strongsync_proto::ok::{OkPacket, TrackingFilter, ERR_HEADER, OK_HEADER};
use strongsync_proto::packet::Packet;
use strongsync_proto::resultset::Layout;
use strongsync_proto::ProtoError;
use tracing::debug;

use super::Shared;
use crate::conn::Conn;
use crate::error::{Error, PasswordRefused};
use crate::flavour::Flavour;
use crate::gate::OnEpoch;
use crate::legs::{Either, Legs};
use crate::metrics::Metrics;
use crate::primary::{self, PrimaryStream};
use crate::sharing::PoolKey;
use crate::stream::ClientStream;
use crate::tls::{PasswordKey, PrimaryTlsConnector};

// The primary's greeting is shown to the client with capabilities rewritten, TLS starts on
// each leg, and the authentication exchange is relayed untouched until the primary says OK or
// ERR. A password in clear goes on only where both legs are secure (`PasswordWatch`); the same
// relay serves `COM_CHANGE_USER` (`relay_auth`).

/// A client logging in.
pub(super) struct Login {
    shared: Arc<Shared>,
    legs: Legs,
    /// The primary's id for this connection.
    connection_id: u32,
    /// Known from the primary's greeting.
    flavour: Option<Flavour>,
    /// Capabilities the client may use: offered in the greeting, then also asked for.
    client_caps: CapabilityFlags,
    /// MariaDB extended capabilities the client negotiated, if it is a MariaDB client.
    client_ext_caps: Option<MariadbCapabilities>,
    /// The primary leg negotiated session tracking.
    primary_tracks: bool,
    /// The primary's greeting offers TLS.
    primary_offers_tls: bool,
    /// The greeting's scramble, which a password is masked with.
    scramble: [u8; strongsync_proto::auth::SCRAMBLE_LEN],
    /// Where a password may be in the exchange.
    passwords: PasswordWatch,
    /// The pool this login's connection may join (`[sharing]`).
    pool_key: Option<PoolKey>,
}

/// A client the primary accepted, with both connections and what the login settled.
pub(super) struct LoggedIn {
    legs: Legs,
    connection_id: u32,
    flavour: Flavour,
    client: ClientCaps,
    primary_tracks: bool,
    /// The scramble of the connection, which a `COM_CHANGE_USER` answers too.
    scramble: [u8; strongsync_proto::auth::SCRAMBLE_LEN],
    /// The status flags of the primary's OK.
    status: StatusFlags,
    /// The pool the session's connection may join (`[sharing]`).
    pool_key: Option<PoolKey>,
}

/// What the client negotiated.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClientCaps {
    caps: CapabilityFlags,
    /// MariaDB extended capabilities, if it is a MariaDB client.
    ext: Option<MariadbCapabilities>,
}

/// How an authentication exchange ended.
pub(super) enum AuthOutcome {
    /// The primary accepted the client; its OK had these status flags.
    Accepted(StatusFlags),
    /// The primary refused it (its ERR was passed on).
    Refused,
}

/// Connects to the primary of the epoch in force and reads its greeting (or the ERR it sends
/// instead, e.g. when it has too many connections; the caller passes that on). The connection
/// belongs to that epoch.
pub(super) async fn connect_primary(
    shared: &Shared,
) -> Result<(Conn<PrimaryStream>, Packet, OnEpoch), Error> {
    let config = &shared.config;
    let epoch = shared.door.gate().epoch();
    let addr = &epoch.primary().to_owned();
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
        Ok((primary, greeting, epoch.connection()))
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

// === impl Login ===

impl Login {
    pub(super) fn new(
        shared: Arc<Shared>,
        client: Conn<ClientStream>,
        primary: Conn<PrimaryStream>,
        epoch: OnEpoch,
    ) -> Self {
        let legs = Legs::new(
            client,
            primary,
            epoch,
            Arc::clone(shared.door.gate()),
            shared.config.failover.fenced_reads,
            shared.config.timeouts.clone(),
        );
        Login {
            shared,
            legs,
            connection_id: 0,
            flavour: None,
            client_caps: CapabilityFlags::empty(),
            client_ext_caps: None,
            primary_tracks: false,
            primary_offers_tls: false,
            scramble: [0; strongsync_proto::auth::SCRAMBLE_LEN],
            passwords: PasswordWatch::new(None, &[]),
            pool_key: None,
        }
    }

    /// Relays the login from the primary's greeting to its verdict, within
    /// `timeouts.client_handshake`. The client is logged in, or the login ended (the client
    /// was told why, if it could be) and so did the session.
    pub(super) async fn run(mut self, greeting: Packet, peer: SocketAddr) -> Option<LoggedIn> {
        let limit = self.shared.config.timeouts.client_handshake;
        let outcome = tokio::time::timeout(limit, self.exchange(greeting))
            .await
            .unwrap_or(Err(Error::HandshakeTimeout(limit)));
        let (status, flavour) = match (outcome, self.flavour) {
            (Ok(AuthOutcome::Accepted(status)), Some(flavour)) => (status, flavour),
            // Accepted without a greeting read: the exchange never lets that happen.
            (Ok(AuthOutcome::Accepted(_)), None) => {
                let error = Error::PrimaryProtocol(ProtoError::Malformed {
                    what: "login accepted before the greeting",
                });
                self.legs
                    .close(Some(error), peer, &self.shared.metrics)
                    .await;
                return None;
            }
            (Ok(AuthOutcome::Refused), _) => {
                self.legs.close(None, peer, &self.shared.metrics).await;
                return None;
            }
            (Err(error), _) => {
                self.legs
                    .close(Some(error), peer, &self.shared.metrics)
                    .await;
                return None;
            }
        };
        let max_payload = self.shared.config.limits.max_packet_size;
        if self.client_caps.contains(CapabilityFlags::CLIENT_COMPRESS) {
            // Like a server, compressed from the first command on: the login's OK went plain.
            self.legs
                .client()
                .start_compression(max_payload, self.shared.config.compression_level);
            self.shared.metrics.compressed_logins.inc();
        } else {
            self.legs.client().set_max_payload(max_payload);
        }
        Some(LoggedIn {
            legs: self.legs,
            connection_id: self.connection_id,
            flavour,
            client: ClientCaps {
                caps: self.client_caps,
                ext: self.client_ext_caps,
            },
            primary_tracks: self.primary_tracks,
            scramble: *self.passwords.scramble(),
            status,
            pool_key: self.pool_key,
        })
    }

    async fn exchange(&mut self, greeting: Packet) -> Result<AuthOutcome, Error> {
        if greeting.first_byte() == Some(ERR_HEADER) {
            // The primary refused the connection outright; the client gets its words.
            self.legs.client().forward(&greeting);
            self.legs.flush_client().await?;
            return Ok(AuthOutcome::Refused);
        }
        self.show_greeting(&greeting).await?;
        let mut response = self.legs.read_client_packet().await?;
        if ClientResponse::is_ssl_request(response.payload()) {
            self.start_tls().await?;
            response = self.legs.read_client_packet().await?;
        }
        self.forward_login(&response).await?;
        // Before the tracking is set up the client sees no tracker data but what it asked for.
        let filter = TrackingFilter {
            client_tracks: self
                .client_caps
                .contains(CapabilityFlags::CLIENT_SESSION_TRACK),
            ..TrackingFilter::default()
        };
        let auth = Auth {
            primary_tracks: self.primary_tracks,
            filter,
            key: &self.shared.password_key,
            metrics: &self.shared.metrics,
        };
        relay_auth(&mut self.legs, auth, &mut self.passwords).await
    }

    async fn show_greeting(&mut self, greeting: &Packet) -> Result<(), Error> {
        let mut payload = greeting.payload().to_vec();
        let parsed = ServerGreeting::parse(&payload).map_err(Error::PrimaryProtocol)?;
        self.connection_id = parsed.connection_id;
        self.flavour = Some(Flavour::of(&parsed));
        self.primary_tracks = parsed
            .capabilities
            .contains(CapabilityFlags::CLIENT_SESSION_TRACK);
        self.primary_offers_tls = parsed.capabilities.contains(CapabilityFlags::CLIENT_SSL);
        self.scramble = parsed.scramble;
        self.legs.set_primary_id(parsed.connection_id);
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
        self.legs.greeted(greeting.seq());
        let seq = self.legs.next_client_seq();
        self.legs.client().write_packet(seq, &payload);
        self.legs.flush_client().await
    }

    async fn start_tls(&mut self) -> Result<(), Error> {
        let Some(acceptor) = self.shared.tls.clone() else {
            return Err(Error::ClientProtocol(ProtoError::Unsupported {
                what: "TLS (strongsync runs with tls.disabled and did not offer it)",
            }));
        };
        self.legs
            .client()
            .start_tls(&acceptor)
            .await
            .map_err(Error::ClientTls)?;
        self.shared
            .metrics
            .tls_logins
            .with_label_values(&["client"])
            .inc();
        Ok(())
    }

    /// Passes the client's HandshakeResponse to the primary with its capabilities adjusted
    /// for the primary leg, over TLS when `primary_tls` asks and the primary offers it.
    async fn forward_login(&mut self, response: &Packet) -> Result<(), Error> {
        let mut payload = response.payload().to_vec();
        let parsed = ClientResponse::parse(&payload).map_err(Error::ClientProtocol)?;
        debug!(user = %String::from_utf8_lossy(parsed.user), tls = self.legs.client_ref().get_ref().is_tls(), "login");
        self.client_caps &= parsed.capabilities;
        self.legs.logged_in(
            self.client_caps
                .contains(CapabilityFlags::CLIENT_DEPRECATE_EOF),
        );
        let tls = self.primary_leg_tls()?;
        let caps = capabilities::requested_from_primary(parsed.capabilities, tls);
        let ext = parsed
            .mariadb_capabilities
            .map(capabilities::requested_from_primary_mariadb);
        self.client_ext_caps = ext;
        self.passwords = PasswordWatch::new(parsed.auth_plugin, &self.scramble);
        let clear = self.passwords.client_sent(parsed.auth_data) == FromClient::ClearPassword;
        self.pool_key = Some(PoolKey {
            user: parsed.user.to_vec(),
            schema: parsed.database.unwrap_or_default().to_vec(),
            charset: parsed.collation,
            capabilities: caps.bits(),
            extended: ext.map(|ext| ext.bits()),
            tls,
        });
        ClientResponse::set_capabilities(&mut payload, caps, ext);
        if tls {
            // The SSLRequest is the response's fixed part, with the same capabilities.
            self.start_primary_tls(&payload[..SSL_REQUEST_LEN]).await?;
        }
        if clear {
            self.legs.clear_password_may_pass()?;
        }
        let seq = self.legs.next_primary_seq();
        self.legs.primary().write_packet(seq, &payload);
        self.legs.flush_primary().await
    }

    /// Whether the primary leg goes over TLS: as `primary_tls` asks and the primary offers,
    /// never on its Unix socket (secure already).
    ///
    /// # Errors
    /// [`Error::PrimaryTlsUnavailable`]: the mode requires TLS and the primary offers none.
    fn primary_leg_tls(&self) -> Result<bool, Error> {
        let mode = self.shared.primary_tls.mode();
        if !mode.wanted() || self.legs.primary_ref().get_ref().is_secure() {
            return Ok(false);
        }
        if self.primary_offers_tls {
            return Ok(true);
        }
        if mode.required() {
            return Err(Error::PrimaryTlsUnavailable {
                addr: self.legs.epoch().primary().to_owned(),
                mode,
            });
        }
        Ok(false)
    }

    /// Sends the primary `ssl_request` and starts TLS on its leg.
    async fn start_primary_tls(&mut self, ssl_request: &[u8]) -> Result<(), Error> {
        let tls = &self.shared.primary_tls;
        let Some(connector) = tls.connector() else {
            return Ok(());
        };
        let addr = self.legs.epoch().primary().to_owned();
        let failed = |source| Error::PrimaryTls {
            addr: addr.clone(),
            mode: tls.mode(),
            source,
        };
        let name = PrimaryTlsConnector::server_name(&addr)
            .map_err(|e| failed(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
        let seq = self.legs.next_primary_seq();
        self.legs.primary().write_packet(seq, ssl_request);
        self.legs.flush_primary().await?;
        self.legs
            .primary()
            .start_tls(connector, name)
            .await
            .map_err(failed)?;
        self.shared
            .metrics
            .tls_logins
            .with_label_values(&["primary"])
            .inc();
        Ok(())
    }
}

// === impl LoggedIn ===

impl LoggedIn {
    /// The primary's id for the connection.
    pub(super) fn connection_id(&self) -> u32 {
        self.connection_id
    }

    pub(super) fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// What the client negotiated.
    pub(super) fn client(&self) -> ClientCaps {
        self.client
    }

    /// The primary leg negotiated session tracking.
    pub(super) fn primary_tracks(&self) -> bool {
        self.primary_tracks
    }

    /// The connection's scramble.
    pub(super) fn scramble(&self) -> [u8; strongsync_proto::auth::SCRAMBLE_LEN] {
        self.scramble
    }

    /// The status flags of the primary's OK to the login.
    pub(super) fn status(&self) -> StatusFlags {
        self.status
    }

    /// The pool the session's connection may join (`[sharing]`).
    pub(super) fn pool_key(&mut self) -> Option<PoolKey> {
        self.pool_key.take()
    }

    /// Both connections, for the session that relays the client's commands.
    pub(super) fn into_legs(self) -> Legs {
        self.legs
    }
}

// === impl ClientCaps ===

impl ClientCaps {
    /// The capabilities themselves.
    pub(super) fn capabilities(self) -> CapabilityFlags {
        self.caps
    }

    /// The client negotiated `CLIENT_DEPRECATE_EOF` (so did the primary leg: the proxy
    /// passes the client's choice on).
    pub(super) fn deprecate_eof(self) -> bool {
        self.caps.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
    }

    /// The client reads session state (`CLIENT_SESSION_TRACK`).
    pub(super) fn tracks(self) -> bool {
        self.caps.contains(CapabilityFlags::CLIENT_SESSION_TRACK)
    }

    /// How the client reads the result sets the proxy makes up.
    pub(super) fn layout(self) -> Layout {
        Layout {
            deprecate_eof: self.deprecate_eof(),
            extended_metadata: self
                .ext
                .is_some_and(|c| c.contains(MariadbCapabilities::MARIADB_CLIENT_EXTENDED_METADATA)),
        }
    }
}

/// What an authentication exchange's relay needs besides the connections.
pub(super) struct Auth<'a> {
    /// The primary leg negotiated session tracking.
    pub primary_tracks: bool,
    /// What of the OK's tracker data the client gets.
    pub filter: TrackingFilter,
    /// strongsync's RSA key for passwords.
    pub key: &'a PasswordKey,
    pub metrics: &'a Metrics,
}

/// Relays an authentication exchange (auth switch, more data, any plugin's rounds) in both
/// directions until the primary answers OK or ERR; that answer goes to the client too, its
/// tracker data as `auth.filter` lets it through. Sequence ids are renumbered per leg, which
/// also covers TLS on one leg only, and packets strongsync answers or rewrites itself. A
/// password goes on only where both legs are secure ([`relay_password`]).
pub(super) async fn relay_auth(
    legs: &mut Legs,
    auth: Auth<'_>,
    passwords: &mut PasswordWatch,
) -> Result<AuthOutcome, Error> {
    loop {
        match legs.next_from_either().await? {
            Either::Primary(packet) => {
                legs.check_primary_seq(&packet)?;
                let seq = legs.next_client_seq();
                let outcome = match packet.first_byte() {
                    Some(OK_HEADER) => {
                        let ok = OkPacket::parse(packet.payload(), auth.primary_tracks)
                            .map_err(Error::PrimaryProtocol)?;
                        legs.forward_ok(&packet, &ok, seq, auth.filter);
                        Some(AuthOutcome::Accepted(ok.status))
                    }
                    Some(ERR_HEADER) => {
                        legs.client().forward_as(&packet, seq);
                        Some(AuthOutcome::Refused)
                    }
                    _ => {
                        passwords.server_sent(packet.payload());
                        legs.client().forward_as(&packet, seq);
                        None
                    }
                };
                legs.flush_client().await?;
                if let Some(outcome) = outcome {
                    return Ok(outcome);
                }
            }
            Either::Client(packet) => {
                legs.take_client_seq(&packet)?;
                relay_password(legs, &auth, passwords, &packet).await?;
            }
        }
    }
}

/// Passes one client packet of an exchange on, unless it holds a password that must not go:
/// in clear, only where both legs are secure. Where the client's leg is plain and the
/// primary's secure, the primary wants the password in clear, so a client that asks for the
/// server's RSA key gets strongsync's, and what it encrypts with it goes on decrypted.
async fn relay_password(
    legs: &mut Legs,
    auth: &Auth<'_>,
    passwords: &mut PasswordWatch,
    packet: &Packet,
) -> Result<(), Error> {
    let terminate = legs.answers_key_requests();
    match passwords.client_sent(packet.payload()) {
        FromClient::KeyRequest if terminate => {
            let pem = auth.key.public_pem().await.map_err(Error::PasswordKey)?;
            let seq = legs.next_client_seq();
            legs.client().write_packet_with(seq, |buf| {
                buf.put_u8(AUTH_MORE_DATA);
                buf.put_slice(pem);
            });
            passwords.key_sent();
            return legs.flush_client().await;
        }
        FromClient::EncryptedForProxy => {
            let mut password = auth
                .key
                .decrypt(packet.payload())
                .await
                .map_err(|_| Error::Password(PasswordRefused::Undecryptable))?;
            passwords.unmask(&mut password);
            let seq = legs.next_primary_seq();
            legs.primary().write_packet(seq, &password);
            password.fill(0);
            auth.metrics.passwords_relayed_by_key.inc();
            return legs.flush_primary().await;
        }
        FromClient::EncryptedForServer if terminate => {
            return Err(Error::Password(PasswordRefused::ForeignKey));
        }
        FromClient::ClearPassword => legs.clear_password_may_pass()?,
        FromClient::Forward | FromClient::KeyRequest | FromClient::EncryptedForServer => {}
    }
    legs.pass_to_primary(packet);
    legs.flush_primary().await
}
