//! The admin port's accept loop: HTTP/1 on TCP, or HTTPS with the `[tls]` certificate
//! (`admin_tls`), within its limits.

// At most `limits.max_admin_connections` connections at once, one more closed at once; a
// request's headers within `timeouts.admin_request` (which also closes a connection left
// idle), so a slow caller cannot hold a slot; and a stop on cancellation, letting calls under
// way finish.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// How the admin port serves.
pub struct Listening {
    pub max_connections: usize,
    pub request_timeout: Duration,
    pub tls: Option<TlsAcceptor>,
}

/// Serves `app` on `listener` until `cancel` fires.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    how: Listening,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(how.max_connections));
    let tracker = TaskTracker::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(how.request_timeout);
    let http = Arc::new(http);
    loop {
        let (tcp, peer) = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "admin port: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            metrics
                .admin_refused
                .with_label_values(&["too_many_connections"])
                .inc();
            debug!(%peer, limit = how.max_connections, "admin port: too many connections, closed");
            drop(tcp);
            continue;
        };
        let (app, http, tls, cancel) = (
            app.clone(),
            Arc::clone(&http),
            how.tls.clone(),
            cancel.clone(),
        );
        let limit = how.request_timeout;
        tracker.spawn(async move {
            match tls {
                None => connection(tcp, app, &http, cancel).await,
                Some(acceptor) => match tokio::time::timeout(limit, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => connection(stream, app, &http, cancel).await,
                    Ok(Err(error)) => debug!(%peer, %error, "admin port: TLS handshake failed"),
                    Err(_) => debug!(%peer, "admin port: no TLS handshake in time"),
                },
            }
            drop(slot);
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// Serves one connection until it ends, or until `cancel`: then the call under way finishes
/// and the connection closes.
async fn connection<S>(
    stream: S,
    app: Router,
    http: &hyper::server::conn::http1::Builder,
    cancel: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let conn = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let served = tokio::select! {
        served = conn.as_mut() => served,
        () = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(error) = served {
        debug!(%error, "admin connection ended");
    }
}
