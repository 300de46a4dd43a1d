//! Queries strongsync sends on a session's connection to the primary on its own behalf.

use bytes::BufMut;
use strongsync_proto::command::COM_QUERY;
use strongsync_proto::ok::ErrPacket;
use strongsync_proto::packet::Sequence;
use strongsync_proto::response::{PacketKind, ResponseReader};
use strongsync_proto::resultset::text_row;

use super::Legs;
use crate::error::Error;
use crate::flavour::{Answer, OwnQueries};

// Tracking set-up and checks, a replica's dump settings: written between the client's
// commands, their answers read whole and never shown to the client.

// === impl Legs (own queries) ===

impl OwnQueries for Legs {
    async fn ask(&mut self, queries: &[&str]) -> Result<Vec<Answer>, Error> {
        for sql in queries {
            self.primary().write_packet_with(0, |buf| {
                buf.put_u8(COM_QUERY);
                buf.put_slice(sql.as_bytes());
            });
        }
        self.flush_primary().await?;
        let mut answers = Vec::with_capacity(queries.len());
        for _ in queries {
            answers.push(read_answer(self).await?);
        }
        Ok(answers)
    }
}

/// Reads the whole response to a query the proxy sent, keeping only the first row (or the
/// error). Nothing of it reaches the client.
async fn read_answer(legs: &mut Legs) -> Result<Answer, Error> {
    let mut reader = ResponseReader::for_command(&[COM_QUERY], legs.deprecate_eof())
        .expect("COM_QUERY has a response");
    let mut seq = Sequence::expecting(1);
    let mut answer = Answer::default();
    let mut first_row = true;
    loop {
        let packet = legs
            .primary()
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
                legs.primary().write_packet(seq.advance(), &[]);
                legs.flush_primary().await?;
                reader.infile_sent();
            }
            _ => {}
        }
        if step.done {
            return Ok(answer);
        }
    }
}
