//! The binary protocol's statement commands as a proxy that numbers statements itself reads and
//! rewrites them: the statement id, and the parameter types an execute may leave out.

use bytes::BufMut;

use crate::command::{COM_STMT_BULK_EXECUTE, COM_STMT_CLOSE, COM_STMT_EXECUTE, COM_STMT_PREPARE};
use crate::error::ProtoError;
use crate::wire::Reader;

// Layouts (no `CLIENT_QUERY_ATTRIBUTES`, which the proxy masks):
// - `COM_STMT_EXECUTE`: `u8 0x17 | u32 id | u8 flags | u32 iterations`, then for `n > 0`
//   parameters a NULL bitmap of `(n + 7) / 8` bytes, `u8 new_params_bound`, and if that is 1
//   two bytes of type per parameter, then the values. With `new_params_bound = 0` the server
//   uses the types the statement was last executed with, on that connection.
// - `COM_STMT_BULK_EXECUTE` (MariaDB): `u8 0xFA | u32 id | u16 flags`, the types if
//   `flags & 128`, then the values.
// - `COM_STMT_SEND_LONG_DATA`, `COM_STMT_CLOSE`, `COM_STMT_RESET`, `COM_STMT_FETCH`:
//   `u8 command | u32 id | …`.
// - `PREPARE_OK`: `u8 0 | u32 id | u16 columns | u16 params | u8 0 | u16 warnings`.

/// MariaDB's statement id for "the statement prepared last on this connection" (a client may
/// send `COM_STMT_PREPARE` and `COM_STMT_EXECUTE` together, before it knows the id).
pub const LAST_PREPARED: u32 = u32::MAX;

/// `COM_STMT_BULK_EXECUTE` flag: the parameter types follow the flags.
const BULK_SENDS_TYPES: u16 = 128;

/// The statement id of a `COM_STMT_*` command, or of a `PREPARE_OK` (after its first byte).
pub fn statement_id(payload: &[u8]) -> Option<u32> {
    let id = payload.get(1..5)?;
    Some(u32::from_le_bytes(id.try_into().ok()?))
}

/// What a `PREPARE_OK` says of the statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrepareOk {
    /// The statement's id on the connection that prepared it.
    pub id: u32,
    /// Its parameters.
    pub params: u16,
}

// === impl PrepareOk ===

impl PrepareOk {
    /// Parses a `PREPARE_OK` payload.
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] for a payload too short to be one.
    pub fn parse(payload: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(payload);
        r.u8("PREPARE_OK status")?;
        let id = r.u32("PREPARE_OK statement id")?;
        r.u16("PREPARE_OK column count")?;
        let params = r.u16("PREPARE_OK parameter count")?;
        Ok(PrepareOk { id, params })
    }
}

/// Where an execute (`COM_STMT_EXECUTE` or `COM_STMT_BULK_EXECUTE`) of a statement with
/// parameters keeps their types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Types<'a> {
    /// The types the command carries, if it carries them.
    pub sent: Option<&'a [u8]>,
    /// Where they go in a command that leaves them out: the offset of the
    /// `new_params_bound` byte (execute) or of the byte after the flags (bulk).
    at: usize,
    bulk: bool,
}

// === impl Types ===

impl<'a> Types<'a> {
    /// The types of an execute of a statement with `params` parameters, or `None` if the
    /// command has none to carry (no parameters, not an execute).
    ///
    /// # Errors
    /// [`ProtoError::Truncated`] for a command too short for its parameters.
    pub fn of(payload: &'a [u8], params: u16) -> Result<Option<Self>, ProtoError> {
        if params == 0 {
            return Ok(None);
        }
        let types_len = usize::from(params) * 2;
        let mut r = Reader::new(payload);
        match r.u8("statement command")? {
            COM_STMT_EXECUTE => {
                r.take(9, "COM_STMT_EXECUTE header")?;
                r.take(
                    usize::from(params).div_ceil(8),
                    "COM_STMT_EXECUTE NULL bitmap",
                )?;
                let at = r.position();
                let sent = match r.u8("COM_STMT_EXECUTE new_params_bound")? {
                    0 => None,
                    _ => Some(r.take(types_len, "COM_STMT_EXECUTE parameter types")?),
                };
                Ok(Some(Types {
                    sent,
                    at,
                    bulk: false,
                }))
            }
            COM_STMT_BULK_EXECUTE => {
                r.u32("COM_STMT_BULK_EXECUTE statement id")?;
                let flags = r.u16("COM_STMT_BULK_EXECUTE flags")?;
                let at = r.position();
                let sent = if flags & BULK_SENDS_TYPES != 0 {
                    Some(r.take(types_len, "COM_STMT_BULK_EXECUTE parameter types")?)
                } else {
                    None
                };
                Ok(Some(Types {
                    sent,
                    at,
                    bulk: true,
                }))
            }
            _ => Ok(None),
        }
    }

