//! A bounded, incremental Server-Sent Events parser for upstream streams.
//!
//! It yields each event's `data` (data lines joined by `\n`) as [`Bytes`]
//! that share the network buffer when the event has one data line and
//! arrived in one network chunk, which is how OpenAI-compatible servers
//! send chunks: no byte is copied then. A line split across chunks is
//! gathered in a buffer of its own. Every byte is scanned once, whatever
//! the chunking, and nothing an upstream sends can grow it without bound:
//! a line or an event past `max_event` bytes is an error.
//!
//! Lines end in `\n`, `\r\n` or `\r`; comments (`:`) and the `event`, `id`
//! and `retry` fields are skipped; an incomplete event at the end of the
//! stream is dropped, as the SSE specification says.

use bytes::{Buf, Bytes, BytesMut};

/// The upstream sent more than the parser accepts in one line or event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a stream event is larger than {limit} bytes")]
pub struct TooLarge {
    pub limit: usize,
}

pub struct SseParser {
    /// The unread rest of the last network chunk, shared with it.
    shared: Bytes,
    /// A line that spans network chunks, gathered (with what followed it).
    /// While it holds bytes, new chunks are added to it.
    carry: BytesMut,
    /// How far `carry` has been searched for a line end.
    scanned: usize,
    /// The last line ended in `\r`: a `\n` that follows belongs to it.
    skip_lf: bool,
    /// The event's data so far: its first data line shares the buffer;
    /// a second one turns it into an owned copy.
    data: Data,
    max_event: usize,
}

enum Data {
    None,
    One(Bytes),
    Many(BytesMut),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::None => 0,
            Data::One(b) => b.len(),
            Data::Many(b) => b.len(),
        }
    }
}

impl SseParser {
    pub fn new(max_event: usize) -> Self {
        SseParser {
            shared: Bytes::new(),
            carry: BytesMut::new(),
            scanned: 0,
            skip_lf: false,
            data: Data::None,
            max_event,
        }
    }

    /// Adds bytes as they arrive from the network.
    pub fn push(&mut self, chunk: Bytes) {
        if self.carry.is_empty() && self.shared.is_empty() {
            self.shared = chunk;
            return;
        }
        if !self.shared.is_empty() {
            self.carry.extend_from_slice(&self.shared);
            self.shared = Bytes::new();
        }
        self.carry.extend_from_slice(&chunk);
    }

    /// The next complete event's data, `Ok(None)` when more bytes are needed.
    pub fn next_event(&mut self) -> Result<Option<Bytes>, TooLarge> {
        while let Some(line) = self.next_line()? {
            if let Some(event) = self.line(line)? {
                return Ok(Some(event));
            }
        }
        Ok(None)
    }

    /// The next whole line, without its end.
    fn next_line(&mut self) -> Result<Option<Bytes>, TooLarge> {
        if !self.carry.is_empty() {
            return self.carried_line();
        }
        if self.skip_lf && !self.shared.is_empty() {
            if self.shared[0] == b'\n' {
                self.shared.advance(1);
            }
            self.skip_lf = false;
        }
        match memchr::memchr2(b'\n', b'\r', &self.shared) {
            Some(end) => {
                self.skip_lf = self.shared[end] == b'\r';
                let line = self.shared.slice(..end);
                self.shared.advance(end + 1);
                Ok(Some(line))
            }
            None => {
                // The line goes on in the next chunk.
                self.carry.extend_from_slice(&self.shared);
                self.scanned = self.shared.len();
                self.shared = Bytes::new();
                self.check_carry().map(|()| None)
            }
        }
    }

    fn carried_line(&mut self) -> Result<Option<Bytes>, TooLarge> {
        if self.skip_lf {
            if self.carry[0] == b'\n' {
                self.carry.advance(1);
            }
            self.skip_lf = false;
        }
        let from = self.scanned.min(self.carry.len());
        let Some(end) = memchr::memchr2(b'\n', b'\r', &self.carry[from..]).map(|i| i + from) else {
            self.scanned = self.carry.len();
            return self.check_carry().map(|()| None);
        };
        self.skip_lf = self.carry[end] == b'\r';
        let mut line = self.carry.split_to(end + 1);
        self.scanned = 0;
        line.truncate(end);
        Ok(Some(line.freeze()))
    }

