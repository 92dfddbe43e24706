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
//!
//! [`Throttle`]: how often one kind of line is written, for lines that
//! every request of an outage would write (a refused request, a response
//! not stored): the first at once, then at most one per period, saying
//! how many were held back.

use std::borrow::Cow;
use std::io::{self, Write};

use parking_lot::Mutex;
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

/// At most one line of a kind per period (see the module docs).
pub struct Throttle {
    every: std::time::Duration,
    /// When the last line was written, and the lines held back since.
    state: Mutex<(Option<tokio::time::Instant>, u64)>,
}

impl Throttle {
    /// At most one line per `every`.
    pub const fn new(every: std::time::Duration) -> Self {
        Throttle {
            every,
            state: parking_lot::const_mutex((None, 0)),
        }
    }

    /// `Some(held back)` when a line may be written now (how many were
    /// held back since the last one), `None` when this one is held back.
    pub fn allow(&self) -> Option<u64> {
        let now = tokio::time::Instant::now();
        let mut s = self.state.lock();
        match s.0 {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                s.1 = s.1.saturating_add(1);
                None
            }
            _ => {
                s.0 = Some(now);
                Some(std::mem::take(&mut s.1))
            }
        }
    }
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

    #[tokio::test(start_paused = true)]
    async fn a_throttle_writes_the_first_line_then_one_per_period_with_the_count() {
        let t = Throttle::new(std::time::Duration::from_secs(10));
        assert_eq!(t.allow(), Some(0));
        for _ in 0..555 {
            assert_eq!(t.allow(), None);
        }
        tokio::time::advance(std::time::Duration::from_secs(9)).await;
        assert_eq!(t.allow(), None);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(t.allow(), Some(556));
        assert_eq!(t.allow(), None);
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        assert_eq!(t.allow(), Some(1));
    }
}
