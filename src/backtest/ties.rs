//! Where a sorted cross-section has ties, as one bit per position.
//!
//! Why: the scorer needs the ties of each sorted signal row four times (the distinct
//! count, the rank IC's average ranks, the long leg's threshold group and the run lengths
//! behind Σ (rank − mid)²). Walking the row comparing neighbours each time was a branch
//! per stock at every run's end; the bits (set by the sort, which knows where ties can be:
//! `SortBuf::sort_finite_order`) and word-at-a-time bit scans visit only the runs that
//! exist (most rows have none or a few).

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
    /// Ties of at most `cap` sorted items given by `fill`, which gets `cap / 64 + 1`
    /// cleared words, sets bit j (1 ≤ j < n) where item j equals item j − 1, and returns
    /// n, the items, and how many bits it set.
    pub fn fill(&mut self, cap: usize, fill: impl FnOnce(&mut [u64]) -> (usize, usize)) {
        self.words.clear();
        self.words.resize(cap / 64 + 1, 0);
        (self.n, self.repeats) = fill(&mut self.words);
        debug_assert!(self.n <= cap);
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

#[cfg(test)]
mod tests {
    use super::TieBits;
    use crate::expr::kernels::cross::neighbour_bits;

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

    #[test]
    fn runs_counts_and_run_at_match_a_neighbour_walk() {
        let mut t = TieBits::default();
        for row in rows() {
            t.fill(row.len(), |words| (row.len(), neighbour_bits(words, row.len(), |j| row[j].0 == row[j - 1].0)));
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
