//! Bounds-checked reading of the MQTT data representations (5.0 §1.5, 3.1.1 §1.5) over a
//! [`Bytes`] buffer, and the matching writers.
//!
//! Every read checks the remaining length first and reports [`DecodeError::Malformed`] when
//! the input is short, so nothing here can panic whatever the input. Binary data is handed out
//! as `Bytes::slice`s of the input (no copy).

use bytes::{BufMut, Bytes};

use crate::DecodeError;

/// Largest value a Variable Byte Integer can hold (5.0 §1.5.5).
pub(crate) const MAX_VBI: u32 = 268_435_455;

/// Parses a Variable Byte Integer at the start of `buf` (5.0 §1.5.5, 3.1.1 §2.2.3).
///
/// Returns `Ok(None)` if `buf` ends before the last byte of the integer, otherwise the value
/// and the number of bytes it took. A continuation bit on the fourth byte, or an encoding
/// longer than needed (its last byte is 0 after a continuation, e.g. `0x80 0x00`), is
/// Malformed: "The encoded value MUST use the minimum number of bytes necessary to represent
/// the value" [MQTT-1.5.5-1].
pub(crate) fn parse_vbi(buf: &[u8]) -> Result<Option<(u32, usize)>, DecodeError> {
    let mut value: u32 = 0;
    for i in 0..4 {
        let Some(&byte) = buf.get(i) else {
            return Ok(None);
        };
        // i <= 3, so the shift is at most 21 and the value stays below 2^28.
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return Err(DecodeError::Malformed(
                    "variable byte integer not in its shortest form",
                ));
            }
            return Ok(Some((value, i + 1)));
        }
    }
    Err(DecodeError::Malformed(
        "variable byte integer longer than four bytes",
    ))
}

/// Number of bytes the Variable Byte Integer encoding of `value` takes.
pub(crate) fn vbi_len(value: usize) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes `value` as a Variable Byte Integer. Values above [`MAX_VBI`] cannot be represented;
/// they are a caller bug (asserted in debug builds) and are written as [`MAX_VBI`] so that the
/// output still has the length [`vbi_len`] promised.
pub(crate) fn put_vbi<B: BufMut>(out: &mut B, value: usize) {
    debug_assert!(
        value <= MAX_VBI as usize,
        "variable byte integer {value} too large"
    );
    let mut v = value.min(MAX_VBI as usize);
    loop {
        // Truncation intended: the low seven bits.
        let mut byte = (v & 0x7f) as u8;
        v >>= 7;
        if v > 0 {
            byte |= 0x80;
        }
        out.put_u8(byte);
        if v == 0 {
            break;
        }
    }
}

/// Writes a two-byte length followed by `data` (UTF-8 string or binary data, 5.0 §1.5.4 and
/// §1.5.6). Data longer than 65,535 bytes cannot be represented; that is a caller bug
/// (asserted in debug builds).
pub(crate) fn put_prefixed<B: BufMut>(out: &mut B, data: &[u8]) {
    debug_assert!(
        data.len() <= usize::from(u16::MAX),
        "string or binary data too long"
    );
    out.put_u16(data.len() as u16);
    out.put_slice(data);
}

/// Checks the rules for a UTF-8 Encoded String beyond valid UTF-8 (which `&str` already
/// guarantees, and which excludes the surrogates U+D800..U+DFFF [MQTT-1.5.4-1]): no U+0000
/// [MQTT-1.5.4-2].
pub(crate) fn check_string(s: &str) -> Result<(), DecodeError> {
    if s.contains('\0') {
        return Err(DecodeError::Malformed("UTF-8 string contains U+0000"));
    }
    Ok(())
}

/// A read position in a packet body.
pub(crate) struct Cursor {
    buf: Bytes,
    pos: usize,
}

impl Cursor {
    pub(crate) fn new(buf: Bytes) -> Cursor {
        Cursor { buf, pos: 0 }
    }

