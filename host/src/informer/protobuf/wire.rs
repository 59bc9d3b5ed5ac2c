//! The protobuf wire format, read without copying: a message is a run of (field number, value)
//! pairs, and every length-delimited value is a slice of the input.
//!
//! Only what Kubernetes' generated messages use is read: varints, 64- and 32-bit fixed values
//! (skipped: no field we convert has them) and length-delimited values. Groups, deprecated since
//! proto2, are refused.

/// Why bytes are not a readable protobuf message. Small and `Copy`: a field is read millions of
/// times in a sync, and a large error type would be moved and dropped with every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes end inside a field.
    #[error("truncated protobuf message")]
    Truncated,
    /// A varint longer than ten bytes.
    #[error("malformed protobuf varint")]
    BadVarint,
    /// A tag with field number 0 or a wire type Kubernetes never uses.
    #[error("malformed protobuf tag {0}")]
    BadTag(u64),
    /// A string that is not UTF-8.
    #[error("a string field is not UTF-8")]
    NotUtf8,
}

use WireError as Error;

/// One field's value as it sits on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Value<'a> {
    /// Wire type 0: ints, bools and enums.
    Varint(u64),
    /// Wire type 2: strings, bytes, messages, map entries.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5, which no converted field uses: read past, never interpreted.
    Fixed,
}

/// The fields of one message, in wire order.
#[derive(Debug, Clone)]
pub(super) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(super) fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, Error> {
        // Tags and most lengths are one byte.
        if let Some((&byte, rest)) = self.rest.split_first()
            && byte < 0x80
        {
            self.rest = rest;
            return Ok(u64::from(byte));
        }
        let mut value = 0u64;
        for i in 0..10 {
            let (&byte, rest) = self.rest.split_first().ok_or(Error::Truncated)?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::BadVarint)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let n = usize::try_from(n).map_err(|_| Error::Truncated)?;
        if n > self.rest.len() {
            return Err(Error::Truncated);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = (|| {
            let tag = self.varint()?;
            let number = u32::try_from(tag >> 3).map_err(|_| Error::BadTag(tag))?;
            if number == 0 {
                return Err(Error::BadTag(tag));
            }
            let value = match tag & 7 {
                0 => Value::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Value::Fixed
                }
                2 => {
                    let len = self.varint()?;
                    Value::Bytes(self.take(len)?)
                }
                5 => {
                    self.take(4)?;
                    Value::Fixed
                }
                _ => return Err(Error::BadTag(tag)),
            };
            Ok((number, value))
        })();
        if field.is_err() {
            // One error ends the message: what follows a bad tag cannot be framed.
            self.rest = &[];
        }
        Some(field)
    }
}

/// A string field's text. Kubernetes strings are UTF-8; anything else is an error rather than a
/// lossy guess, so the reflector falls back to JSON, where the server does the replacing.
pub(super) fn text(bytes: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(bytes).map_err(|_| Error::NotUtf8)
}

#[cfg(test)]
pub(crate) mod encode {
    //! Writing the wire format, for tests: what the API server would send.

    pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// Field `n` as a varint.
    pub(crate) fn int(out: &mut Vec<u8>, n: u32, v: u64) {
        varint(out, u64::from(n) << 3);
        varint(out, v);
    }

    /// Field `n` as length-delimited bytes.
    pub(crate) fn bytes(out: &mut Vec<u8>, n: u32, v: &[u8]) {
        varint(out, (u64::from(n) << 3) | 2);
        varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }

    /// A map entry `{1: key, 2: value}` as field `n`.
    pub(crate) fn entry(out: &mut Vec<u8>, n: u32, key: &str, value: &[u8]) {
        let mut e = Vec::new();
        bytes(&mut e, 1, key.as_bytes());
        bytes(&mut e, 2, value);
        bytes(out, n, &e);
    }
}

#[cfg(test)]
mod tests {
    use super::encode::*;
    use super::*;

    fn all(bytes: &[u8]) -> Result<Vec<(u32, Value<'_>)>, Error> {
        Fields::new(bytes).collect()
    }

    #[test]
    fn fields_come_in_wire_order_with_their_values() {
        let mut m = Vec::new();
        int(&mut m, 7, 300);
        bytes(&mut m, 1, b"name");
        int(&mut m, 536_870_911, 1);
        assert_eq!(
            all(&m).unwrap(),
            vec![
                (7, Value::Varint(300)),
                (1, Value::Bytes(b"name")),
                (536_870_911, Value::Varint(1)),
            ]
        );
    }

    #[test]
    fn fixed_width_values_are_read_past() {
        let mut m = vec![(3 << 3) | 1];
        m.extend_from_slice(&[0; 8]);
        m.push((4 << 3) | 5);
        m.extend_from_slice(&[0; 4]);
        int(&mut m, 5, 1);
        assert_eq!(
            all(&m).unwrap(),
            vec![(3, Value::Fixed), (4, Value::Fixed), (5, Value::Varint(1))]
        );
    }

    #[test]
    fn a_length_past_the_end_is_truncated_not_a_panic() {
        let mut m = Vec::new();
        varint(&mut m, (1 << 3) | 2);
        varint(&mut m, u64::MAX);
        assert!(matches!(all(&m), Err(Error::Truncated)));
        let mut m = Vec::new();
        bytes(&mut m, 1, b"abcdef");
        m.truncate(5);
        assert!(matches!(all(&m), Err(Error::Truncated)));
    }

    #[test]
    fn an_endless_varint_field_zero_and_groups_are_refused() {
        assert!(matches!(
            all(&[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
            ]),
            Err(Error::BadVarint)
        ));
        assert!(matches!(all(&[0x00, 0x01]), Err(Error::BadTag(0))));
        assert!(matches!(all(&[(1 << 3) | 3]), Err(Error::BadTag(11))));
    }

    #[test]
    fn an_error_ends_the_fields() {
        let mut it = Fields::new(&[0x00, 0x08, 0x01]);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
