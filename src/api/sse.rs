//! Server-sent events framing shared by every streamed answer: the
//! keep-alive comment, and an upstream event's data written on one line.

use bytes::{BufMut, BytesMut};

/// A comment line that keeps a quiet stream open.
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// Writes an upstream event's data on one line: the line breaks its
/// `data:` lines were joined with (JSON allows them only between tokens)
/// become spaces, so no part of it starts a line of its own and every
/// client reads it whole.
pub fn put_data_line(out: &mut BytesMut, data: &[u8]) {
    let at = out.len();
    out.put_slice(data);
    if memchr::memchr2(b'\n', b'\r', data).is_some() {
        for b in &mut out[at..] {
            if matches!(*b, b'\n' | b'\r') {
                *b = b' ';
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn data_is_written_on_one_line() {
        let mut out = BytesMut::new();
        put_data_line(&mut out, b"{\"a\": 1,\n\"b\":\r\n2}");
        assert_eq!(&out[..], b"{\"a\": 1, \"b\":  2}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["b"], 2);
        out.clear();
        put_data_line(&mut out, b"{}");
        assert_eq!(&out[..], b"{}");
    }
}
