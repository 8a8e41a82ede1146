//! AVX-512 idioms the kernels share: the CPU check of the kernels that also count bits,
//! the lane mask of a row's last, partial block, the scatters that write sorted ranks back
//! to their stocks, and the mask of finite lanes.
//!
//! Exactness: these move and select values, they never compute one, so they keep every
//! bit. Layout: rows as contiguous `f64` slices, eight lanes per 512-bit register.

use std::arch::x86_64::*;

/// Whether the CPU has AVX-512F and POPCNT: the kernels that count set bits (the sorting
/// network's finite values, the scorer's ties and label counts) need both (checked once
/// and cached by std).
pub fn avx512_popcnt() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("popcnt")
}

/// The lanes of block `q` (cells `8q .. 8q + 8`) that lie inside a row of `len` cells:
/// all eight, or those of the row's tail.
#[inline(always)]
pub fn tail8(len: usize, q: usize) -> __mmask8 {
    ((1u16 << (len - 8 * q).min(8)) - 1) as __mmask8
}

/// [`tail8`] for blocks of sixteen 32-bit lanes.
#[inline(always)]
pub fn tail16(len: usize, q: usize) -> __mmask16 {
    ((1u32 << (len - 16 * q).min(16)) - 1) as __mmask16
}

/// `out[idx[j] & mask] = vals[j]` for every j < `idx.len()`, eight stores an instruction:
/// the ranks of a sorted row written back to their stocks (`rank`). Measured stand-alone
/// on 490 of 496 stocks in random order: 220–231 ns a row against 270–275 ns for the
/// scalar loop (one store a cell, the largest part of `rank_row`'s samples).
///
/// # Safety
/// The CPU must support AVX-512F, `vals` must be at least as long as `idx` and every
/// `idx[j] & mask` must be below `out.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn scatter_f64(idx: &[u32], mask: u32, vals: &[f64], out: &mut [f64]) {
    debug_assert!(vals.len() >= idx.len() && idx.iter().all(|&i| ((i & mask) as usize) < out.len()));
    let m = _mm512_set1_epi32(mask as i32);
    for q in 0..idx.len().div_ceil(8) {
        let lanes = tail8(idx.len(), q);
        // SAFETY: only lanes inside `idx` (and so inside `vals`) are read, and each lane
        // stores to a cell of `out` (the caller's promise).
        unsafe {
            let i = _mm512_castsi512_si256(_mm512_and_si512(_mm512_maskz_loadu_epi32(lanes.into(), idx.as_ptr().add(8 * q).cast()), m));
            let v = _mm512_maskz_loadu_pd(lanes, vals.as_ptr().add(8 * q));
            _mm512_mask_i32scatter_pd::<8>(out.as_mut_ptr().cast(), lanes, i, v);
        }
    }
}

/// `out[idx[j]] = vals[j]` for every j < `idx.len()`, sixteen stores an instruction (the
/// scorer's signal ranks by stock).
///
/// # Safety
/// The CPU must support AVX-512F, `vals` must be at least as long as `idx` and every
/// `idx[j]` must be below `out.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn scatter_f32(idx: &[u32], vals: &[f32], out: &mut [f32]) {
    debug_assert!(vals.len() >= idx.len() && idx.iter().all(|&i| (i as usize) < out.len()));
    for q in 0..idx.len().div_ceil(16) {
        let lanes = tail16(idx.len(), q);
        // SAFETY: as in scatter_f64.
        unsafe {
            let i = _mm512_maskz_loadu_epi32(lanes, idx.as_ptr().add(16 * q).cast());
            let v = _mm512_maskz_loadu_ps(lanes, vals.as_ptr().add(16 * q));
            _mm512_mask_i32scatter_ps::<4>(out.as_mut_ptr().cast(), lanes, i, v);
        }
    }
}

/// The lanes of `v` that hold finite values: `v − v` is 0 exactly for those (NaN and ±inf
/// give NaN), with no integer work on the bits.
///
/// # Safety
/// The CPU must support AVX-512F (callers are AVX-512 kernels, which inline it).
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn finite(v: __m512d) -> __mmask8 {
    _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(_mm512_sub_pd(v, v), _mm512_setzero_pd())
}