    /// Bytes left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails with Malformed unless everything has been read: trailing bytes after a packet's
    /// last field mean the lengths do not add up.
    pub(crate) fn finish(&self, what: &'static str) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Malformed(what))
        }
    }

    /// The next `n` bytes as a slice of the input buffer.
    pub(crate) fn take(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Malformed("length exceeds the remaining bytes"));
        }
        // No overflow and in bounds: n <= remaining = len - pos.
        let end = self.pos + n;
        let out = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(out)
    }

    /// Everything not yet read.
    pub(crate) fn rest(&mut self) -> Bytes {
        let out = self.buf.slice(self.pos.min(self.buf.len())..);
        self.pos = self.buf.len();
        out
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        self.array().map(|[b]| b)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self
            .pos
            .checked_add(N)
            .ok_or(DecodeError::Malformed("packet ends early"))?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .and_then(|b| <[u8; N]>::try_from(b).ok())
            .ok_or(DecodeError::Malformed("packet ends early"))?;
        self.pos = end;
        Ok(bytes)
    }

    /// Two Byte Integer, big-endian (5.0 §1.5.2).
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_be_bytes)
    }

    /// Four Byte Integer, big-endian (5.0 §1.5.3).
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    /// A Variable Byte Integer (5.0 §1.5.5).
    pub(crate) fn vbi(&mut self) -> Result<u32, DecodeError> {
        let tail = self.buf.get(self.pos..).unwrap_or_default();
        match parse_vbi(tail)? {
            Some((value, len)) => {
                self.pos += len; // len <= tail.len()
                Ok(value)
            }
            None => Err(DecodeError::Malformed(
                "variable byte integer runs past the packet",
            )),
        }
    }

    /// Binary Data: two-byte length then that many bytes (5.0 §1.5.6).
    pub(crate) fn binary(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    /// UTF-8 Encoded String (5.0 §1.5.4, 3.1.1 §1.5.3): valid UTF-8 without U+0000.
    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        let raw = self.binary()?;
        let s = std::str::from_utf8(&raw)
            .map_err(|_| DecodeError::Malformed("string is not valid UTF-8"))?;
        check_string(s)?;
        Ok(s.to_owned())
    }

    /// Splits off the next `n` bytes as a cursor of their own (used for property lists, whose
    /// length is given up front).
    pub(crate) fn sub(&mut self, n: usize) -> Result<Cursor, DecodeError> {
        Ok(Cursor::new(self.take(n)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vbi_bytes(v: usize) -> Vec<u8> {
        let mut out = Vec::new();
        put_vbi(&mut out, v);
        out
    }

    #[test]
    fn vbi_boundaries_round_trip() {
        for v in [
            0,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            MAX_VBI as usize,
        ] {
            let bytes = vbi_bytes(v);
            assert_eq!(bytes.len(), vbi_len(v), "{v}");
            assert_eq!(parse_vbi(&bytes).unwrap(), Some((v as u32, bytes.len())));
        }
        assert_eq!(vbi_bytes(321), [0xc1, 0x02]);
    }

    #[test]
    fn vbi_incomplete_is_none() {
        assert_eq!(parse_vbi(&[]).unwrap(), None);
        assert_eq!(parse_vbi(&[0x80]).unwrap(), None);
        assert_eq!(parse_vbi(&[0xff, 0xff, 0xff]).unwrap(), None);
    }

    #[test]
    fn vbi_fifth_byte_is_malformed() {
        assert!(matches!(
            parse_vbi(&[0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::Malformed(_))
        ));
        assert!(matches!(
            parse_vbi(&[0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn vbi_non_minimal_is_malformed() {
        assert!(matches!(
            parse_vbi(&[0x80, 0x00]),
            Err(DecodeError::Malformed(_))
        ));
        assert!(matches!(
            parse_vbi(&[0x81, 0x80, 0x00]),
            Err(DecodeError::Malformed(_))
        ));
        // 0x80 0x01 = 128 is minimal.
        assert_eq!(parse_vbi(&[0x80, 0x01]).unwrap(), Some((128, 2)));
    }

    #[test]
    fn cursor_reads_are_bounds_checked() {
        let mut c = Cursor::new(Bytes::from_static(&[0x00, 0x05, b'a']));
        assert!(matches!(c.binary(), Err(DecodeError::Malformed(_))));
        let mut c = Cursor::new(Bytes::from_static(&[0x01]));
        assert!(c.u16().is_err());
        let mut c = Cursor::new(Bytes::from_static(&[]));
        assert!(c.u8().is_err());
        assert!(c.vbi().is_err());
        assert!(c.u32().is_err());
        assert!(c.take(1).is_err());
    }

    #[test]
    fn string_rules() {
        let mut c = Cursor::new(Bytes::from_static(&[0x00, 0x02, b'a', 0x00]));
        assert!(matches!(c.string(), Err(DecodeError::Malformed(_))));
        // An encoded surrogate (ED A0 80) is not UTF-8.
        let mut c = Cursor::new(Bytes::from_static(&[0x00, 0x03, 0xed, 0xa0, 0x80]));
        assert!(matches!(c.string(), Err(DecodeError::Malformed(_))));
        let mut c = Cursor::new(Bytes::from_static(&[0x00, 0x02, 0xc3, 0xa9]));
        assert_eq!(c.string().unwrap(), "é");
        assert!(c.finish("x").is_ok());
    }

    #[test]
    fn binary_is_a_slice_of_the_input() {
        let input = Bytes::from_static(&[0x00, 0x02, 1, 2, 9]);
        let mut c = Cursor::new(input.clone());
        let b = c.binary().unwrap();
        assert_eq!(b.as_ptr(), input[2..].as_ptr());
        assert!(matches!(
            c.finish("trailing"),
            Err(DecodeError::Malformed("trailing"))
        ));
    }
}
