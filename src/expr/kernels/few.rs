//! Cross-sections with at most [`FEW`] distinct values: comparisons (0/1), signs,
//! `ts_argmax` and short `ts_rank` results, and the signals built on them (a fifth of
//! the alpha101 set scores such rows; counting them instead of sorting made the batch
//! 2 % faster, measured 2026-11-25 on an AMD EPYC, Zen 4).
//!
//! Exactness: the ranks are those of [`rank_row`](super::cross::rank_row) bit for bit
//! (a tie group's rank is computed by the same expression from the same counts), and a
//! row is counted only when its distinct values are found exactly, by order key.
//!
//! Layout: one date's cross-section, contiguous (the `cross` kernels' date-major copy);
//! the distinct values and their counts sit in a few registers.
//!
//! Why: the sorting network costs the same whatever the data, yet the order of such a row
//! is known from a count per value: the values ascending, the cells of each value in index
//! order. Finding and counting the values is a few vector compares per eight cells, and
//! [`Distinct::of`] gives up as soon as a ninth value turns up, which on an untied row is
//! within its first two vectors.

use super::netsort::order_key;

/// The most distinct values a row may have for this path.
pub const FEW: usize = 8;

/// The distinct finite values of a row, ascending, and how many cells hold each.
pub struct Distinct {
    vals: [f64; FEW],
    counts: [u32; FEW],
    d: usize,
}

impl Distinct {
    /// The distinct finite values of `row` (−0.0 and 0.0 alike), or None where it has more
    /// than [`FEW`] or the CPU has no AVX-512.
    pub fn of(row: &[f64]) -> Option<Distinct> {
        #[cfg(target_arch = "x86_64")]
        if super::netsort::available() {
            // SAFETY: the CPU has AVX-512F and POPCNT (both checked by `available`).
            return unsafe { avx512::distinct(row) };
        }
        let _ = row;
        None
    }

    /// Finite cells.
    pub fn finite(&self) -> usize {
        self.counts[..self.d].iter().map(|&c| c as usize).sum()
    }

    /// The ties of the sorted cells ([`sorted`](Self::sorted)): sets bit j of `words`
    /// (cleared, at least `finite() / 64 + 1` of them) for every position j but each
    /// value's first, and returns how many it set.
    pub fn tie_bits(&self, words: &mut [u64]) -> usize {
        let n = self.finite();
        for (w, word) in words.iter_mut().enumerate().take(n.div_ceil(64)) {
            let upto = (n - 64 * w).min(64);
            *word = if upto == 64 { !0 } else { (1 << upto) - 1 };
        }
        let mut start = 0;
        for &c in &self.counts[..self.d] {
            words[start / 64] &= !(1 << (start % 64));
            start += c as usize;
        }
        n - self.d
    }

    /// Percentile ranks, ties averaged (as the cross-sectional `rank_row`): every
    /// cell of `out` is written, NaN where `row` is not finite.
    pub fn ranks(&self, row: &[f64], out: &mut [f64]) {
        assert_eq!(row.len(), out.len(), "few::ranks: row and output differ in length");
        // The run of value s spans sorted positions start..end: rank (start + 1 + end) / 2
        // over n, the expression of the sorting route (so the same bits).
        let n = self.finite() as f64;
        let mut r = [f64::NAN; FEW];
        let mut start = 0u32;
        for (r, &c) in r.iter_mut().zip(&self.counts[..self.d]) {
            let end = start + c;
            *r = (start + 1 + end) as f64 / 2.0 / n;
            start = end;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a Distinct exists only where the CPU has AVX-512F and POPCNT (see `of`).
        unsafe {
            avx512::ranks(&self.vals[..self.d], &r, row, out)
        }
    }

    /// The finite cells of `row` as (order key, index) pairs, ascending, ties by index (as
    /// the cross-sectional `SortBuf::sort_finite`).
    pub fn sorted(&self, row: &[f64], out: &mut Vec<(u64, u32)>) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a Distinct exists only where the CPU has AVX-512F and POPCNT (see `of`).
        unsafe {
            avx512::sorted(&self.vals[..self.d], self.finite(), row, out)
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (row, out);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{order_key, Distinct, FEW};
    use std::arch::x86_64::*;

    /// Cells 8q .. 8q + 8 of `row` (zero past its end) and the mask of those inside it.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(row: &[f64], q: usize) -> (__m512d, __mmask8) {
        let m = crate::expr::kernels::simd::tail8(row.len(), q);
        // SAFETY: only the lanes inside `row` are read.
        (unsafe { _mm512_maskz_loadu_pd(m, row.as_ptr().add(8 * q)) }, m)
    }

    /// Lanes of `v` equal to `x` among `m` (an ordered compare: NaN equals nothing).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn eq(m: __mmask8, v: __m512d, x: __m512d) -> __mmask8 {
        _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>(m, v, x)
    }

