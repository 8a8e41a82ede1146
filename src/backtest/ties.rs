//! Where a sorted cross-section has ties, as one bit per position.
//!
//! Why: the scorer needs the ties of each sorted signal row four times (the distinct
//! count, the rank IC's average ranks, the long leg's threshold group and the run lengths
//! behind Σ (rank − mid)²). Walking the row comparing neighbours each time was a branch
//! per stock at every run's end; one pass of compares into a bitset, then word-at-a-time
//! bit scans, visits only the runs that exist (most rows have none or a few).

/// Bit `j` (1 ≤ j < n) is set when sorted item `j` equals item `j − 1`; bit `n` and every
/// bit above it are clear, so each run of ties ends inside the set.
#[derive(Default)]
pub struct TieBits {
    words: Vec<u64>,
    n: usize,
    /// Set bits: the items that repeat their predecessor.
    repeats: usize,
}

impl TieBits {
    /// The ties of `sorted` (ascending by key; equal keys are ties).
    pub fn of(&mut self, sorted: &[(u64, u32)]) {
        let n = sorted.len();
        self.n = n;
        self.words.clear();
        self.words.resize(n / 64 + 1, 0);
        #[cfg(target_arch = "x86_64")]
        if crate::expr::kernels::simd::avx512_popcnt() {
            // SAFETY: the CPU supports AVX-512F and POPCNT (checked just above); `words` holds
            // n / 64 + 1 words.
            self.repeats = unsafe { avx512::bits(sorted, &mut self.words) };
            return;
        }
        self.repeats = portable_bits(sorted, &mut self.words);
    }

    /// Items that repeat their predecessor (`n` less the distinct values).
    pub fn repeats(&self) -> usize {
        self.repeats
    }

    fn bit(&self, j: usize) -> bool {
        self.words[j / 64] >> (j % 64) & 1 == 1
    }

    /// The first position at or after `from` whose bit is set, if any (below n).
    fn next_set(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut word = *self.words.get(w)? & (!0u64 << (from % 64));
        while word == 0 {
            w += 1;
            word = *self.words.get(w)?;
        }
        Some(64 * w + word.trailing_zeros() as usize)
    }

    /// The first position at or after `from` whose bit is clear (at most n).
    fn next_clear(&self, from: usize) -> usize {
        let mut w = from / 64;
        let Some(&first) = self.words.get(w) else { return self.n };
        let mut word = !first & (!0u64 << (from % 64));
        while word == 0 {
            w += 1;
            match self.words.get(w) {
                Some(&x) => word = !x,
                None => return self.n,
            }
        }
        (64 * w + word.trailing_zeros() as usize).min(self.n)
    }

    /// Calls `f(i, j)` for each run `i..j` of two or more tied items, in order.
    pub fn runs(&self, mut f: impl FnMut(usize, usize)) {
        let mut from = 1;
        while let Some(b) = self.next_set(from) {
            let j = self.next_clear(b);
            f(b - 1, j);
            from = j + 1;
        }
    }

    /// The run of ties holding position `p` (< n): `i..j` with `i ≤ p < j`.
    pub fn run_at(&self, p: usize) -> (usize, usize) {
        let mut i = p;
        // Runs are short: step down while the position repeats its predecessor.
        while i > 0 && self.bit(i) {
            i -= 1;
        }
        (i, self.next_clear(p + 1))
    }
}

