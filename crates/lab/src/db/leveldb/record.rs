//! A YCSB record as one LevelDB value: `varint(field count)`, then per field
//! `varint(length)` and its bytes, fields in order (field i is YCSB's `field{i}`). Varints are
//! LEB128 (LevelDB's own encoding for lengths): 1 byte up to 127, 2 up to 16383, so a
//! default record of ten 100-byte fields costs 11 bytes over its data. Field names are not
//! stored: they follow from the position.

use std::io;

use integer_encoding::VarInt;

/// The value holding `fields`.
pub fn encode<F: AsRef<[u8]>>(fields: &[F]) -> Vec<u8> {
    let data: usize = fields.iter().map(|f| f.as_ref().len() + 2).sum();
    let mut out = Vec::with_capacity(data + 2);
    put_varint(&mut out, fields.len());
    for f in fields {
        put_varint(&mut out, f.as_ref().len());
        out.extend_from_slice(f.as_ref());
    }
    out
}

/// Every field of a stored value.
pub fn decode(value: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    let mut r = Reader { rest: value };
    let count = r.varint()?;
    // Each field takes at least one byte, so a larger count is damage, not a huge record.
    if count > r.rest.len() {
        return Err(damaged("field count beyond the value's length"));
    }
    let fields = (0..count)
        .map(|_| r.field().map(<[u8]>::to_vec))
        .collect::<io::Result<Vec<_>>>()?;
    r.finish()?;
    Ok(fields)
}

/// Field `i` of a stored value, without copying the others; `InvalidInput` if the record
/// has no field `i`.
pub fn field(value: &[u8], i: usize) -> io::Result<Vec<u8>> {
    let mut r = Reader { rest: value };
    let count = r.varint()?;
    if i >= count {
        return Err(no_such_field(i, count));
    }
    for _ in 0..i {
        r.field()?;
    }
    Ok(r.field()?.to_vec())
}

/// The error for field `i` of a record with `count` fields.
pub fn no_such_field(i: usize, count: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("field{i} requested of a record with {count} fields"),
    )
}

fn put_varint(out: &mut Vec<u8>, n: usize) {
    let mut buf = [0u8; 10];
    let len = (n as u64).encode_var(&mut buf);
    out.extend_from_slice(&buf[..len]);
}

fn damaged(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("stored record is damaged: {what}"),
    )
}

/// A cursor over a value being decoded.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> io::Result<usize> {
        let (n, len) = u64::decode_var(self.rest).ok_or_else(|| damaged("truncated length"))?;
        self.rest = &self.rest[len..];
        usize::try_from(n).map_err(|_| damaged("length out of range"))
    }

    fn field(&mut self) -> io::Result<&'a [u8]> {
        let len = self.varint()?;
        if len > self.rest.len() {
            return Err(damaged("field longer than the value"));
        }
        let (f, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(f)
    }

    fn finish(&self) -> io::Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(damaged("bytes after the last field"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_with_compact_lengths() {
        let fields = vec![b"a".to_vec(), Vec::new(), vec![7u8; 200], vec![0u8; 100]];
        let v = encode(&fields);
        // count 1 + (1+1) + (1+0) + (2+200) + (1+100)
        assert_eq!(v.len(), 1 + 2 + 1 + 202 + 101);
        assert_eq!(decode(&v).unwrap(), fields);
        for (i, f) in fields.iter().enumerate() {
            assert_eq!(&field(&v, i).unwrap(), f);
        }
        assert_eq!(
            field(&v, 4).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            decode(&encode::<Vec<u8>>(&[])).unwrap(),
            Vec::<Vec<u8>>::new()
        );
    }

    #[test]
    fn damaged_values_are_refused() {
        let v = encode(&[b"hello".to_vec(), b"world".to_vec()]);
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),                      // no count
            vec![0x80],                      // truncated varint
            v[..v.len() - 1].to_vec(),       // short last field
            [v.clone(), vec![0]].concat(),   // trailing byte
            vec![0xff, 0xff, 0xff, 0xff, 1], // absurd count
        ];
        for (i, bad) in cases.iter().enumerate() {
            let e = decode(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "case {i}: {e}");
        }
        assert_eq!(
            field(&v[..4], 1).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