    #[target_feature(enable = "avx512f,popcnt")]
    pub fn distinct(row: &[f64]) -> Option<Distinct> {
        let mut t = Distinct { vals: [0.0; FEW], counts: [0; FEW], d: 0 };
        let mut reg = [_mm512_setzero_pd(); FEW];
        for q in 0..row.len().div_ceil(8) {
            let (v, m) = load(row, q);
            // v − v is 0 for a finite v, NaN for an infinity or NaN.
            let mut left = eq(m, _mm512_sub_pd(v, v), _mm512_setzero_pd());
            for (c, &x) in t.counts.iter_mut().zip(&reg).take(t.d) {
                let e = eq(left, v, x);
                *c += e.count_ones();
                left &= !e;
            }
            // A value not seen before: the first of them joins the table.
            while left != 0 {
                if t.d == FEW {
                    return None;
                }
                let x = row[8 * q + left.trailing_zeros() as usize];
                reg[t.d] = _mm512_set1_pd(x);
                let e = eq(left, v, reg[t.d]);
                (t.vals[t.d], t.counts[t.d]) = (x, e.count_ones());
                left &= !e;
                t.d += 1;
            }
        }
        // Ascending (insertion sort of at most eight values, with their counts).
        for i in 1..t.d {
            let mut j = i;
            while j > 0 && order_key(t.vals[j - 1]) > order_key(t.vals[j]) {
                t.vals.swap(j - 1, j);
                t.counts.swap(j - 1, j);
                j -= 1;
            }
        }
        Some(t)
    }

    /// `out[i]` = `ranks[s]` where `row[i]` equals `vals[s]`, else NaN.
    #[target_feature(enable = "avx512f")]
    pub fn ranks(vals: &[f64], ranks: &[f64; FEW], row: &[f64], out: &mut [f64]) {
        let reg: [(__m512d, __m512d); FEW] = std::array::from_fn(|s| (_mm512_set1_pd(vals.get(s).copied().unwrap_or(f64::NAN)), _mm512_set1_pd(ranks[s])));
        for q in 0..row.len().div_ceil(8) {
            let (v, m) = load(row, q);
            let mut o = _mm512_set1_pd(f64::NAN);
            for &(x, r) in &reg[..vals.len()] {
                o = _mm512_mask_mov_pd(o, eq(m, v, x), r);
            }
            // SAFETY: only the lanes inside `out` (as long as `row`, checked by the caller)
            // are written.
            unsafe { _mm512_mask_storeu_pd(out.as_mut_ptr().add(8 * q), m, o) };
        }
    }

    /// For each value in turn, the indices of its cells in order, compressed out of each
    /// vector of eight and written as (key, index) pairs.
    #[target_feature(enable = "avx512f,popcnt")]
    pub fn sorted(vals: &[f64], n: usize, row: &[f64], out: &mut Vec<(u64, u32)>) {
        out.clear();
        // Each vector writes eight pairs from the current position on.
        out.reserve(n + 8);
        let dst = out.as_mut_ptr() as *mut i64;
        let (first, second) = (_mm512_setr_epi64(0, 8, 0, 9, 0, 10, 0, 11), _mm512_setr_epi64(0, 12, 0, 13, 0, 14, 0, 15));
        let mut p = 0usize;
        for &x in vals {
            let (xs, key) = (_mm512_set1_pd(x), _mm512_set1_epi64(order_key(x) as i64));
            let mut ix = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
            for q in 0..row.len().div_ceil(8) {
                let (v, m) = load(row, q);
                let e = eq(m, v, xs);
                let c = _mm512_maskz_compress_epi64(e, ix);
                // SAFETY: p counts the pairs written so far (at most n − |e|), so the
                // eight pairs from p lie within the n + 8 reserved.
                unsafe {
                    _mm512_storeu_si512(dst.add(2 * p).cast(), _mm512_permutex2var_epi64(key, first, c));
                    _mm512_storeu_si512(dst.add(2 * p + 8).cast(), _mm512_permutex2var_epi64(key, second, c));
                }
                p += e.count_ones() as usize;
                ix = _mm512_add_epi64(ix, _mm512_set1_epi64(8));
            }
        }
        debug_assert_eq!(p, n);
        // SAFETY: the loop wrote the n pairs (both lanes of each): every finite cell
        // equals exactly one of the values.
        unsafe { out.set_len(p.min(n)) };
    }
}
