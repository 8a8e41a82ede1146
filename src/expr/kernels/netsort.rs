//! Sorting up to [`MAX`] finite values by a 32-bit key with an AVX-512 bitonic sorting
//! network.
//!
//! Why: every cross-sectional `rank` and every scored date sorts one cross-section of
//! ~500 values, about a million sorts for the alpha101 set, and the radix sort in
//! `cross` spent a quarter of that job's time in data-dependent scatters.
//! A sorting network has no data-dependent branches or memory accesses: sixteen keys per
//! instruction, unsigned min/max and lane permutes on registers.
//!
//! Each value becomes one `u32`: the 23 leading bits of its order key below the prefix
//! every value of the row shares, then its 9-bit index, so a plain key sort is also an
//! arg-sort. Values equal in those 23 bits come out in index order; [`Packed::sort`]
//! reports where that leaves a value below its predecessor, so that the caller can finish
//! the sort (on real cross-sections, about one move per twenty values). Measured against
//! the previous network on 64-bit keys (55 key bits, eight per instruction): half the
//! comparator work for the same layers.
//!
//! Exactness: the finished order is the values' exact order (ties in index order), so the
//! ranks built on it are those of a plain comparison sort; nothing is rounded.
//!
//! Layout: a row of at most [`MAX`] values in, packed keys in registers of sixteen `u32`,
//! sorted keys out in a buffer kept from row to row.

