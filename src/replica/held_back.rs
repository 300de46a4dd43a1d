//! What the pipe of a replica without semisync holds back until the quorum holds it
//! (`async_replicas = "after_quorum"`).

use std::collections::VecDeque;

use prometheus::IntGauge;
use strongsync_proto::packet::Packet;
use strongsync_proto::position::Position;

// The dump's packets wait in order, each gated by the binlog position the stream had reached
// with it, and go once the quorum position reaches that gate, so such a replica is never
// ahead of the replicas a failover promotes. Bounded in bytes: a full queue stops the pipe
// reading its dump, so the replica falls behind.

/// The packets held back, oldest first.
#[derive(Debug)]
pub(super) struct HeldBack {
    packets: VecDeque<(Option<Position>, Packet)>,
    bytes: usize,
    /// The furthest position the stream has reached: a packet that says none (a continuation,
    /// an event without a position) is gated there, so nothing ever overtakes what came
    /// before it.
    reached: Option<Position>,
    /// The gauge of bytes held by every pipe.
    gauge: IntGauge,
}

// === impl HeldBack ===

impl HeldBack {
    pub(super) fn new(gauge: IntGauge) -> Self {
        HeldBack {
            packets: VecDeque::new(),
            bytes: 0,
            reached: None,
            gauge,
        }
    }

    /// The gate of the next packet, which brought the stream to `at` if it says so.
    pub(super) fn gate(&mut self, at: Option<Position>) -> Option<Position> {
        self.reached = self.reached.max(at);
        self.reached
    }

    /// Whether a packet gated at `gate` may go out now, with the quorum at `quorum`: nothing
    /// is held before it and the quorum holds what it brings.
    pub(super) fn may_pass(&self, gate: Option<Position>, quorum: Option<Position>) -> bool {
        self.packets.is_empty() && passes(gate, quorum)
    }

    /// Holds a packet gated at `gate`.
    pub(super) fn hold(&mut self, gate: Option<Position>, packet: Packet) {
        let len = packet.wire().len();
        self.bytes += len;
        self.gauge.add(len as i64);
        self.packets.push_back((gate, packet));
    }

    /// The oldest packet held, if the quorum at `quorum` holds what it brings (or `all`).
    pub(super) fn release(&mut self, quorum: Option<Position>, all: bool) -> Option<Packet> {
        let (gate, _) = self.packets.front()?;
        if !all && !passes(*gate, quorum) {
            return None;
        }
        let (_, packet) = self.packets.pop_front()?;
        let len = packet.wire().len();
        self.bytes -= len;
        self.gauge.sub(len as i64);
        Some(packet)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for HeldBack {
    fn drop(&mut self) {
        self.gauge.sub(self.bytes as i64);
    }
}

/// A gate the quorum has reached (a packet before any position passes).
fn passes(gate: Option<Position>, quorum: Option<Position>) -> bool {
    gate.is_none_or(|gate| quorum.is_some_and(|q| gate <= q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64) -> Option<Position> {
        Some(Position {
            file_seq: 1,
            offset,
        })
    }

    fn packet(seq: u8) -> Packet {
        Packet::new(seq, &[0])
    }

    #[test]
    fn packets_go_in_order_once_the_quorum_reaches_their_gate() {
        let gauge = IntGauge::new("held", "held").unwrap();
        let mut held = HeldBack::new(gauge.clone());
        let unpositioned = held.gate(None);
        assert!(held.may_pass(unpositioned, None), "nothing positioned yet");
        let first = held.gate(at(100));
        assert!(!held.may_pass(first, at(99)));
        held.hold(first, packet(1));
        // A continuation says no position: it waits behind, at the furthest reached.
        let next = held.gate(None);
        assert_eq!(next, at(100));
        assert!(
            !held.may_pass(next, at(200)),
            "never overtakes what is held"
        );
        held.hold(next, packet(2));
        let later = held.gate(at(300));
        held.hold(later, packet(3));
        assert_eq!(gauge.get(), 15);
        assert!(held.release(at(99), false).is_none());
        assert_eq!(held.release(at(200), false).map(|p| p.seq()), Some(1));
        assert_eq!(held.release(at(200), false).map(|p| p.seq()), Some(2));
        assert!(
            held.release(at(200), false).is_none(),
            "300 is not held yet"
        );
        assert!(held.release(None, false).is_none());
        assert_eq!(held.release(None, true).map(|p| p.seq()), Some(3), "all");
        assert!(held.is_empty());
        assert_eq!((held.bytes(), gauge.get()), (0, 0));
        let gate = held.gate(None);
        held.hold(gate, packet(4));
        drop(held);
        assert_eq!(
            gauge.get(),
            0,
            "a pipe that ends takes its bytes off the gauge"
        );
    }
}
