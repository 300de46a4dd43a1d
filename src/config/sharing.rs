//! Sharing connections to the primary between clients without state (`[sharing]`).

use std::time::Duration;

use super::define::{settings, Meta};

settings! {
    /// Sharing connections to the primary (see docs/sharing.md). Off by default. A reload
    /// applies each setting live; whether a session shares is settled at its login.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SharingConfig in "sharing" {
        /// A client with no session state of its own (no transaction, temporary table, user
        /// variable, lock, cursor or changed variable; its prepared statements are prepared
        /// again where they run) runs each statement on any free connection of its account
        /// and schema, and holds none while it idles or its
        /// commit waits for the quorum. A client that takes on state keeps its connection
        /// until the state ends. Turned on by a reload: sessions that log in from then on
        /// share. Turned off: new sessions keep a connection of their own, and those that
        /// logged in sharing go on sharing until they end.
        #[setting(Meta::FLAG.formerly("sharing").live())]
        pub enabled: bool = false,
        /// Free connections kept per account and schema. Connections come only from clients'
        /// logins (strongsync stores no password): one given back while this many are free is
        /// closed, so the primary runs about this many threads for stateless clients, however
        /// many are connected. A reload that lowers it closes the free connections above it.
        #[setting(Meta::FLAG.live().range(1, 65536))]
        pub pool_size: usize = 32,
        /// How long a statement waits for a free connection of its pool; then the client gets
        /// error 1040 and may try again (its session goes on).
        #[setting(Meta::FILE.live().nonzero())]
        pub max_wait: Duration = Duration::from_secs(10),
        /// Prepared statements kept on each shared connection to the primary. A session's
        /// statement runs on whichever connection it takes, prepared there the first time;
        /// past this many, the one used least recently is closed (and prepared again when a
        /// session next runs it). Bounds what the pools hold of the primary's
        /// `max_prepared_stmt_count`.
        #[setting(Meta::FILE.live().range(1, 16382))]
        pub statements_per_connection: usize = 128,
        /// Prepared statements one sharing session may hold open; one more gets error 1461,
        /// as the primary refuses a statement past `max_prepared_stmt_count`.
        #[setting(Meta::FILE.live().range(1, 1_048_576))]
        pub statements_per_session: usize = 1024,
        /// Bytes of prepared statements' text a sharing session keeps, and each shared
        /// connection. A statement past it stays on the connection that prepared it (its
        /// session keeps that connection), and a connection past it closes the statements it
        /// used least recently.
        #[setting(Meta::FILE.live().range(1024, 1 << 30))]
        pub statement_bytes: usize = 1 << 20,
    }
}
