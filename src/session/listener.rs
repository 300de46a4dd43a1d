//! The accept loop: one task per client, a cap on how many run at once, backoff when accepting
//! fails, and a stop on cancellation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info_span, warn, Instrument};

use super::login::{connect_primary, Login};
use super::phases::Session;
use super::Shared;
use crate::conn::Conn;
use crate::error::Error;
use crate::health::Unreachable;
use crate::legs::queue_client_error;
use crate::stream::ClientStream;

/// Longest pause after repeated accept failures (e.g. out of file descriptors).
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Accepts clients on `listener` until `cancel` fires; sessions run on `tracker`.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(shared.config.limits.max_connections));
    let mut backoff = Duration::from_millis(10);
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::from_millis(10);
                accepted
            }
            Err(err) => {
                error!(%err, ?backoff, "accepting a client connection failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let span = info_span!("client", addr = %peer, conn_id = tracing::field::Empty);
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                let cancel = cancel.child_token();
                tracker.spawn(
                    async move {
                        handle(tcp, peer, shared, cancel).await;
                        drop(slot);
                    }
                    .instrument(span),
                );
            }
            Err(_) => {
                let limit = shared.config.limits.max_connections;
                tracker.spawn(refuse(tcp, Error::TooManyConnections { limit }).instrument(span));
            }
        }
    }
}

/// Serves one client: connect to the primary first (the client must see the primary's own
/// greeting, scramble and connection id), then run the session.
async fn handle(tcp: TcpStream, peer: SocketAddr, shared: Arc<Shared>, cancel: CancellationToken) {
    if let Err(err) = tcp.set_nodelay(true) {
        warn!(%err, "cannot set TCP_NODELAY on the client connection");
    }
    let in_flight = shared.in_flight.enter();
    let _connected = Gauged::new(&shared.metrics.client_connections);
    let client = Conn::new(
        ClientStream::Plain(tcp),
        shared.config.limits.max_handshake_packet_size,
    );
    if !shared.door.gate().lease().may_act() {
        // Another instance leads the cluster (or none does): the client is told which.
        let leader = shared
            .standing
            .borrow()
            .leader()
            .map(|l| l.advertise.clone());
        let error = Error::NotLeading { leader };
        tracing::debug!(%error, "client turned away");
        close_with(client, &error).await;
        return;
    }
    if let Some(fence) = shared
        .door
        .gate()
        .fenced()
        .then(|| shared.door.fence_state())
        .flatten()
        .filter(|_| !shared.config.failover.fenced_reads)
    {
        let error = Error::Fenced { epoch: fence.epoch };
        tracing::debug!(%error, "client turned away");
        close_with(client, &error).await;
        return;
    }
    match connect_primary(&shared).await {
        Ok((primary, greeting, epoch)) => {
            shared.primary_health.record(Ok(()));
            let _primary = Gauged::new(&shared.metrics.primary_connections);
            let login = Login::new(Arc::clone(&shared), client, primary, epoch);
            if let Some(logged_in) = login.run(greeting, peer).await {
                Session::new(shared, logged_in, cancel, in_flight)
                    .run(peer)
                    .await;
            }
        }
        Err(error) => {
            let error = Arc::new(error);
            shared
                .primary_health
                .record(Err(Unreachable::Session(Arc::clone(&error))));
            error!(%error, "client turned away: the primary is unreachable");
            close_with(client, &error).await;
        }
    }
}

/// Holds one unit of a gauge (a connection) for as long as it lives.
struct Gauged(prometheus::IntGauge);

impl Gauged {
    fn new(gauge: &prometheus::IntGauge) -> Self {
        gauge.inc();
        Gauged(gauge.clone())
    }
}

impl Drop for Gauged {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Turns a client away before any greeting (e.g. too many connections).
async fn refuse(tcp: TcpStream, error: Error) {
    warn!(%error, "client turned away");
    close_with(Conn::new(ClientStream::Plain(tcp), 0), &error).await;
}

async fn close_with(mut client: Conn<ClientStream>, error: &Error) {
    // Nothing has been negotiated yet: sequence id 0 and no SQLSTATE, as a server does.
    queue_client_error(&mut client, 0, false, error);
    client.shutdown().await;
}
