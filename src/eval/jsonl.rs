//! Reading a JSONL file another process may be writing (the gateway's
//! event log) or a kill may have cut (`results.jsonl`): line by line, each
//! line bounded, bytes not assumed to be UTF-8.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Calls `f` with each line of `path` (without its line end) that is at
/// most `max` bytes; longer lines are skipped whole.
pub fn each_line(path: &Path, max: usize, mut f: impl FnMut(&[u8])) -> std::io::Result<()> {
    let mut reader = BufReader::new(File::open(path)?);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
        if (&mut reader).take(limit).read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        let ended = buf.last() == Some(&b'\n');
        if !ended && buf.len() > max {
            skip_line(&mut reader)?;
            continue;
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        f(line.strip_suffix(b"\r").unwrap_or(line));
    }
}

/// Reads past the rest of the current line.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    let mut chunk = Vec::new();
    loop {
        chunk.clear();
        let n = reader
            .by_ref()
            .take(1 << 16)
            .read_until(b'\n', &mut chunk)?;
        if n == 0 || chunk.last() == Some(&b'\n') {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn long_and_cut_lines_are_skipped_and_bytes_are_not_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let long = "x".repeat(100);
        let text = [b"a\n".as_slice(), long.as_bytes(), b"\nb\xff\r\nc"].concat();
        std::fs::write(&path, text).unwrap();
        let mut seen = Vec::new();
        each_line(&path, 10, |l| seen.push(l.to_vec())).unwrap();
        assert_eq!(seen, [b"a".to_vec(), b"b\xff".to_vec(), b"c".to_vec()]);
    }
}
