//! A session whose epoch ended while it was idle: its client's next command gets the error
//! that says so before the connection closes.

use strongsync_proto::command::COM_QUIT;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::legs::{queue_client_error, Legs};

// Its connection to the retired primary is already closed; the error is ER_CONNECTION_KILLED,
// naming the epochs. A connection pool then opens a new one, which reaches the primary
// strongsync follows now.

/// Serves what is left of the session: the client's next command, answered with the error.
pub(super) async fn serve(legs: Legs, cancel: &CancellationToken) {
    let (mut client, error) = legs.retire();
    debug!(%error, "session's epoch is over: its primary connection is closed");
    let next = tokio::select! {
        () = cancel.cancelled() => None,
        packet = client.read_packet() => packet.ok(),
    };
    if let Some(packet) = next.filter(|p| p.payload() != [COM_QUIT]) {
        // The answer to the command: the exchange goes on from the command's sequence id.
        queue_client_error(&mut client, packet.seq().wrapping_add(1), true, &error);
    }
    client.shutdown().await;
}
