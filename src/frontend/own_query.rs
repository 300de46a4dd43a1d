//! Queries the proxy sends on a session's primary connection on its own behalf (tracking
//! setup, checks, the replica's dump settings): written between the client's commands, their
//! answers read whole and never shown to the client.

use bytes::BufMut;
use strongsync_proto::command::COM_QUERY;
use strongsync_proto::ok::ErrPacket;
use strongsync_proto::packet::Sequence;
use strongsync_proto::response::{PacketKind, ResponseReader};
use strongsync_proto::wire::Reader;

use super::session::Session;
use crate::error::Error;

/// The answer to a query the proxy sent on its own behalf: the first row, or the error.
#[derive(Debug, Default)]
pub(super) struct Swallowed {
    /// The first row's values (`None` for NULL); empty if there was no row.
    pub row: Vec<Option<Vec<u8>>>,
    /// The ERR the query got, if it failed.
    pub error: Option<String>,
    /// Its error code.
    pub code: Option<u16>,
}

// === impl Swallowed ===

impl Swallowed {
    /// The first value of the first row (empty for NULL or no row).
    pub(super) fn first_value(self) -> Vec<u8> {
        self.row.into_iter().next().flatten().unwrap_or_default()
    }
}

// === impl Session (own queries) ===

impl Session {
    /// Queues a `COM_QUERY` of the proxy's own.
    pub(super) fn send_query(&mut self, sql: &str) {
        self.primary.write_packet_with(0, |buf| {
            buf.put_u8(COM_QUERY);
            buf.put_slice(sql.as_bytes());
        });
    }

    /// Reads the whole response to a query the proxy sent, keeping only the first row (or the
    /// error). Nothing of it reaches the client.
    pub(super) async fn swallow_response(&mut self) -> Result<Swallowed, Error> {
        let mut reader = ResponseReader::for_command(&[COM_QUERY], self.deprecate_eof())
            .expect("COM_QUERY has a response");
        let mut seq = Sequence::expecting(1);
        let mut answer = Swallowed::default();
        let mut first_row = true;
        loop {
            let packet = self
                .primary
                .read_packet()
                .await
                .map_err(Error::from_primary)?;
            seq.check(packet.seq()).map_err(Error::PrimaryProtocol)?;
            let step = reader.on_packet(&packet).map_err(Error::PrimaryProtocol)?;
            match step.kind {
                PacketKind::Row if first_row => {
                    first_row = false;
                    answer.row = text_row(packet.payload());
                }
                PacketKind::Err => {
                    let err = ErrPacket::parse(packet.payload()).map_err(Error::PrimaryProtocol)?;
                    answer.code = Some(err.code);
                    answer.error = Some(format!(
                        "{} {}",
                        err.code,
                        String::from_utf8_lossy(err.message)
                    ));
                }
                PacketKind::LocalInfileRequest => {
                    // Cannot happen for the proxy's own queries; refuse the file all the same.
                    self.primary.write_packet(seq.advance(), &[]);
                    self.flush_primary().await?;
                    reader.infile_sent();
                }
                _ => {}
            }
            if step.done {
                return Ok(answer);
            }
        }
    }
}

/// The values of a text-protocol row: length-encoded strings, `0xFB` for NULL.
fn text_row(payload: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut r = Reader::new(payload);
    let mut values = Vec::new();
    while !r.is_empty() {
        if payload.get(r.position()) == Some(&0xFB) {
            let _ = r.take(1, "NULL");
            values.push(None);
        } else if let Ok(value) = r.lenenc_str("row value") {
            values.push(Some(value.to_vec()));
        } else {
            break;
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_rows_read_values_and_nulls() {
        let payload = [0x05, b'0', b'-', b'1', b'-', b'9', 0xFB, 0x01, b'1'];
        assert_eq!(
            text_row(&payload),
            vec![Some(b"0-1-9".to_vec()), None, Some(b"1".to_vec())]
        );
    }
}
