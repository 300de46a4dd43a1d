//! A session's connection to the primary, with the epoch it belongs to.

use std::pin::Pin;

use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::conn::Conn;
use crate::gate::{Gate, OnEpoch};
use crate::primary::{self, PrimaryStream};

/// What [`Backend::watch`] saw.
pub(super) enum Watched {
    Retired,
    Filled(Result<usize, crate::conn::ConnError>),
}

/// A connection to the primary, with the epoch it belongs to.
pub(crate) struct Backend {
    pub(super) conn: Conn<PrimaryStream>,
    /// The epoch the connection was opened in, counting the connection until it is dropped
    /// with it; every write to it passes the [`Gate`].
    pub(super) epoch: OnEpoch,
    /// Resolves once the epoch is over (made once, polled wherever the session waits on the
    /// primary).
    pub(super) retired: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The primary's id for the connection (0 until its greeting is read).
    pub(super) id: u32,
}

// === impl Backend ===

impl Backend {
    pub(super) fn new(conn: Conn<PrimaryStream>, epoch: OnEpoch) -> Self {
        Backend {
            conn,
            retired: Box::pin(epoch.retired()),
            epoch,
            id: 0,
        }
    }

    /// The primary's id for the connection.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The connection itself.
    pub(crate) fn conn(&mut self) -> &mut Conn<PrimaryStream> {
        &mut self.conn
    }

    /// Resolves once the connection's epoch is over.
    pub(crate) fn retired_wait(&self) -> WaitForCancellationFutureOwned {
        self.epoch.retired()
    }

    /// The connection and the epoch it belongs to, for a replica's dump.
    pub(crate) fn into_parts(self) -> (Conn<PrimaryStream>, OnEpoch) {
        (self.conn, self.epoch)
    }

    /// The number of the epoch the connection belongs to.
    pub(crate) fn epoch_number(&self) -> u64 {
        self.epoch.number()
    }

    /// Whether the connection's epoch is over.
    pub(crate) fn is_retired(&self) -> bool {
        self.epoch.arc().is_retired()
    }

    /// Whether the primary closed the connection, or said anything on it, while it was not
    /// in use (`wait_timeout`, `KILL`): between commands it has nothing to say.
    pub(crate) fn spoke_unasked(&mut self) -> bool {
        self.conn.buffered_len() > 0 || self.conn.readable_now()
    }

    /// Closes the connection: cleanly (`COM_QUIT`, then the end of the stream) if it may
    /// still be written to, else at once with a reset, so that no byte of it reaches the
    /// primary after a fence or a follow.
    pub(crate) async fn close(&mut self, gate: &Gate, fenced_reads: bool) {
        match gate.pass(self.epoch.number(), fenced_reads) {
            Ok(_pass) => self.conn.shutdown().await,
            Err(_) => primary::reset_on_close(&mut self.conn),
        }
    }

    /// Watches an idle connection: its epoch ending, or the primary sending something
    /// ([`Conn::fill`]); waits forever without a connection.
    pub(super) async fn watch(backend: &mut Option<Backend>) -> Watched {
        let Some(backend) = backend else {
            return std::future::pending().await;
        };
        tokio::select! {
            biased;
            () = backend.retired.as_mut() => Watched::Retired,
            filled = backend.conn.fill() => Watched::Filled(filled),
        }
    }
}