/// `a / b` for a divisor `b` fixed for a whole kernel (a window length), with exactly the
/// bits of `_mm512_div_pd`, on the multiply-add units instead of the divider: `y` is
/// `1 / b` rounded, `q = a·y` is within 1.5 ulp of `a / b`, the remainder `a − b·q` is
/// then exact (a multiple of `q`'s ulp, `b` being an integer, and at most `3b` of them),
/// and `q + (a − b·q)·y` lies within `1.5 · 2⁻⁵³` ulp of `a / b`, closer than `a / b` ever
/// comes to a midpoint between two doubles (`a − b·m`, a nonzero multiple of half an ulp,
/// puts it at least `1 / 2b` ulp away; it is never exactly one, since `b·m` needs 54
/// significant bits), so the one rounding of the last fused multiply-add is the
/// division's (Markstein's correction). Worth it only where the divider is slow
/// ([`divider_is_slow`]).
///
/// Zeros (whose sign the correction would lose), infinities and NaN are their own quotient
/// (one `vfixupimmpd` puts them back); the few lanes whose quotient could come near the
/// subnormal range (below [`DIV_TINY`]) take the divider.
#[derive(Clone, Copy)]
pub struct DivBy {
    b: __m512d,
    y: __m512d,
}

/// Whether vector divisions by a constant pay as [`DivBy`]'s multiply-adds: on Intel cores
/// (a 512-bit division takes the divider 16 cycles, two multiply-add ports run beside it)
/// the correlation walk was bound by its divider and ran 13–31 % faster with them; on
/// AMD's Zen 4 (512-bit operations in two halves, a quicker divider) the same walk ran
/// 15–35 % slower (measured on AMD EPYC Zen 4 and Intel Xeon family 6 model 207). Read once from the CPU's
/// vendor; both give the same bits.
pub fn divider_is_slow() -> bool {
    static SLOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SLOW.get_or_init(|| {
        // (Leaf 0 exists on every x86-64 CPU.)
        let r = __cpuid(0);
        // "GenuineIntel", in the order EBX, EDX, ECX.
        [r.ebx, r.edx, r.ecx] == [0x756e_6547, 0x4965_6e69, 0x6c65_746e]
    })
}

/// Dividends below this magnitude are divided by the divider in [`DivBy`] (their quotient
/// could be subnormal, where the correction's bound does not hold).
const DIV_TINY: f64 = 1e-280;

impl DivBy {
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn new(b: usize) -> DivBy {
        assert!((1..1 << 50).contains(&b), "an exact division by a constant needs 1 <= b < 2^50");
        let b = b as f64;
        DivBy { b: _mm512_set1_pd(b), y: _mm512_set1_pd(1.0 / b) }
    }

