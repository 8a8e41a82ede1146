//! Sorting up to [`MAX`] `u64` keys with an AVX-512 bitonic sorting network.
//!
//! Why: every cross-sectional `rank` and every scored date sorts one cross-section of
//! ~500 values, about a million sorts for the alpha101 set, and the radix sort in
//! [`cross`](super::cross) spent a quarter of that job's time in data-dependent scatters.
//! A sorting network has no data-dependent branches or memory accesses: eight keys per
//! instruction, unsigned min/max and lane permutes on registers. The caller packs each
//! value's order key and its index into one `u64` (see `SortBuf::sort_finite`), so a plain
//! key sort is also an arg-sort.

/// The largest slice [`sort`] takes (64 registers of 8 keys).
pub const MAX: usize = 512;

/// Whether [`sort`] runs on this CPU (it needs AVX-512F; checked once and cached by std).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Sorts `v` ascending and returns true; returns false and leaves `v` untouched when
/// `v` is longer than [`MAX`] or the CPU lacks AVX-512.
pub fn sort(v: &mut [u64]) -> bool {
    if v.len() > MAX || !available() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512F (checked above) and `v` fits in 64 registers.
    unsafe {
        avx512::sort(v)
    };
    true
}

/// Writes the finite values of `row` (at most [`MAX`]) to the front of `out` as packed
/// keys, `order_key(x)` with its low 9 bits replaced by the value's index, and returns
/// how many there are; `out` must hold `row.len() + 8` keys. Only where [`available`].
///
/// Keys that differ only in their low 9 bits come out of [`sort`] in index order: the
/// caller puts them in value order afterwards (rare outside exact ties, which are
/// meant to be in index order anyway).
pub fn pack_finite(row: &[f64], out: &mut [u64]) -> usize {
    assert!(row.len() <= MAX && out.len() >= row.len() + 8 && available(), "pack_finite: bad call");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512F and `out` has room (both checked above).
    unsafe {
        avx512::pack_finite(row, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("available() is false here")
}

/// The inverse of [`pack_finite`] after [`sort`]: replaces `out` by the (order key,
/// index) pairs of the sorted packed keys, reading each full key back from `row`, and
/// returns whether any key is smaller than the one before it (keys that differ only in
/// the low 9 bits, left in index order: the caller must then finish the sort). Only
/// where [`available`].
pub fn unpack(packed: &[u64], row: &[f64], out: &mut Vec<(u64, u32)>) -> bool {
    assert!(row.len() <= MAX && packed.len() <= row.len() && available(), "unpack: bad call");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512F (checked above); every packed index is below MAX and
    // below row.len() (pack_finite wrote them), which the kernel checks again by masking.
    unsafe {
        avx512::unpack(packed, row, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("available() is false here")
}

// The kernel writes each (u64, u32) pair as two u64 lanes: key, then index (the upper half
// of the second lane is the tuple's padding).
const _: () = assert!(
    std::mem::size_of::<(u64, u32)>() == 16 && std::mem::offset_of!((u64, u32), 0) == 0 && std::mem::offset_of!((u64, u32), 1) == 8
);

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn idx(p: [i64; 8]) -> __m512i {
        _mm512_setr_epi64(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7])
    }

    /// (min, max) of two registers, lane by lane: one comparator layer between registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn minmax(x: __m512i, y: __m512i) -> (__m512i, __m512i) {
        (_mm512_min_epu64(x, y), _mm512_max_epu64(x, y))
    }

    /// The lane permutations [`clean2`] and [`merge`] use, built once per
    /// sort (index k < 8 takes lane k of the first source, 8 + k lane k of the second).
    struct Perms {
        rev: __m512i,
        d2_lo: __m512i,
        d2_hi: __m512i,
        even: __m512i,
        odd: __m512i,
        out_a: __m512i,
        out_b: __m512i,
    }

    impl Perms {
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn new() -> Perms {
            Perms {
                rev: idx([7, 6, 5, 4, 3, 2, 1, 0]),
                d2_lo: idx([0, 1, 8, 9, 4, 5, 12, 13]),
                d2_hi: idx([2, 3, 10, 11, 6, 7, 14, 15]),
                even: idx([0, 2, 4, 6, 8, 10, 12, 14]),
                odd: idx([1, 3, 5, 7, 9, 11, 13, 15]),
                out_a: idx([0, 8, 4, 12, 1, 9, 5, 13]),
                out_b: idx([2, 10, 6, 14, 3, 11, 7, 15]),
            }
        }
    }

    /// Sorts two registers, each holding a bitonic sequence of 8 keys: the half-cleaners
    /// at lane distances 4, 2 and 1 of both, with the two registers' lanes regrouped so
    /// that each layer is one min/max between registers (two permutes and a min/max per
    /// layer, instead of a permute, min, max and blend per register).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn clean2(a: __m512i, b: __m512i, p: &Perms) -> (__m512i, __m512i) {
        // Distance 4: the low halves of a and b against their high halves.
        let (l, h) = minmax(_mm512_shuffle_i64x2::<0x44>(a, b), _mm512_shuffle_i64x2::<0xEE>(a, b));
        // l = [a0 a1 a2 a3 b0 b1 b2 b3], h = [a4 .. a7 b4 .. b7]. Distance 2:
        let (l, h) = minmax(_mm512_permutex2var_epi64(l, p.d2_lo, h), _mm512_permutex2var_epi64(l, p.d2_hi, h));
        // l = [a0 a1 a4 a5 b0 b1 b4 b5], h = [a2 a3 a6 a7 b2 b3 b6 b7]. Distance 1:
        let (l, h) = minmax(_mm512_permutex2var_epi64(l, p.even, h), _mm512_permutex2var_epi64(l, p.odd, h));
        // l = [a0 a4 b0 b4 a2 a6 b2 b6], h = [a1 a5 b1 b5 a3 a7 b3 b7]: back to order.
        (_mm512_permutex2var_epi64(l, p.out_a, h), _mm512_permutex2var_epi64(l, p.out_b, h))
    }

    /// Sorts 64 keys held in 8 registers: Batcher's 19-comparator network sorts every
    /// lane across the registers, a transpose turns those columns into 8 sorted
    /// registers, and three merge levels join them, all in registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sort64(mut r: [__m512i; 8], p: &Perms) -> [__m512i; 8] {
        const NET: [(usize, usize); 19] = [
            (0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (1, 2), (5, 6),
            (0, 4), (1, 5), (2, 6), (3, 7), (2, 4), (3, 5), (1, 2), (3, 4), (5, 6),
        ];
        for (i, j) in NET {
            (r[i], r[j]) = minmax(r[i], r[j]);
        }
        let mut r = crate::data::avx512::transpose8(r);
        for w in [1, 2, 4] {
            for s in (0..8).step_by(2 * w) {
                merge(&mut r[s..s + 2 * w], p);
            }
        }
        r
    }

    /// Merges two sorted runs of equal length (the halves of `regs`) into one: each key
    /// of the first meets its mirror in the second, which leaves two bitonic halves with
    /// every key of the first at most every key of the second; each is then cleaned by
    /// half-cleaners between registers and, last, within them ([`clean2`]).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn merge(regs: &mut [__m512i], p: &Perms) {
        let w = regs.len() / 2;
        let (a, b) = regs.split_at_mut(w);
        // Key i of the run meets key 2L-1-i: register w-1-q of the second half, lanes
        // reversed. The maxima are kept in reversed order (register q of the second half
        // gets the maxima of register q of the first), which is still bitonic.
        if w == 1 {
            let (x, y) = minmax(a[0], _mm512_permutexvar_epi64(p.rev, b[0]));
            (a[0], b[0]) = clean2(x, y, p);
            return;
        }
        for q in 0..w / 2 {
            let e = w - 1 - q;
            let (lo0, hi0) = minmax(a[q], _mm512_permutexvar_epi64(p.rev, b[e]));
            let (lo1, hi1) = minmax(a[e], _mm512_permutexvar_epi64(p.rev, b[q]));
            (a[q], b[q], a[e], b[e]) = (lo0, hi0, lo1, hi1);
        }
        for h in [a, b] {
            // Half-cleaners 8 registers or more apart through memory, the rest on blocks
            // of up to 8 registers held in registers.
            half_cleaners(h, 8);
            match w {
                2 => clean_block::<2>(h, p),
                4 => clean_block::<4>(h, p),
                _ => h.chunks_exact_mut(8).for_each(|b| clean_block::<8>(b, p)),
            }
        }
    }

    /// The half-cleaner layers between registers of a bitonic sequence `h` (a power-of-two
    /// number of registers), from distance `h.len() / 2` down to distance `min`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn half_cleaners(h: &mut [__m512i], min: usize) {
        let mut d = h.len() / 2;
        while d >= min {
            for s in (0..h.len()).step_by(2 * d) {
                for i in s..s + d {
                    (h[i], h[i + d]) = minmax(h[i], h[i + d]);
                }
            }
            d /= 2;
        }
    }

    /// Sorts a bitonic sequence of N (2, 4 or 8) registers, copied into registers: the
    /// half-cleaners between them, then within them.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn clean_block<const N: usize>(h: &mut [__m512i], p: &Perms) {
        let mut r: [__m512i; N] = std::array::from_fn(|i| h[i]);
        half_cleaners(&mut r, 2);
        for i in (0..N).step_by(2) {
            let (x, y) = minmax(r[i], r[i + 1]);
            (r[i], r[i + 1]) = clean2(x, y, p);
        }
        h.copy_from_slice(&r);
    }

    /// See [`super::pack_finite`].
    ///
    /// # Safety
    /// The CPU must support AVX-512F, `row.len() <= 512` and `out.len() >= row.len() + 8`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pack_finite(row: &[f64], out: &mut [u64]) -> usize {
        let (len, src, dst) = (row.len(), row.as_ptr(), out.as_mut_ptr() as *mut i64);
        let zero = _mm512_setzero_pd();
        let top = _mm512_set1_epi64(i64::MIN);
        let keep = _mm512_set1_epi64(!511);
        let step = _mm512_set1_epi64(8);
        let mut ix = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        let mut n = 0usize;
        for q in 0..len.div_ceil(8) {
            let lanes = ((1u16 << (len - 8 * q).min(8)) - 1) as __mmask8;
            // SAFETY: only the lanes inside `row` are read.
            let x = unsafe { _mm512_maskz_loadu_pd(lanes, src.add(8 * q)) };
            // order_key: -0.0 becomes 0.0, negatives are inverted, positives get the top bit.
            let b = _mm512_castpd_si512(_mm512_add_pd(x, zero));
            let key = _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi64::<63>(b), top));
            let packed = _mm512_or_si512(_mm512_and_si512(key, keep), ix);
            // x - x is 0 exactly when x is finite.
            let finite = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(_mm512_sub_pd(x, x), zero) & lanes;
            // SAFETY: n + 8 <= 8q + 8 <= len + 8 <= out.len().
            unsafe { _mm512_storeu_epi64(dst.add(n), _mm512_maskz_compress_epi64(finite, packed)) };
            n += finite.count_ones() as usize;
            ix = _mm512_add_epi64(ix, step);
        }
        n
    }

    /// See [`super::unpack`].
    ///
    /// # Safety
    /// The CPU must support AVX-512F and `packed` must come from `pack_finite(row, ..)`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn unpack(packed: &[u64], row: &[f64], out: &mut Vec<(u64, u32)>) -> bool {
        let n = packed.len();
        out.clear();
        out.reserve(n);
        let (src, dst) = (packed.as_ptr() as *const i64, out.as_mut_ptr() as *mut i64);
        let low = _mm512_set1_epi64(511);
        let top = _mm512_set1_epi64(i64::MIN);
        let zero = _mm512_setzero_pd();
        let first = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
        let second = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
        let mut prev = _mm512_setzero_si512();
        let mut inverted = 0u8;
        for q in 0..n.div_ceil(8) {
            let lanes = ((1u16 << (n - 8 * q).min(8)) - 1) as __mmask8;
            // SAFETY: only lanes inside `packed` are read; indices lie inside `row`.
            let ix = _mm512_and_si512(unsafe { _mm512_maskz_loadu_epi64(lanes, src.add(8 * q)) }, low);
            let x = unsafe { _mm512_mask_i64gather_pd::<8>(zero, lanes, ix, row.as_ptr()) };
            // order_key, as in pack_finite.
            let b = _mm512_castpd_si512(_mm512_add_pd(x, zero));
            let key = _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi64::<63>(b), top));
            // Each key against the one before it: [previous register's last, this one's 0..6].
            let before = _mm512_alignr_epi64::<7>(key, prev);
            inverted |= _mm512_mask_cmpgt_epu64_mask(lanes, before, key);
            prev = key;
            let (lo, hi) = (_mm512_permutex2var_epi64(key, first, ix), _mm512_permutex2var_epi64(key, second, ix));
            let (m_lo, m_hi) = ((lanes & 0x0f) as u16, (lanes >> 4) as u16);
            // SAFETY: pairs 8q .. 8q + lanes lie inside out's reserved capacity.
            unsafe {
                _mm512_mask_storeu_epi64(dst.add(16 * q), (((m_lo & 1) * 3) | ((m_lo & 2) * 6) | ((m_lo & 4) * 12) | ((m_lo & 8) * 24)) as __mmask8, lo);
                _mm512_mask_storeu_epi64(dst.add(16 * q + 8), (((m_hi & 1) * 3) | ((m_hi & 2) * 6) | ((m_hi & 4) * 12) | ((m_hi & 8) * 24)) as __mmask8, hi);
            }
        }
        // SAFETY: the loop wrote all n pairs (both lanes of each).
        unsafe { out.set_len(n) };
        inverted != 0
    }

    /// Sorts `v` (at most 512 keys) ascending.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and `v.len()` must be at most 512.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn sort(v: &mut [u64]) {
        let n = v.len();
        if n < 2 {
            return;
        }
        let p = Perms::new();
        // Padding with the largest key: it sorts to the end and is never stored back.
        let pad = _mm512_set1_epi64(-1);
        let used = n.div_ceil(8);
        let r = used.next_power_of_two().max(8);
        let mut regs = [pad; 64];
        let ptr = v.as_mut_ptr() as *mut i64;
        let mask = |q: usize| (((1u16 << (n - 8 * q).min(8)) - 1) & 0xff) as __mmask8;
        for (q, reg) in regs.iter_mut().enumerate().take(used) {
            // SAFETY: the lanes `mask` keeps lie inside `v`; the others are not read.
            *reg = unsafe { _mm512_mask_loadu_epi64(pad, mask(q), ptr.add(8 * q)) };
        }
        for block in regs[..r].chunks_exact_mut(8) {
            let b: [__m512i; 8] = [block[0], block[1], block[2], block[3], block[4], block[5], block[6], block[7]];
            block.copy_from_slice(&sort64(b, &p));
        }
        let mut w = 8;
        while w < r {
            for run in regs[..r].chunks_exact_mut(2 * w) {
                merge(run, &p);
            }
            w *= 2;
        }
        for (q, reg) in regs.iter().enumerate().take(used) {
            // SAFETY: as for the load.
            unsafe { _mm512_mask_storeu_epi64(ptr.add(8 * q), mask(q), *reg) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_the_standard_sort() {
        if !available() {
            eprintln!("no AVX-512 on this CPU: the network sort is not used here");
            return;
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for n in (0..=MAX).chain([1, 2, 7, 8, 9, 63, 64, 65, 496, 511]) {
            for kind in 0..4 {
                let mut v: Vec<u64> = (0..n)
                    .map(|i| match kind {
                        0 => rnd(),
                        1 => rnd() % 5,                   // heavy ties
                        2 => i as u64,                    // sorted
                        _ => u64::MAX - (i as u64 % 3),   // the padding value itself
                    })
                    .collect();
                let mut want = v.clone();
                want.sort_unstable();
                assert!(sort(&mut v));
                assert_eq!(v, want, "n = {n}, kind = {kind}");
            }
        }
        let mut long = vec![0u64; MAX + 1];
        assert!(!sort(&mut long), "longer than MAX is refused");
    }
}