    /// Writes the command of `payload` (which left its types out) as statement `id`, with
    /// `types` added.
    pub fn put_with(&self, dst: &mut impl BufMut, payload: &[u8], id: u32, types: &[u8]) {
        debug_assert!(self.sent.is_none(), "the command carries its own types");
        dst.put_u8(payload[0]);
        dst.put_u32_le(id);
        if self.bulk {
            let flags = u16::from_le_bytes([payload[5], payload[6]]) | BULK_SENDS_TYPES;
            dst.put_u16_le(flags);
            dst.put_slice(types);
            dst.put_slice(&payload[self.at..]);
        } else {
            dst.put_slice(&payload[5..self.at]);
            dst.put_u8(1);
            dst.put_slice(types);
            dst.put_slice(&payload[self.at + 1..]);
        }
    }
}

/// Writes the statement command `payload` as statement `id`.
pub fn put_with_id(dst: &mut impl BufMut, payload: &[u8], id: u32) {
    dst.put_u8(payload[0]);
    dst.put_u32_le(id);
    dst.put_slice(&payload[5..]);
}

/// Writes `COM_STMT_PREPARE` of `sql`.
pub fn put_prepare(dst: &mut impl BufMut, sql: &[u8]) {
    dst.put_u8(COM_STMT_PREPARE);
    dst.put_slice(sql);
}

/// Writes `COM_STMT_CLOSE` of statement `id`.
pub fn put_close(dst: &mut impl BufMut, id: u32) {
    dst.put_u8(COM_STMT_CLOSE);
    dst.put_u32_le(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `COM_STMT_EXECUTE` of statement 7 with two parameters.
    fn execute(bound: Option<&[u8]>) -> Vec<u8> {
        let mut p = vec![COM_STMT_EXECUTE, 7, 0, 0, 0, 0, 1, 0, 0, 0, 0b10];
        match bound {
            Some(types) => {
                p.push(1);
                p.extend_from_slice(types);
            }
            None => p.push(0),
        }
        p.extend_from_slice(&[42, 0, 0, 0, 0, 0, 0, 0]);
        p
    }

    #[test]
    fn an_execute_that_carries_its_types_names_them() {
        let types = [8, 0, 253, 0];
        let p = execute(Some(&types));
        let found = Types::of(&p, 2).unwrap().unwrap();
        assert_eq!(found.sent, Some(&types[..]));
        assert_eq!(statement_id(&p), Some(7));
    }

    #[test]
    fn types_added_to_an_execute_make_the_one_that_carried_them() {
        let types = [8, 0, 253, 0];
        let without = execute(None);
        let found = Types::of(&without, 2).unwrap().unwrap();
        assert_eq!(found.sent, None);
        let mut rewritten = Vec::new();
        found.put_with(&mut rewritten, &without, 9, &types);
        let mut expected = execute(Some(&types));
        expected[1] = 9;
        assert_eq!(rewritten, expected);
        // The execute's `new_params_bound` byte is there either way, as are the bulk's flags.
        assert_eq!(rewritten.len(), without.len() + types.len());
    }

    #[test]
    fn a_bulk_execute_gets_the_types_flag_with_its_types() {
        let types = [3, 0];
        let without = vec![COM_STMT_BULK_EXECUTE, 7, 0, 0, 0, 64, 0, 0, 5, 0, 0, 0];
        let found = Types::of(&without, 1).unwrap().unwrap();
        assert_eq!(found.sent, None);
        let mut rewritten = Vec::new();
        found.put_with(&mut rewritten, &without, 2, &types);
        let expected = vec![
            COM_STMT_BULK_EXECUTE,
            2,
            0,
            0,
            0,
            192,
            0,
            3,
            0,
            0,
            5,
            0,
            0,
            0,
        ];
        assert_eq!(rewritten, expected);
        // The execute's `new_params_bound` byte is there either way, as are the bulk's flags.
        assert_eq!(rewritten.len(), without.len() + types.len());
        let again = Types::of(&expected, 1).unwrap().unwrap();
        assert_eq!(again.sent, Some(&types[..]));
    }

    #[test]
    fn commands_without_parameters_or_types_have_none() {
        assert_eq!(Types::of(&execute(None), 0).unwrap(), None);
        assert_eq!(Types::of(&[COM_STMT_CLOSE, 1, 0, 0, 0], 3).unwrap(), None);
    }

    #[test]
    fn a_truncated_execute_is_an_error() {
        let p = execute(Some(&[8, 0, 253, 0]));
        assert!(Types::of(&p[..12], 2).is_err());
        assert!(Types::of(&p[..9], 2).is_err());
    }

    #[test]
    fn a_command_renumbered_keeps_the_rest() {
        let mut out = Vec::new();
        put_with_id(&mut out, &[0x1A, 1, 0, 0, 0], 0x0102_0304);
        assert_eq!(out, [0x1A, 4, 3, 2, 1]);
        let ok = [0, 5, 0, 0, 0, 2, 0, 3, 0, 0, 0, 0];
        assert_eq!(
            PrepareOk::parse(&ok).unwrap(),
            PrepareOk { id: 5, params: 3 }
        );
        assert!(PrepareOk::parse(&ok[..6]).is_err());
    }
}