    /// `a / b`, lane by lane, with the bits of `_mm512_div_pd(a, b)`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn div(self, a: __m512d) -> __m512d {
        // vfixupimmpd's table, a nibble per class of `a` (class j at bits 4j..4j + 4): NaN
        // (0, 1) quietened, zero (2) and ±inf (4, 5) as they are, +1 and finite values (3,
        // 6, 7) the corrected quotient. One instruction where the masks of zeros, infinities
        // and NaN took four: the correlation walk makes six of these divisions a row.
        const SPECIAL: i64 = 0x0011_0122;
        let q0 = _mm512_mul_pd(a, self.y);
        let q = _mm512_fmadd_pd(_mm512_fnmadd_pd(q0, self.b, a), self.y, q0);
        let q = _mm512_fixupimm_pd::<0>(q, a, _mm512_set1_epi64(SPECIAL));
        let abs = _mm512_abs_pd(a);
        // Below DIV_TINY (zeros included, which the table has put right).
        let low = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(abs, _mm512_set1_pd(DIV_TINY));
        if low != 0 {
            // Tiny nonzero dividends: the divider.
            let tiny = low & _mm512_cmp_pd_mask::<_CMP_GT_OQ>(abs, _mm512_setzero_pd());
            if tiny != 0 {
                return _mm512_mask_div_pd(q, tiny, a, self.b);
            }
        }
        q
    }

    /// `a / b` with the divider's bits on the cheapest of three routes: a product where
    /// `b` is a power of two (`pow2`: its reciprocal is exact), else [`DivBy::div`]'s
    /// multiply-adds where the divider is slow (`FMA`, [`divider_is_slow`]), else the
    /// divider. `pow2` is meant to be a constant where the caller is inlined, so the
    /// choice is made once, at compile time.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn quotient<const FMA: bool>(self, a: __m512d, pow2: bool) -> __m512d {
        if pow2 {
            _mm512_mul_pd(a, self.y)
        } else if FMA {
            self.div(a)
        } else {
            _mm512_div_pd(a, self.b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`DivBy`] against the divider, bit for bit, over `per_b` dividends for each divisor:
    /// random bit patterns (every magnitude, NaN and subnormals included), quotients next
    /// to the midpoints between doubles (the cases a correction gets wrong first), and the
    /// special values.
    fn div_by_matches_division(per_b: usize) {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || crate::xorshift(&mut s);
        let special = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MAX, -f64::MAX, f64::MIN_POSITIVE, 5e-324, -5e-324, DIV_TINY, -DIV_TINY, 1.0, -1.0, 3.0];
        let divisors = (1..=300usize).chain([481, 1000, 4821, 12_345, 1 << 20, (1 << 50) - 1]);
        for b in divisors {
            let bf = b as f64;
            let mut a: Vec<f64> = special.to_vec();
            for i in 0..per_b {
                a.push(match i % 3 {
                    0 => f64::from_bits(next()),
                    // b times a midpoint between two doubles (m and m + 2h), rounded once, and
                    // its neighbours: quotients as near a midpoint as any can be (a − b·(m + h)
                    // is a small multiple of h, so they lie a few 1/2b of an ulp from it).
                    1 => {
                        let m = f64::from_bits((next() >> 2) | 0x3000_0000_0000_0000) * if next() & 1 == 0 { 1.0 } else { -1.0 };
                        let h = f64::from_bits(m.abs().to_bits() & 0x7ff0_0000_0000_0000) * f64::EPSILON / 2.0;
                        let a = m.mul_add(bf, h * bf);
                        f64::from_bits(a.to_bits().wrapping_add(next() % 5).wrapping_sub(2))
                    }
                    // Small integers and their sums, as window sums are.
                    _ => (next() % 100_000) as f64 - 50_000.0 + (next() % 8) as f64 / 8.0,
                });
            }
            a.resize(a.len().div_ceil(8) * 8, 1.0);
            // `div` itself, and `quotient`'s route for this divisor with and without the
            // multiply-adds (a product by the reciprocal where b is a power of two).
            let pow2 = b.is_power_of_two();
            for route in ["div", "quotient::<true>", "quotient::<false>"] {
                // SAFETY: AVX-512F checked above.
                let got: Vec<f64> = unsafe {
                    let div = DivBy::new(b);
                    a.chunks_exact(8)
                        .flat_map(|c| {
                            let v = _mm512_loadu_pd(c.as_ptr());
                            let q = match route {
                                "div" => div.div(v),
                                "quotient::<true>" => div.quotient::<true>(v, pow2),
                                _ => div.quotient::<false>(v, pow2),
                            };
                            let mut o = [0.0; 8];
                            _mm512_storeu_pd(o.as_mut_ptr(), q);
                            o
                        })
                        .collect()
                };
                for (x, g) in a.iter().zip(&got) {
                    let want = x / bf;
                    assert!(g.to_bits() == want.to_bits(), "{route}: {x:e} / {b}: {g:e}, the divider gives {want:e}");
                }
            }
        }
    }

    /// The scatters against a plain loop: every length up to 40 and a full row, indices
    /// a shuffled prefix of the row's cells (with bits above the mask set for
    /// `scatter_f64`), untouched cells left as they were.
    #[test]
    fn scatters_write_what_a_plain_loop_writes() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for len in (0..=40).chain([496, 512]) {
            let mut idx: Vec<u32> = (0..len as u32).collect();
            for i in (1..idx.len()).rev() {
                idx.swap(i, (crate::xorshift(&mut s) % (i as u64 + 1)) as usize);
            }
            let used = &idx[..len - len / 7];
            let v64: Vec<f64> = (0..used.len()).map(|j| j as f64 + 0.5).collect();
            let v32: Vec<f32> = v64.iter().map(|&v| v as f32).collect();
            let (mut want64, mut want32) = (vec![-1.0f64; len], vec![-1.0f32; len]);
            for (j, &i) in used.iter().enumerate() {
                (want64[i as usize], want32[i as usize]) = (v64[j], v32[j]);
            }
            let (mut got64, mut got32) = (vec![-1.0f64; len], vec![-1.0f32; len]);
            let tagged: Vec<u32> = used.iter().map(|&i| i | (i % 5) << 9).collect();
            // SAFETY: AVX-512F checked above; values as long as the indices, every index
            // (masked) inside the output.
            unsafe {
                scatter_f64(&tagged, 511, &v64, &mut got64);
                scatter_f32(used, &v32, &mut got32);
            }
            assert_eq!(got64, want64, "scatter_f64, {len} cells");
            assert_eq!(got32, want32, "scatter_f32, {len} cells");
        }
    }

    #[test]
    fn division_by_a_constant_has_the_dividers_bits() {
        div_by_matches_division(3_000);
    }

    /// The same over a hundred million dividends (about a second in a release build, many
    /// times that in a debug one): run by hand with
    /// `cargo test --release -- --ignored division_by_a_constant_at_length`.
    #[test]
    #[ignore]
    fn division_by_a_constant_at_length() {
        div_by_matches_division(330_000);
    }
}