/// The largest row [`Packed::sort`] takes (32 registers of 16 keys).
/// Maps an f64 to a u64 whose unsigned order is the numeric order (−0.0 and 0.0 equal).
#[inline(always)]
pub fn order_key(v: f64) -> u64 {
    let b = (v + 0.0).to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

pub const MAX: usize = 512;

/// Bits of the index in a packed key.
pub const INDEX_BITS: u32 = 9;
const _: () = assert!(MAX == 1 << INDEX_BITS);

/// Whether the network runs on this CPU (it needs AVX-512F, and POPCNT to count the
/// finite values; checked once and cached by std).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::simd::avx512_popcnt()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The network's scratch buffers, reused from one row to the next.
#[derive(Default)]
pub struct Packed {
    /// Full order keys with the index in the low 9 bits (the first pass).
    wide: Vec<u64>,
    /// The packed 32-bit keys, then sorted (the finite values' only).
    keys: Vec<u32>,
}

impl Packed {
    /// Packs the finite values of `row` (at most [`MAX`]) and sorts them: returns the
    /// packed keys ascending, those with equal prefixes (the bits above the index) in
    /// index order, and a bitset of the positions whose prefix equals the one before
    /// (where the values' order and ties are still to be settled from the full values).
    /// Only where [`available`].
    pub fn sort_keys(&mut self, row: &[f64]) -> (&[u32], [u64; MAX / 64]) {
        self.pack_sort(row);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F (checked by pack_sort).
        let same = unsafe { avx512::same_prefix(&self.keys) };
        #[cfg(not(target_arch = "x86_64"))]
        let same = unreachable!("available() is false here");
        (&self.keys, same)
    }

    /// Packs the finite values of `row` (at most [`MAX`]), sorts them and writes their
    /// (order key, index) pairs to `out` in that order: ascending up to keys equal in
    /// their packed bits, which stay in index order. Returns a bitset of the positions
    /// whose key is below the one before (where the caller must finish the sort). Only
    /// where [`available`].
    pub fn sort(&mut self, row: &[f64], out: &mut Vec<(u64, u32)>) -> [u64; MAX / 64] {
        self.pack_sort(row);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F (checked by pack_sort); the packed indices come
        // from `row`.
        unsafe {
            avx512::unpack(&self.keys, row, out)
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("available() is false here")
    }

    /// Leaves the sorted packed keys of the finite values of `row` in `self.keys`.
    fn pack_sort(&mut self, row: &[f64]) {
        assert!(row.len() <= MAX && available(), "netsort: bad call");
        self.wide.resize(row.len() + 8, 0);
        self.keys.resize(row.len() + 16, 0);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F and POPCNT, the row fits and both buffers have the
        // room the kernels need (all checked above).
        unsafe {
            let n = avx512::pack_finite(row, &mut self.wide, &mut self.keys);
            self.keys.truncate(n);
            avx512::sort(&mut self.keys);
        }
    }
}

/// The index (position in the row) of a packed key.
#[inline]
pub fn index(key: u32) -> u32 {
    key & (MAX as u32 - 1)
}

// The kernel writes each (u64, u32) pair as two u64 lanes: key, then index (the upper half
// of the second lane is the tuple's padding).
const _: () = assert!(
    std::mem::size_of::<(u64, u32)>() == 16 && std::mem::offset_of!((u64, u32), 0) == 0 && std::mem::offset_of!((u64, u32), 1) == 8
);

/// Lane permutations of [`clean2`](avx512): which lane of the pair (L, H) (0..16 L,
/// 16..32 H) each lane of the next pair takes, for the half-cleaner layers at distances
/// 4, 2 and 1 of two bitonic registers a (elements 0..16) and b (16..32), and the final
/// lanes of a and b. Worked out by following each element through the layers: the lower
/// of a compared pair keeps the lower element's place.
const fn clean_perms() -> [[u32; 16]; 8] {
    let mut out = [[0u32; 16]; 8];
    // After the distance-8 layer: L = a0..a7 b0..b7, H = the partners 8 above.
    let mut l = [0u32; 16];
    let mut k = 0;
    while k < 16 {
        l[k] = if k < 8 { k as u32 } else { 8 + k as u32 };
        k += 1;
    }
    let mut h = [0u32; 16];
    k = 0;
    while k < 16 {
        h[k] = l[k] + 8;
        k += 1;
    }
    let mut layer = 0;
    while layer < 3 {
        let d = 4u32 >> layer;
        // The lower elements of each pair at distance d, a's first, in index order.
        let mut nl = [0u32; 16];
        let (mut e, mut m) = (0u32, 0);
        while e < 32 {
            if e & d == 0 {
                nl[m] = e;
                m += 1;
            }
            e += 1;
        }
        let mut j = 0;
        while j < 16 {
            out[2 * layer][j] = find(&l, &h, nl[j]);
            out[2 * layer + 1][j] = find(&l, &h, nl[j] + d);
            j += 1;
        }
        j = 0;
        while j < 16 {
            h[j] = nl[j] + d;
            l[j] = nl[j];
            j += 1;
        }
        layer += 1;
    }
    let mut j = 0;
    while j < 16 {
        out[6][j] = find(&l, &h, j as u32);
        out[7][j] = find(&l, &h, 16 + j as u32);
        j += 1;
    }
    out
}

/// Where element `e` is in the pair (L, H), as a two-source permute index.
const fn find(l: &[u32; 16], h: &[u32; 16], e: u32) -> u32 {
    let mut j = 0;
    while j < 16 {
        if l[j] == e {
            return j as u32;
        }
        if h[j] == e {
            return 16 + j as u32;
        }
        j += 1;
    }
    panic!("every element is in L or H")
}

const CLEAN: [[u32; 16]; 8] = clean_perms();

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{CLEAN, INDEX_BITS};
    use crate::expr::kernels::simd::{finite, tail16, tail8};
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn idx(p: [u32; 16]) -> __m512i {
        // SAFETY: reads 64 bytes from a 64-byte array.
        unsafe { _mm512_loadu_si512(p.as_ptr().cast()) }
    }

    /// (min, max) of two registers, lane by lane: one comparator layer between registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn minmax(x: __m512i, y: __m512i) -> (__m512i, __m512i) {
        (_mm512_min_epu32(x, y), _mm512_max_epu32(x, y))
    }

    /// The lane permutations [`clean2`] and [`merge`] use, built once per sort.
    struct Perms {
        rev: __m512i,
        clean: [__m512i; 8],
    }

    impl Perms {
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn new() -> Perms {
            Perms { rev: idx([15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]), clean: CLEAN.map(|p| idx(p)) }
        }
    }

    /// Sorts two registers, each holding a bitonic sequence of 16 keys: the half-cleaners
    /// at lane distances 8, 4, 2 and 1 of both, with the two registers' lanes regrouped
    /// so that each layer is one min/max between registers (see
    /// [`clean_perms`](super::clean_perms)).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn clean2(a: __m512i, b: __m512i, p: &Perms) -> (__m512i, __m512i) {
        // Distance 8: the low halves of a and b against their high halves.
        let (mut l, mut h) = minmax(_mm512_shuffle_i64x2::<0x44>(a, b), _mm512_shuffle_i64x2::<0xEE>(a, b));
        for layer in 0..3 {
            let (c, d) = (p.clean[2 * layer], p.clean[2 * layer + 1]);
            (l, h) = minmax(_mm512_permutex2var_epi32(l, c, h), _mm512_permutex2var_epi32(l, d, h));
        }
        (_mm512_permutex2var_epi32(l, p.clean[6], h), _mm512_permutex2var_epi32(l, p.clean[7], h))
    }

    /// Batcher's odd-even merge sort of 16 inputs (63 comparators in 10 layers; checked
    /// on all 2^16 zero-one inputs), on the registers `r`.
    ///
    /// Written out comparator by comparator (a macro) rather than as a loop over a table of
    /// pairs: the compiler did not unroll that loop, so the 16 registers lived on the
    /// stack and every comparator was two loads and two stores (60 % of the sort's time,
    /// by `perf annotate`).
    macro_rules! net16 {
        ($r:ident) => {
            net16!($r: (0, 1), (2, 3), (0, 2), (1, 3), (1, 2), (4, 5), (6, 7), (4, 6), (5, 7), (5, 6), (0, 4),
                (2, 6), (2, 4), (1, 5), (3, 7), (3, 5), (1, 2), (3, 4), (5, 6), (8, 9), (10, 11), (8, 10), (9, 11),
                (9, 10), (12, 13), (14, 15), (12, 14), (13, 15), (13, 14), (8, 12), (10, 14), (10, 12), (9, 13),
                (11, 15), (11, 13), (9, 10), (11, 12), (13, 14), (0, 8), (4, 12), (4, 8), (2, 10), (6, 14), (6, 10),
                (2, 4), (6, 8), (10, 12), (1, 9), (5, 13), (5, 9), (3, 11), (7, 15), (7, 11), (3, 5), (7, 9), (11, 13),
                (1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14))
        };
        ($r:ident: $(($i:literal, $j:literal)),*) => {
            $( ($r[$i], $r[$j]) = minmax($r[$i], $r[$j]); )*
        };
    }

    /// Transposes 16 registers of 16 lanes: lane j of register i becomes lane i of
    /// register j.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
        let mut t = r;
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        let mut u = t;
        for i in 0..4 {
            let b = 4 * i;
            u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
            u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
            u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
            u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
        }
        let mut v = u;
        for g in [0, 8] {
            for j in 0..4 {
                v[g + j] = _mm512_shuffle_i32x4::<0x88>(u[g + j], u[g + j + 4]);
                v[g + j + 4] = _mm512_shuffle_i32x4::<0xDD>(u[g + j], u[g + j + 4]);
            }
        }
        let mut w = v;
        for j in 0..8 {
            w[j] = _mm512_shuffle_i32x4::<0x88>(v[j], v[j + 8]);
            w[j + 8] = _mm512_shuffle_i32x4::<0xDD>(v[j], v[j + 8]);
        }
        w
    }

    /// Sorts 256 keys held in 16 registers: the column network sorts every lane across
    /// the registers, a transpose turns those columns into 16 sorted registers, and four
    /// merge levels join them, all in registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sort256(mut r: [__m512i; 16], p: &Perms) -> [__m512i; 16] {
        net16!(r);
        let mut r = transpose16(r);
        level::<1>(&mut r, p);
        level::<2>(&mut r, p);
        level::<4>(&mut r, p);
        level::<8>(&mut r, p);
        r
    }

    /// One merge level of [`sort256`]: the sorted runs of `W` registers merged in pairs.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn level<const W: usize>(r: &mut [__m512i; 16], p: &Perms) {
        for s in (0..16).step_by(2 * W) {
            let (a, b) = r[s..s + 2 * W].split_at_mut(W);
            // Both halves are W registers long, so the conversions always succeed.
            if let (Ok(a), Ok(b)) = (a.try_into(), b.try_into()) {
                merge::<W>(a, b, p);
            }
        }
    }

    /// Merges two sorted runs of `W` registers each into one: each key of the first
    /// meets its mirror in the second, which leaves two bitonic halves with every key of
    /// the first at most every key of the second; each is then cleaned by half-cleaners
    /// between registers and, last, within them ([`clean2`]).
    ///
    /// Why fixed sizes: with the run length a slice's, the merges inside [`sort256`]
    /// were one out-of-line function whose registers went through memory, and a call
    /// with two 1 KB copies per 256 keys.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn merge<const W: usize>(a: &mut [__m512i; W], b: &mut [__m512i; W], p: &Perms) {
        // Key i of the run meets key 2L-1-i: register W-1-q of the second half, lanes
        // reversed. The maxima are kept in reversed order (register q of the second half
        // gets the maxima of register q of the first), which is still bitonic.
        if W == 1 {
            let (x, y) = minmax(a[0], _mm512_permutexvar_epi32(p.rev, b[0]));
            (a[0], b[0]) = clean2(x, y, p);
            return;
        }
        for q in 0..W / 2 {
            let e = W - 1 - q;
            let (lo0, hi0) = minmax(a[q], _mm512_permutexvar_epi32(p.rev, b[e]));
            let (lo1, hi1) = minmax(a[e], _mm512_permutexvar_epi32(p.rev, b[q]));
            (a[q], b[q], a[e], b[e]) = (lo0, hi0, lo1, hi1);
        }
        for h in [a, b] {
            if W <= 8 {
                clean_block::<W>(h, p);
            } else {
                // Half-cleaners 8 registers or more apart through memory, the rest on
                // blocks of 8 registers held in registers.
                half_cleaners(h, 8);
                h.chunks_exact_mut(8).for_each(|b| clean_block::<8>(b, p));
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

    /// Writes the finite values of `row` to the front of `keys` as packed 32-bit keys
    /// (see the module doc) and returns how many there are.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and POPCNT, `row.len() <= 512`,
    /// `wide.len() >= row.len() + 8` and `keys.len() >= row.len() + 16`.
    #[target_feature(enable = "avx512f,popcnt")]
    pub unsafe fn pack_finite(row: &[f64], wide: &mut [u64], keys: &mut [u32]) -> usize {
        let (len, src, dst) = (row.len(), row.as_ptr(), wide.as_mut_ptr() as *mut i64);
        let zero = _mm512_setzero_pd();
        let top = _mm512_set1_epi64(i64::MIN);
        let keep = _mm512_set1_epi64(!511);
        let step = _mm512_set1_epi64(8);
        let mut ix = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        let (mut lo, mut hi) = (_mm512_set1_epi64(-1), _mm512_setzero_si512());
        let mut n = 0usize;
        // First pass: full order keys with the index in their low bits, and their range.
        for q in 0..len.div_ceil(8) {
            let lanes = tail8(len, q);
            // SAFETY: only the lanes inside `row` are read.
            let x = unsafe { _mm512_maskz_loadu_pd(lanes, src.add(8 * q)) };
            // order_key: -0.0 becomes 0.0, negatives are inverted, positives get the top bit.
            let b = _mm512_castpd_si512(_mm512_add_pd(x, zero));
            let key = _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi64::<63>(b), top));
            let packed = _mm512_or_si512(_mm512_and_si512(key, keep), ix);
            let finite = finite(x) & lanes;
            lo = _mm512_mask_min_epu64(lo, finite, lo, packed);
            hi = _mm512_mask_max_epu64(hi, finite, hi, packed);
            // SAFETY: n + 8 <= 8q + 8 <= len + 8 <= wide.len().
            unsafe { _mm512_storeu_epi64(dst.add(n), _mm512_maskz_compress_epi64(finite, packed)) };
            n += finite.count_ones() as usize;
            ix = _mm512_add_epi64(ix, step);
        }
        // Every key lies in [lo, hi], so they share the bits above the highest one where
        // lo and hi differ: keep the 23 bits from there down (never into the index).
        let differ = (_mm512_reduce_min_epu64(lo) ^ _mm512_reduce_max_epu64(hi)) & !511;
        let high = 63 - differ.leading_zeros().min(63);
        let shift = high.saturating_sub(31 - INDEX_BITS).max(INDEX_BITS) as u64;
        let sh = _mm_set1_epi64x(shift as i64);
        let prefix = _mm512_set1_epi64((1 << (32 - INDEX_BITS)) - 1);
        let index = _mm512_set1_epi64(511);
        let out = keys.as_mut_ptr() as *mut __m256i;
        for q in 0..n.div_ceil(8) {
            // SAFETY: 8q + 8 <= n + 8 <= wide.len(); lanes past n are never sorted.
            let w = unsafe { _mm512_loadu_epi64(dst.add(8 * q)) };
            let k = _mm512_or_si512(_mm512_slli_epi64::<9>(_mm512_and_si512(_mm512_srl_epi64(w, sh), prefix)), _mm512_and_si512(w, index));
            // SAFETY: 8q + 8 <= n + 8 <= keys.len().
            unsafe { _mm256_storeu_si256(out.add(q), _mm512_cvtepi64_epi32(k)) };
        }
        n
    }

    /// Replaces `out` by the (order key, index) pairs of the sorted packed keys, reading
    /// each full key back from `row`, and returns the bitset of the positions whose key
    /// is smaller than the one before.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and `packed` must come from `pack_finite(row, ..)`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn unpack(packed: &[u32], row: &[f64], out: &mut Vec<(u64, u32)>) -> [u64; 8] {
        let n = packed.len();
        out.clear();
        out.reserve(n);
        let (src, dst) = (packed.as_ptr(), out.as_mut_ptr() as *mut i64);
        let low = _mm512_set1_epi64(511);
        let top = _mm512_set1_epi64(i64::MIN);
        let zero = _mm512_setzero_pd();
        let first = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
        let second = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
        let mut prev = _mm512_setzero_si512();
        let mut steps = [0u64; 8];
        for q in 0..n.div_ceil(8) {
            let lanes = tail8(n, q);
            // SAFETY: only lanes inside `packed` are read; indices lie inside `row`.
            let p = unsafe { _mm512_maskz_loadu_epi32(lanes.into(), src.add(8 * q).cast()) };
            let ix = _mm512_and_si512(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(p)), low);
            // SAFETY: only the lanes inside `packed` gather, at indices inside `row`.
            let x = unsafe { _mm512_mask_i64gather_pd::<8>(zero, lanes, ix, row.as_ptr()) };
            // order_key, as in pack_finite.
            let b = _mm512_castpd_si512(_mm512_add_pd(x, zero));
            let key = _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi64::<63>(b), top));
            // Each key against the one before it: [previous register's last, this one's 0..6].
            let before = _mm512_alignr_epi64::<7>(key, prev);
            steps[q / 8] |= u64::from(_mm512_mask_cmpgt_epu64_mask(lanes, before, key)) << (8 * (q % 8));
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
        steps
    }

    /// The bitset of the positions p ≥ 1 of `keys` whose prefix (the bits above the
    /// index) equals that of p − 1.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and `keys.len()` must be at most 512.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn same_prefix(keys: &[u32]) -> [u64; 8] {
        let n = keys.len();
        let ptr = keys.as_ptr() as *const i32;
        let mut out = [0u64; 8];
        let mut prev = _mm512_setzero_si512();
        for q in 0..n.div_ceil(16) {
            let lanes = tail16(n, q);
            // SAFETY: only the lanes inside `keys` are read.
            let k = unsafe { _mm512_maskz_loadu_epi32(lanes, ptr.add(16 * q)) };
            // Each key against the one before it: [previous register's last, this one's 0..14].
            let before = _mm512_alignr_epi32::<15>(k, prev);
            let differ = _mm512_srli_epi32::<{ INDEX_BITS }>(_mm512_xor_si512(k, before));
            let mut same = _mm512_mask_cmpeq_epi32_mask(lanes, differ, _mm512_setzero_si512());
            if q == 0 {
                same &= !1;
            }
            out[q / 4] |= u64::from(same) << (16 * (q % 4));
            prev = k;
        }
        out
    }

    /// Sorts `v` (at most 512 keys) ascending.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and `v.len()` must be at most 512.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn sort(v: &mut [u32]) {
        let n = v.len();
        if n < 2 {
            return;
        }
        let p = Perms::new();
        // Padding with the largest key: it sorts to the end and is never stored back.
        let pad = _mm512_set1_epi32(-1);
        let used = n.div_ceil(16);
        let r = used.next_power_of_two().max(16);
        let mut regs = [pad; 32];
        let ptr = v.as_mut_ptr() as *mut i32;
        let mask = |q: usize| tail16(n, q);
        for (q, reg) in regs.iter_mut().enumerate().take(used) {
            // SAFETY: the lanes `mask` keeps lie inside `v`; the others are not read.
            *reg = unsafe { _mm512_mask_loadu_epi32(pad, mask(q), ptr.add(16 * q)) };
        }
        for block in regs[..r].chunks_exact_mut(16) {
            let b: [__m512i; 16] = std::array::from_fn(|i| block[i]);
            block.copy_from_slice(&sort256(b, &p));
        }
        if r == 32 {
            let (a, b) = regs.split_at_mut(16);
            // Both halves are 16 registers long, so the conversions always succeed.
            if let (Ok(a), Ok(b)) = (a.try_into(), b.try_into()) {
                merge::<16>(a, b, &p);
            }
        }
        for (q, reg) in regs.iter().enumerate().take(used) {
            // SAFETY: as for the load.
            unsafe { _mm512_mask_storeu_epi32(ptr.add(16 * q), mask(q), *reg) };
        }
    }

    #[cfg(test)]
    pub(super) fn sort_keys(v: &mut [u32]) {
        assert!(v.len() <= 512 && super::available());
        // SAFETY: checked just above.
        unsafe { sort(v) }
    }

    #[cfg(test)]
    pub(super) fn transpose_rows(m: &[[u32; 16]; 16]) -> [[u32; 16]; 16] {
        assert!(super::available());
        #[target_feature(enable = "avx512f")]
        fn go(m: &[[u32; 16]; 16]) -> [[u32; 16]; 16] {
            let t = transpose16(std::array::from_fn(|i| idx(m[i])));
            std::array::from_fn(|i| {
                let mut o = [0u32; 16];
                // SAFETY: each register is stored to a 64-byte array.
                unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), t[i]) };
                o
            })
        }
        // SAFETY: the CPU has AVX-512F (asserted above).
        unsafe { go(m) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(mut s: u64) -> impl FnMut() -> u64 {
        move || crate::xorshift(&mut s)
    }

    #[test]
    fn transpose16_transposes() {
        if !available() {
            return;
        }
        let m: [[u32; 16]; 16] = std::array::from_fn(|i| std::array::from_fn(|j| (16 * i + j) as u32));
        let t = avx512::transpose_rows(&m);
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(t[j][i], m[i][j], "lane {j} of register {i}");
            }
        }
    }

    #[test]
    fn sorts_like_the_standard_sort() {
        if !available() {
            eprintln!("no AVX-512 on this CPU: the network sort is not used here");
            return;
        }
        let mut rnd = rng(0x9e37_79b9_7f4a_7c15);
        for n in (0..=MAX).chain([1, 2, 15, 16, 17, 255, 256, 257, 496, 511]) {
            for kind in 0..4 {
                let mut v: Vec<u32> = (0..n)
                    .map(|i| match kind {
                        0 => rnd() as u32,
                        1 => (rnd() % 5) as u32,          // heavy ties
                        2 => i as u32,                    // sorted
                        _ => u32::MAX - (i as u32 % 3),   // the padding value itself
                    })
                    .collect();
                let mut want = v.clone();
                want.sort_unstable();
                avx512::sort_keys(&mut v);
                assert_eq!(v, want, "n = {n}, kind = {kind}");
            }
        }
    }

    #[test]
    fn packed_keys_keep_the_order_of_the_values() {
        if !available() {
            return;
        }
        let mut rnd = rng(7);
        let mut p = Packed::default();
        let mut out = Vec::new();
        for n in [0, 1, 2, 17, 300, 512] {
            // Wide range (sign, exponents), narrow range (one exponent), and values equal
            // in all but their last bits.
            for scale in [1e6, 1e-3, 0.0] {
                let row: Vec<f64> = (0..n)
                    .map(|i| match rnd() % 40 {
                        0 => f64::NAN,
                        1 => f64::NEG_INFINITY,
                        r if scale == 0.0 => f64::from_bits(3.0f64.to_bits() + r + i as u64 % 3),
                        r => 1.0 + (r as f64 - 20.0) * scale * (i % 7) as f64,
                    })
                    .collect();
                let steps = p.sort(&row, &mut out);
                let mut keys: Vec<(u64, u32)> = out.clone();
                keys.sort();
                let mut want: Vec<(u64, u32)> =
                    row.iter().enumerate().filter(|(_, x)| x.is_finite()).map(|(i, x)| (order_key(*x), i as u32)).collect();
                want.sort();
                assert_eq!(keys, want, "n = {n}, scale = {scale}");
                let want_steps: Vec<usize> = (1..out.len()).filter(|&i| out[i].0 < out[i - 1].0).collect();
                let got_steps: Vec<usize> = (0..MAX).filter(|&i| steps[i / 64] >> (i % 64) & 1 == 1).collect();
                assert_eq!(got_steps, want_steps, "n = {n}, scale = {scale}: the steps down are reported");
                // Between the steps, the network's order is the key order, ties by index.
                for i in 1..out.len() {
                    if !want_steps.contains(&i) {
                        assert!(out[i - 1] < out[i], "n = {n}, scale = {scale}: pairs {} and {i}", i - 1);
                    }
                }
            }
        }
    }
}
