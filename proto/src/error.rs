//! The one error type of the codec layer: what was wrong with the bytes, never an I/O failure.

use thiserror::Error;

/// Why a packet or a sequence of packets could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// A payload (possibly spread over several packets) is larger than the configured limit.
    #[error("packet payload of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Bytes announced so far for this payload.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A packet carried a sequence id other than the one the exchange requires.
    #[error("packet out of sequence: expected sequence id {expected}, got {got}")]
    OutOfSequence {
        /// The sequence id the exchange required.
        expected: u8,
        /// The sequence id the packet carried.
        got: u8,
    },
    /// A field ran past the end of its packet.
    #[error("truncated {what}")]
    Truncated {
        /// The field or packet that was cut short.
        what: &'static str,
    },
    /// A field held a value the protocol does not allow.
    #[error("malformed {what}")]
    Malformed {
        /// The field or packet that was malformed.
        what: &'static str,
    },
    /// A packet that cannot appear at this point of an exchange.
    #[error("unexpected packet starting with 0x{first:02x} while reading {expecting}")]
    Unexpected {
        /// First payload byte (0 for an empty payload).
        first: u8,
        /// What the exchange was waiting for.
        expecting: &'static str,
    },
    /// The peer asked for a feature the proxy does not speak.
    #[error("unsupported: {what}")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
}