    fn check_carry(&mut self) -> Result<(), TooLarge> {
        if self.carry.len() > self.max_event {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> TooLarge {
        TooLarge {
            limit: self.max_event,
        }
    }

    /// Handles one line; returns the event a blank line completes.
    fn line(&mut self, line: Bytes) -> Result<Option<Bytes>, TooLarge> {
        if line.is_empty() {
            return Ok(match std::mem::replace(&mut self.data, Data::None) {
                Data::None => None,
                Data::One(b) => Some(b),
                Data::Many(b) => Some(b.freeze()),
            });
        }
        let (field, value) = match memchr::memchr(b':', &line) {
            Some(0) => return Ok(None),
            Some(i) => {
                let start = if line.get(i + 1) == Some(&b' ') {
                    i + 2
                } else {
                    i + 1
                };
                (&line[..i], line.slice(start..))
            }
            None => (&line[..], Bytes::new()),
        };
        if field != b"data" {
            return Ok(None);
        }
        if self.data.len() + value.len() + 1 > self.max_event {
            self.data = Data::None;
            return Err(self.too_large());
        }
        self.data = match std::mem::replace(&mut self.data, Data::None) {
            Data::None => Data::One(value),
            Data::One(first) => {
                let mut all = BytesMut::with_capacity(first.len() + value.len() + 1);
                all.extend_from_slice(&first);
                all.extend_from_slice(b"\n");
                all.extend_from_slice(&value);
                Data::Many(all)
            }
            Data::Many(mut all) => {
                all.extend_from_slice(b"\n");
                all.extend_from_slice(&value);
                Data::Many(all)
            }
        };
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(input: &[&[u8]], max: usize) -> Result<Vec<String>, TooLarge> {
        let mut p = SseParser::new(max);
        let mut out = Vec::new();
        for part in input {
            p.push(Bytes::copy_from_slice(part));
            while let Some(e) = p.next_event()? {
                out.push(String::from_utf8_lossy(&e).into_owned());
            }
        }
        Ok(out)
    }

    #[test]
    fn reads_the_spec_shapes() {
        let got = events(
            &[
                b"data: a\n\n: comment\nevent: x\nid: 1\ndata:b\ndata:  c\r\n\r\ndata\n\nda",
                b"ta: d\r",
                b"\n\r\n",
            ],
            1024,
        )
        .unwrap();
        assert_eq!(got, vec!["a", "b\n c", "", "d"]);
    }

    #[test]
    fn split_anywhere_gives_the_same_events() {
        let whole: &[u8] = b"data: {\"x\":1}\n\ndata: [DONE]\r\n\r\n";
        let want = events(&[whole], 1024).unwrap();
        for cut in 0..whole.len() {
            let (a, b) = whole.split_at(cut);
            assert_eq!(events(&[a, b], 1024).unwrap(), want, "cut at {cut}");
        }
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let whole: &[u8] =
            b"data: a\r\n\r\ndata: b\ndata: c\r\rdata: {\"x\":1}\n\ndata: [DONE]\n\n";
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        let want = events(&[whole], 1024).unwrap();
        assert_eq!(want, vec!["a", "b\nc", "{\"x\":1}", "[DONE]"]);
        assert_eq!(events(&bytes, 1024).unwrap(), want);
        let threes: Vec<&[u8]> = whole.chunks(3).collect();
        assert_eq!(events(&threes, 1024).unwrap(), want);
    }

    #[test]
    fn a_line_without_end_is_bounded() {
        let big = vec![b'x'; 100];
        assert_eq!(events(&[b"data: ", &big], 64), Err(TooLarge { limit: 64 }));
        let many = b"data: 0123456789\n".repeat(10);
        assert_eq!(events(&[&many], 64), Err(TooLarge { limit: 64 }));
    }

    #[test]
    fn events_without_data_are_not_dispatched() {
        assert!(events(&[b": ping\n\nevent: x\n\n"], 64).unwrap().is_empty());
    }
}
