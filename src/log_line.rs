//! [`OneLine`]: stderr for the text log format, where every event stays
//! one line. Upstream text (an error message), a client's model name or a
//! config value may hold line breaks and other control characters; in a
//! log line they would start what reads as a new, forged event, or drive
//! the terminal. The writer escapes them as the JSON format does: a line
//! break becomes `\n` or `\r`, another control character `\u{..}`
//! (ESC is kept when the log is coloured: the colours are made of it).
//!
//! tracing's fmt layer writes each event, formatted whole, in one call,
//! so only the newline that ends it is written as a newline.

use std::borrow::Cow;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Makes the writers of [`OneLine`] log lines.
#[derive(Debug, Clone, Copy)]
pub struct OneLine {
    /// The log is coloured (ANSI escapes are the formatter's own).
    pub ansi: bool,
}

impl<'a> MakeWriter<'a> for OneLine {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter { ansi: self.ansi }
    }
}

/// Writes one formatted event to stderr, escaped.
pub struct LineWriter {
    ansi: bool,
}

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stderr().lock().write_all(&escape(buf, self.ansi))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

fn needs_escape(b: u8, ansi: bool) -> bool {
    (b < 0x20 && b != b'\t' && !(ansi && b == 0x1b)) || b == 0x7f
}

/// `line` with its control characters escaped, but for one newline at
/// its end. C1 controls (U+0080 to U+009F) are escaped too.
pub fn escape(line: &[u8], ansi: bool) -> Cow<'_, [u8]> {
    let (body, end) = match line.strip_suffix(b"\n") {
        Some(b) => (b, &b"\n"[..]),
        None => (line, &b""[..]),
    };
    let c1 =
        |i: usize| body[i] == 0xc2 && body.get(i + 1).is_some_and(|b| (0x80..0xa0).contains(b));
    if !(0..body.len()).any(|i| needs_escape(body[i], ansi) || c1(i)) {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ if needs_escape(b, ansi) => {
                out.extend_from_slice(format!("\\u{{{b:02x}}}").as_bytes())
            }
            _ if c1(i) => {
                out.extend_from_slice(format!("\\u{{{:02x}}}", body[i + 1]).as_bytes());
                i += 1;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    out.extend_from_slice(end);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_stays_one_line() {
        let line = b"WARN request failed error=upstream said: boom\r\n2025 INFO forged\n";
        assert_eq!(
            &*escape(line, false),
            &b"WARN request failed error=upstream said: boom\\r\\n2025 INFO forged\n"[..]
        );
        assert!(matches!(escape(b"plain\ttext\n", false), Cow::Borrowed(_)));
        assert_eq!(
            &*escape(b"bell\x07 del\x7f\n", false),
            &b"bell\\u{07} del\\u{7f}\n"[..]
        );
        assert_eq!(
            &*escape("csi \u{9b}2J é\n".as_bytes(), false),
            "csi \\u{9b}2J é\n".as_bytes()
        );
        // Colours are the formatter's; without them ESC is escaped.
        assert!(matches!(
            escape(b"\x1b[2mdim\x1b[0m\n", true),
            Cow::Borrowed(_)
        ));
        assert_eq!(&*escape(b"\x1b[2J\n", false), &b"\\u{1b}[2J\n"[..]);
    }
}
