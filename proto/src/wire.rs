//! The protocol's basic encodings: little-endian integers, length-encoded integers and strings,
//! NUL-terminated strings. A [`Reader`] walks a payload and reports truncation as an error.

use bytes::BufMut;

use crate::ProtoError;

/// A cursor over one payload. Every read either returns the field or a [`ProtoError::Truncated`]
/// naming it; nothing panics on short input.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Bytes a length-encoded integer with this value occupies.
pub fn lenenc_int_len(value: u64) -> usize {
    match value {
        0..=0xFA => 1,
        0xFB..=0xFFFF => 3,
        0x1_0000..=0xFF_FFFF => 4,
        _ => 9,
    }
}

/// Appends a length-encoded integer.
pub fn put_lenenc_int(dst: &mut impl BufMut, value: u64) {
    match value {
        0..=0xFA => dst.put_u8(value as u8),
        0xFB..=0xFFFF => {
            dst.put_u8(0xFC);
            dst.put_u16_le(value as u16);
        }
        0x1_0000..=0xFF_FFFF => {
            dst.put_u8(0xFD);
            dst.put_uint_le(value, 3);
        }
        _ => {
            dst.put_u8(0xFE);
            dst.put_u64_le(value);
        }
    }
}

/// Appends a length-encoded string.
pub fn put_lenenc_str(dst: &mut impl BufMut, value: &[u8]) {
    put_lenenc_int(dst, value.len() as u64);
    dst.put_slice(value);
}

// === impl Reader ===

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Offset of the next byte to read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True once every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] naming `what` if fewer than `n` bytes are left.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.remaining() < n {
            return Err(ProtoError::Truncated { what });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// One byte.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] at the end of the payload.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.take(1, what)?[0])
    }

    /// A little-endian `u16`.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] if fewer than 2 bytes are left.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// A little-endian 3-byte integer.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] if fewer than 3 bytes are left.
    pub fn u24(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        let b = self.take(3, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], 0]))
    }

    /// A little-endian `u32`.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] if fewer than 4 bytes are left.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A little-endian `u64`.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] if fewer than 8 bytes are left.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        let b = self.take(8, what)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(b);
        Ok(u64::from_le_bytes(le))
    }

    /// A length-encoded integer. `0xFB` (the NULL marker of result rows) and `0xFF` are not
    /// integers and are reported as malformed.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] or [`ProtoError::Malformed`].
    pub fn lenenc_int(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        match self.u8(what)? {
            b @ 0..=0xFA => Ok(u64::from(b)),
            0xFC => self.u16(what).map(u64::from),
            0xFD => self.u24(what).map(u64::from),
            0xFE => self.u64(what),
            _ => Err(ProtoError::Malformed { what }),
        }
    }

    /// A length-encoded string.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] or [`ProtoError::Malformed`].
    pub fn lenenc_str(&mut self, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let len = self.lenenc_int(what)?;
        let len = usize::try_from(len).map_err(|_| ProtoError::Malformed { what })?;
        self.take(len, what)
    }

    /// A NUL-terminated string, without its NUL.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] if no NUL follows.
    pub fn null_str(&mut self, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let rest = &self.buf[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(ProtoError::Truncated { what })?;
        self.pos += end + 1;
        Ok(&rest[..end])
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn lenenc_int_boundaries() {
        let table: &[(u64, &[u8])] = &[
            (0, &[0x00]),
            (0xFA, &[0xFA]),
            (0xFB, &[0xFC, 0xFB, 0x00]),
            (0xFFFF, &[0xFC, 0xFF, 0xFF]),
            (0x1_0000, &[0xFD, 0x00, 0x00, 0x01]),
            (0xFF_FFFF, &[0xFD, 0xFF, 0xFF, 0xFF]),
            (0x100_0000, &[0xFE, 0, 0, 0, 1, 0, 0, 0, 0]),
        ];
        for &(value, bytes) in table {
            let mut out = Vec::new();
            put_lenenc_int(&mut out, value);
            assert_eq!(out, bytes, "encoding {value:#x}");
            assert_eq!(lenenc_int_len(value), bytes.len());
            assert_eq!(Reader::new(bytes).lenenc_int("x"), Ok(value));
        }
    }

    #[test]
    fn short_and_invalid_input_is_an_error() {
        assert_eq!(
            Reader::new(&[0xFC, 0x01]).lenenc_int("len"),
            Err(ProtoError::Truncated { what: "len" })
        );
        assert_eq!(
            Reader::new(&[0xFB]).lenenc_int("len"),
            Err(ProtoError::Malformed { what: "len" })
        );
        assert_eq!(
            Reader::new(&[0xFF]).lenenc_int("len"),
            Err(ProtoError::Malformed { what: "len" })
        );
        assert_eq!(
            Reader::new(&[0x05, b'a']).lenenc_str("s"),
            Err(ProtoError::Truncated { what: "s" })
        );
        assert_eq!(
            Reader::new(b"abc").null_str("s"),
            Err(ProtoError::Truncated { what: "s" })
        );
    }

    proptest! {
        #[test]
        fn lenenc_round_trip(value: u64, s in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            put_lenenc_int(&mut out, value);
            put_lenenc_str(&mut out, &s);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.lenenc_int("v")?, value);
            prop_assert_eq!(r.lenenc_str("s")?, &s[..]);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while !r.is_empty() {
                if r.lenenc_str("s").is_err() {
                    break;
                }
            }
        }
    }
}
