//! Reading the last number a model wrote in its text ("-1,234.5", ".5",
//! "3.5e2", "1e-3", "−7" with a Unicode minus, "42%"): one reader for
//! every layer that judges answers (eval's checks, vote's `number`).

/// A number as written: its sign and its digits without thousands
/// separators (`1234.5`, `.5`, `3.5e2`), always valid `f64` syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub negative: bool,
    pub digits: String,
}

impl Written {
    /// Its value (`±inf` past `f64`'s range).
    pub fn value(&self) -> Option<f64> {
        let x = self.digits.parse::<f64>().ok()?;
        Some(if self.negative { -x } else { x })
    }
}

/// The last number in `text`; `None` when it has none. A `-` or `−` right
/// before it is its sign unless a letter or digit comes before that
/// (`3-5` is 5); `1,234` groups are one number, `1,2,3` three; a full stop
/// after the digits (`2.`) is not a decimal point.
pub fn last_number(text: &str) -> Option<Written> {
    let bytes = text.as_bytes();
    let mut last = None;
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i].is_ascii_digit()
            || (bytes[i] == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit));
        if !starts {
            i += 1;
            continue;
        }
        let (end, digits) = number_at(bytes, i);
        let negative = text[..i]
            .strip_suffix(['-', '\u{2212}'])
            .is_some_and(|before| {
                !before
                    .chars()
                    .next_back()
                    .is_some_and(char::is_alphanumeric)
            });
        last = Some(Written { negative, digits });
        i = end;
    }
    last
}

/// The number starting at `i` (a digit, or a '.' before one): where it
/// ends and its digits without thousands separators.
fn number_at(bytes: &[u8], i: usize) -> (usize, String) {
    let digits_from = |mut j: usize| {
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    let mut out = String::new();
    let mut j = digits_from(i);
    push(&mut out, bytes, i, j);
    // "1,234,567": groups of exactly three after a lead of one to three.
    if (1..=3).contains(&(j - i)) {
        while bytes.get(j) == Some(&b',') {
            let end = digits_from(j + 1);
            if end - (j + 1) != 3 {
                break;
            }
            push(&mut out, bytes, j + 1, end);
            j = end;
        }
    }
    if bytes.get(j) == Some(&b'.') && bytes.get(j + 1).is_some_and(u8::is_ascii_digit) {
        let end = digits_from(j + 1);
        push(&mut out, bytes, j, end);
        j = end;
    }
    if matches!(bytes.get(j), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(j + 1), Some(b'+' | b'-')));
        let end = digits_from(j + 1 + sign);
        if end > j + 1 + sign {
            push(&mut out, bytes, j, end);
            j = end;
        }
    }
    (j, out)
}

fn push(out: &mut String, bytes: &[u8], from: usize, to: usize) {
    out.extend(bytes[from..to].iter().map(|&b| char::from(b)));
}