/// [`TieBits::of`]'s bits one item at a time (where the CPU lacks AVX-512); returns the
/// count of set bits. `words` holds `sorted.len() / 64 + 1` words.
fn portable_bits(sorted: &[(u64, u32)], words: &mut [u64]) -> usize {
    let n = sorted.len();
    let mut repeats = 0;
    for (w, word) in words.iter_mut().enumerate() {
        let (lo, hi) = ((64 * w).max(1), (64 * w + 64).min(n));
        let mut bits = 0u64;
        for j in lo..hi {
            bits |= u64::from(sorted[j].0 == sorted[j - 1].0) << (j % 64);
        }
        repeats += bits.count_ones() as usize;
        *word = bits;
    }
    repeats
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::expr::kernels::simd::tail8;
    use std::arch::x86_64::*;

    /// [`TieBits::of`](super::TieBits::of)'s bits, eight items per compare: each item's
    /// key against the one before it. Returns the count of set bits.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and POPCNT, and `words` must hold at least
    /// `sorted.len() / 64 + 1` words (cleared).
    #[target_feature(enable = "avx512f,popcnt")]
    pub unsafe fn bits(sorted: &[(u64, u32)], words: &mut [u64]) -> usize {
        let n = sorted.len();
        assert!(words.len() > n / 64, "a word per 64 items and one more");
        // An item is 16 bytes: its key in the first 8 (the rest, index and padding, is
        // never read: masked off).
        let p = sorted.as_ptr().cast::<i64>();
        let keys_of = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
        let mut prev = _mm512_setzero_si512();
        let mut repeats = 0;
        // Eight blocks of eight items per word, gathered in a register.
        for (w, word) in words.iter_mut().enumerate().take(n.div_ceil(64)) {
            let mut bits = 0u64;
            for q in 8 * w..(8 * w + 8).min(n.div_ceil(8)) {
                let lanes = tail8(n, q);
                // Keys of items 8q .. 8q + 4 in the even lanes of `a`, the next four in `b`.
                let spread = |m: u8| (0..4).fold(0u8, |acc, i| acc | ((m >> i) & 1) << (2 * i));
                // SAFETY: only the keys of items below n are read.
                let (a, b) = unsafe {
                    (
                        _mm512_maskz_loadu_epi64(spread(lanes & 0x0f), p.add(16 * q)),
                        _mm512_maskz_loadu_epi64(spread(lanes >> 4), p.add(16 * q + 8)),
                    )
                };
                let keys = _mm512_permutex2var_epi64(a, keys_of, b);
                // Each key against the one before it: [previous register's last, this one's 0..6].
                let before = _mm512_alignr_epi64::<7>(keys, prev);
                prev = keys;
                bits |= u64::from(_mm512_mask_cmpeq_epu64_mask(lanes, keys, before)) << (8 * (q % 8));
            }
            // (Item 0 has no predecessor.)
            if w == 0 {
                bits &= !1;
            }
            repeats += bits.count_ones() as usize;
            *word = bits;
        }
        repeats
    }
}

#[cfg(test)]
mod tests {
    use super::TieBits;

    /// Rows of a few keys, with runs at the start, the end and across word boundaries.
    fn rows() -> Vec<Vec<(u64, u32)>> {
        let mut out = vec![vec![], vec![(5, 0)], vec![(5, 0), (5, 1)], vec![(1, 0), (2, 1)]];
        let mut state = 7u64;
        for n in [63, 64, 65, 127, 128, 129, 200, 500] {
            for distinct in [2u64, 7, 40, 1000, u64::MAX] {
                let mut keys: Vec<u64> = (0..n)
                    .map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (state >> 33) % distinct.min(1 << 30)
                    })
                    .collect();
                keys.sort_unstable();
                out.push(keys.into_iter().enumerate().map(|(i, k)| (k, i as u32)).collect());
            }
        }
        out
    }

    fn naive_runs(s: &[(u64, u32)]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let mut j = i + 1;
            while j < s.len() && s[j].0 == s[i].0 {
                j += 1;
            }
            out.push((i, j));
            i = j;
        }
        out
    }

    /// The AVX-512 bits equal the portable loop's (which the test above checks where the
    /// CPU lacks AVX-512, and here, on one that has it).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_bits_equal_the_portable_ones() {
        if !crate::expr::kernels::simd::avx512_popcnt() {
            return;
        }
        for row in rows() {
            let mut words = vec![0u64; row.len() / 64 + 1];
            // SAFETY: the CPU has AVX-512F and POPCNT (checked above); words as required.
            let repeats = unsafe { super::avx512::bits(&row, &mut words) };
            let mut want = vec![0u64; row.len() / 64 + 1];
            let want_repeats = super::portable_bits(&row, &mut want);
            assert_eq!(words, want, "{row:?}");
            assert_eq!(repeats, want_repeats);
        }
    }

    #[test]
    fn runs_counts_and_run_at_match_a_neighbour_walk() {
        let mut t = TieBits::default();
        for row in rows() {
            t.of(&row);
            let naive = naive_runs(&row);
            assert_eq!(t.repeats(), row.len() - naive.len(), "{row:?}");
            let mut got = Vec::new();
            t.runs(|i, j| got.push((i, j)));
            let want: Vec<_> = naive.iter().copied().filter(|(i, j)| j - i > 1).collect();
            assert_eq!(got, want, "{row:?}");
            for &(i, j) in &naive {
                for p in i..j {
                    assert_eq!(t.run_at(p), (i, j), "position {p} of {row:?}");
                }
            }
        }
    }
}
