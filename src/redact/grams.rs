//! [`Grams`]: where in a text a run of secret may be, found by sampling.
//!
//! Any run that counts (at least [`MIN_RUN`](super::patterns::MIN_RUN)
//! bytes, and any run of 7 or more) holds the 4 bytes at some offset of
//! the text that is a multiple of 4. So the text is
//! read 4 bytes at a time: each piece (ASCII lower-cased) is tested
//! against a bit set of every 4-byte piece of every source (one hashed bit
//! per piece; about 1 innocent piece in 64 gets past it), then looked up
//! for the places in the sources it occurs at. A text costs about one bit
//! test per 4 bytes; only a real piece of a secret costs more.

use std::collections::HashMap;

use super::patterns::Source;

/// Where a piece occurs: in which source, at which offset.
#[derive(Clone, Copy)]
pub struct Place {
    pub source: u32,
    pub offset: u32,
}

/// Bit-set bits per piece of the sources: the chance an innocent piece
/// gets past the bit set is about 1 in this.
const BITS_PER_PIECE: usize = 64;

pub struct Grams {
    /// A power of two of bits.
    bits: Vec<u64>,
    /// 32 less the bits of a bit's index.
    shift: u32,
    places: HashMap<u32, Vec<Place>>,
}

/// 4 bytes as one number, ASCII letters lower-cased.
fn piece(b: [u8; 4]) -> u32 {
    let x = u32::from_le_bytes(b);
    // Bytes from 'A' to 'Z' get 0x20 added (SWAR: each byte on its own).
    let low7 = x & 0x7f7f_7f7f;
    let ge_a = low7.wrapping_add(0x3f3f_3f3f); // high bit: byte >= 'A'
    let gt_z = low7.wrapping_add(0x2525_2525); // high bit: byte > 'Z'
    let upper = ge_a & !gt_z & !x & 0x8080_8080;
    x | (upper >> 2)
}

impl Grams {
    pub fn new(sources: &[Source]) -> Grams {
        let pieces: usize = sources
            .iter()
            .map(|s| s.bytes.len().saturating_sub(3))
            .sum();
        let len = (pieces * BITS_PER_PIECE)
            .next_power_of_two()
            .clamp(1 << 16, 1 << 24);
        let mut g = Grams {
            bits: vec![0; len / 64],
            shift: 32 - len.trailing_zeros(),
            places: HashMap::new(),
        };
        for (s, src) in sources.iter().enumerate() {
            for (offset, w) in src.bytes.windows(4).enumerate() {
                let p = piece([w[0], w[1], w[2], w[3]]);
                let i = g.slot(p);
                g.bits[i / 64] |= 1 << (i % 64);
                g.places.entry(p).or_default().push(Place {
                    source: u32::try_from(s).unwrap_or(u32::MAX),
                    offset: u32::try_from(offset).unwrap_or(u32::MAX),
                });
            }
        }
        g
    }

    fn slot(&self, piece: u32) -> usize {
        (piece.wrapping_mul(0x9E37_79B1) >> self.shift) as usize
    }

    /// The offsets of `text` (multiples of 4) whose 4 bytes are a piece of
    /// a source, with where they occur in the sources.
    pub fn hits<'t>(&'t self, text: &'t [u8]) -> impl Iterator<Item = (usize, &'t [Place])> + 't {
        text.chunks_exact(4).enumerate().filter_map(move |(i, c)| {
            let p = piece([c[0], c[1], c[2], c[3]]);
            let b = self.slot(p);
            if self.bits[b / 64] & (1 << (b % 64)) == 0 {
                return None;
            }
            self.places.get(&p).map(|v| (i * 4, &v[..]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::piece;

    #[test]
    fn pieces_are_lower_cased_letters_only() {
        for b in 0..=255u8 {
            let want = u32::from_le_bytes([b.to_ascii_lowercase(), b'Q' + 32, 0xC3, b'@']);
            assert_eq!(piece([b, b'Q', 0xC3, b'@']), want, "byte {b:#x}");
        }
    }
}
