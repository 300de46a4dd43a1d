//! Waiting for a deadline that may not be set: a `select!` arm that never fires without one.

use tokio::time::Instant;

/// Sleeps until `at`, or forever if there is no deadline.
pub(crate) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
