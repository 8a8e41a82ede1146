//! `x ^ y` eight cells at a time, with exactly libm's bits.
//!
//! Layout: three flat slices of the same length (base, exponent, out), eight lanes per
//! step and a masked tail.
//!
//! Why: `pow` with a panel exponent (`rank(a) ^ rank(b)`, eight of the alpha101 set) or
//! an integer one (`x ^ 4`, `x ^ 5`) called glibc's scalar `pow` about 29 million times per
//! batch at ~9 ns each, about 4 % of the whole batch.
//!
//! How the bits stay libm's: each lane computes exp(y · log x) in extended precision
//! (log from a 128-entry table of 1/c and log c, exp from a 128-entry table of 2^(j/128),
//! both built at first use in double-double arithmetic), to within a few thousandths of
//! an ulp of the exact value before its last rounding. glibc's `pow` is within 0.52–0.54
//! ulp of the exact value (its own bound: 0.509 ulp from its exp, plus a log term that
//! grows with |y · log x|), so it too is correctly rounded wherever the exact value lies
//! farther than that excess from a rounding midpoint. Where both are, they return the same
//! double. Lanes nearer a midpoint than the two excesses together (a few per cent), and
//! every special case (x ≤ 0, subnormal or infinite; y infinite; a result beyond e^±700
//! or an exact power of two) go to libm itself. NaN inputs (missing stocks) give NaN with
//! libm's payload and sign, computed in place (x + y, as libm makes it). Integer exponents
//! from 3 to 16 take a route without logarithms ([`powi_into`]). The tests compare every
//! lane with `f64::powf` bit for bit, NaN included.

/// Double-double arithmetic for building the tables (run once; speed is irrelevant).
mod dd {
    /// hi + lo, |lo| ≤ half an ulp of hi.
    #[derive(Clone, Copy, Debug)]
    pub struct Dd(pub f64, pub f64);

    fn two_sum(a: f64, b: f64) -> Dd {
        let s = a + b;
        let bb = s - a;
        Dd(s, (a - (s - bb)) + (b - bb))
    }

    fn fast(a: f64, b: f64) -> Dd {
        let s = a + b;
        Dd(s, b - (s - a))
    }

    pub fn add(a: Dd, b: Dd) -> Dd {
        let s = two_sum(a.0, b.0);
        fast(s.0, s.1 + a.1 + b.1)
    }

    pub fn neg(a: Dd) -> Dd {
        Dd(-a.0, -a.1)
    }

    pub fn mul(a: Dd, b: Dd) -> Dd {
        let p = a.0 * b.0;
        fast(p, a.0.mul_add(b.0, -p) + (a.0 * b.1 + a.1 * b.0))
    }

    pub fn div_f(a: Dd, f: f64) -> Dd {
        let q1 = a.0 / f;
        let p = q1 * f;
        let r = add(a, Dd(-p, -q1.mul_add(f, -p)));
        fast(q1, r.0 / f)
    }

    /// ln 2 to about 2^-110 (hi = ln 2 rounded).
    pub const LN2: Dd = Dd(f64::from_bits(0x3FE6_2E42_FEFA_39EF), f64::from_bits(0x3C7A_BC9E_3B39_803F));

    /// e^x for |x| < 1, by its Taylor series.
    pub fn exp(x: Dd) -> Dd {
        let (mut sum, mut term) = (Dd(1.0, 0.0), Dd(1.0, 0.0));
        for j in 1..60 {
            term = div_f(mul(term, x), j as f64);
            sum = add(sum, term);
            if term.0.abs() < 1e-40 {
                break;
            }
        }
        sum
    }

    /// −ln v for v near 1: libm's log, then two Newton steps on e^l · v = 1.
    pub fn neg_log(v: f64) -> Dd {
        let mut l = Dd(-v.ln(), 0.0);
        for _ in 0..2 {
            let f = add(mul(exp(l), Dd(v, 0.0)), Dd(-1.0, 0.0));
            l = add(l, neg(f));
        }
        l
    }
}

/// Intervals of the log table: 2^LOG_BITS of them over one binade [OFF, 2·OFF).
const LOG_BITS: u32 = 7;
const N: usize = 1 << LOG_BITS;
/// The bits of √½ with the 45 bits below the table index cleared: x = 2^k · z with
/// z in [√½, √2) (roughly), so that x near 1 has k = 0 and its log keeps its relative
/// precision.
const OFF: u64 = (0x3FE6_A09E_667F_3BCD >> (52 - LOG_BITS)) << (52 - LOG_BITS);

struct Tables {
    /// 1/c for each interval, with so few bits that z · invc − 1 is exact in one fma.
    invc: [f64; N],
    /// −ln(invc) as double-double.
    logc_hi: [f64; N],
    logc_lo: [f64; N],
    /// 2^(j/128) as double-double.
    exp_hi: [f64; N],
    exp_lo: [f64; N],
}

fn tables() -> &'static Tables {
    static T: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut t = Tables { invc: [0.0; N], logc_hi: [0.0; N], logc_lo: [0.0; N], exp_hi: [0.0; N], exp_lo: [0.0; N] };
        let one = 1.0f64.to_bits();
        for i in 0..N {
            let lo = OFF + ((i as u64) << (52 - LOG_BITS));
            let hi = lo + (1 << (52 - LOG_BITS)) - 1;
            let c = f64::from_bits(lo + (1 << (51 - LOG_BITS)));
            // 1/c rounded to 8 fractional bits above 1 (z has 52 there) or 7 below (z has
            // 53): z · invc then lies on a grid of 2^-60, and |z · invc − 1| < 2^-7 fits
            // in a double exactly. The interval holding 1 takes invc = 1 (log c = 0).
            t.invc[i] = if (lo..=hi).contains(&one) {
                1.0
            } else {
                let step = if c > 1.0 { 256.0 } else { 128.0 };
                (step / c).round() / step
            };
            let l = dd::neg_log(t.invc[i]);
            (t.logc_hi[i], t.logc_lo[i]) = (l.0, l.1);
            let e = dd::exp(dd::mul(dd::LN2, dd::Dd(i as f64 / N as f64, 0.0)));
            (t.exp_hi[i], t.exp_lo[i]) = (e.0, e.1);
        }
        t
    })
}

/// `out[i] = x[i].powf(y[i])`, bit for bit, for slices of equal length.
pub fn pow_into(x: &[f64], y: &[f64], out: &mut [f64]) {
    pow_counted(x, y, out);
}

/// [`pow_into`], returning how many cells went to libm (for the tests).
fn pow_counted(x: &[f64], y: &[f64], out: &mut [f64]) -> usize {
    assert!(x.len() == out.len() && y.len() == out.len(), "pow: slices of equal length");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma") {
        let t = tables();
        // SAFETY: the CPU has AVX-512F and FMA (checked just above).
        return unsafe { avx512::pow8(t, x, y, out) };
    }
    for ((o, a), b) in out.iter_mut().zip(x).zip(y) {
        *o = a.powf(*b);
    }
    out.len()
}

/// The exponents [`powi_into`] takes: the integers 3 to 16 (`x ^ 4`, `x ^ 5` in the alpha101
/// set; 1, 2 and 0.5 have one-operation paths of their own in the `pow` operator).
pub fn small_integer(e: f64) -> Option<u32> {
    (e.fract() == 0.0 && (3.0..=16.0).contains(&e)).then_some(e as u32)
}

/// `out[i] = x[i].powf(n)`, bit for bit, for a [`small_integer`] exponent `n`.
///
/// Why apart from [`pow_into`]: an integer power needs no logarithm. Each lane multiplies
/// x by itself in double-double arithmetic (square and multiply, at most eight products,
/// each exact up to about 2^-104 of the value), so the sum lies within 2^-48 ulp of the
/// exact power: the same argument as [`pow_into`]'s then gives libm's bits wherever the
/// power lies farther from a rounding midpoint than libm's own excess, and sends the
/// other lanes to libm. The alpha101 batch's four integer powers took half the time
/// they took on the general route (55–70 against 117–130 ms, the pass included).
pub fn powi_into(x: &[f64], n: u32, out: &mut [f64]) {
    powi_counted(x, n, out);
}

/// [`powi_into`], returning how many cells went to libm (for the tests).
fn powi_counted(x: &[f64], n: u32, out: &mut [f64]) -> usize {
    assert!(x.len() == out.len() && (3..=16).contains(&n), "powi: slices of equal length, 3 <= n <= 16");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above).
        return unsafe { avx512::powi8(x, n, out) };
    }
    for (o, a) in out.iter_mut().zip(x) {
        *o = a.powf(f64::from(n));
    }
    out.len()
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Tables, LOG_BITS, N, OFF};
    use std::arch::x86_64::*;

    /// Coefficients of ln(1 + r) = r − r²/2 + r³ · (C[0] + r · C[1] + ...), |r| < 2^-7:
    /// (−1)^(j+1)/j for j = 3..=11 (the last term under 2^-80).
    const C: [f64; 9] = [1.0 / 3.0, -1.0 / 4.0, 1.0 / 5.0, -1.0 / 6.0, 1.0 / 7.0, -1.0 / 8.0, 1.0 / 9.0, -1.0 / 10.0, 1.0 / 11.0];
    /// e^r − 1 − r = r² · (E[0] + r · E[1] + ...), |r| ≤ ln 2/256: 1/j! for j = 2..=8.
    const E: [f64; 7] = [1.0 / 2.0, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0, 1.0 / 40320.0];

    /// (s, e) with s + e = a + b exactly.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline(always)]
    unsafe fn two_sum(a: __m512d, b: __m512d) -> (__m512d, __m512d) {
        let s = _mm512_add_pd(a, b);
        let bb = _mm512_sub_pd(s, a);
        let e = _mm512_add_pd(_mm512_sub_pd(a, _mm512_sub_pd(s, bb)), _mm512_sub_pd(b, bb));
        (s, e)
    }

    /// The loop's constants.
    struct Consts {
        ln2n_hi: __m512d,
        ln2n_lo: __m512d,
        inv_ln2n: __m512d,
        shift: __m512d,
    }

    impl Consts {
        /// # Safety
        /// The CPU must support AVX-512F.
        #[inline(always)]
        unsafe fn new() -> Consts {
            let ln2n = super::dd::div_f(super::dd::LN2, N as f64);
            Consts {
                ln2n_hi: _mm512_set1_pd(ln2n.0),
                ln2n_lo: _mm512_set1_pd(ln2n.1),
                inv_ln2n: _mm512_set1_pd(N as f64 / super::dd::LN2.0),
                shift: _mm512_set1_pd(f64::from_bits(0x4338_0000_0000_0000)), // 1.5 · 2^52
            }
        }
    }

    /// The lanes whose rounding libm may decide otherwise: `r + err` (`r` rounded, `err`
    /// the exact remainder) within `delta` ulp of a midpoint between doubles, or `r` a
    /// power of two (finer spacing below it than above: libm decides those).
    ///
    /// # Safety
    /// The CPU must support AVX-512F (inlined into the kernels only).
    #[inline(always)]
    unsafe fn undecided(r: __m512d, err: __m512d, delta: __m512d) -> u8 {
        let rb = _mm512_castpd_si512(r);
        let ulp = _mm512_castsi512_pd(_mm512_sub_epi64(_mm512_and_si512(rb, _mm512_set1_epi64(0x7FF0_0000_0000_0000)), _mm512_set1_epi64(52 << 52)));
        let near = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(_mm512_abs_pd(err), _mm512_mul_pd(_mm512_sub_pd(_mm512_set1_pd(0.5), delta), ulp));
        near | (_mm512_test_epi64_mask(rb, _mm512_set1_epi64(0x000F_FFFF_FFFF_FFFF)) ^ 0xFF)
    }

    /// Fills `out` eight cells at a time by `eight(i)` (cells `i..i + 8`: their values and
    /// the lanes to take from libm instead), those lanes and the tail by `libm(i)`;
    /// returns how many cells went to libm.
    ///
    /// # Safety
    /// The CPU must support AVX-512F (inlined into the kernels only).
    #[inline(always)]
    unsafe fn each8(out: &mut [f64], eight: impl Fn(usize) -> (__m512d, u8), libm: impl Fn(usize) -> f64) -> usize {
        let n = out.len();
        let mut slow = 0;
        let mut i = 0;
        while i + 8 <= n {
            let (o, mut lanes) = eight(i);
            // SAFETY: cells i..i + 8 lie inside out.
            unsafe { _mm512_storeu_pd(out.as_mut_ptr().add(i), o) };
            slow += lanes.count_ones() as usize;
            while lanes != 0 {
                let l = lanes.trailing_zeros() as usize;
                lanes &= lanes - 1;
                out[i + l] = libm(i + l);
            }
            i += 8;
        }
        for (l, o) in out.iter_mut().enumerate().skip(i) {
            *o = libm(l);
            slow += 1;
        }
        slow
    }

    /// x^y of eight lanes, and the lanes that must go to libm instead.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and FMA (inlined into [`pow8`] only).
    #[inline(always)]
    unsafe fn one(t: &Tables, k: &Consts, vx: __m512d, vy: __m512d) -> (__m512d, u8) {
        let set = _mm512_set1_pd;
        let seti = _mm512_set1_epi64;
        let ln2 = super::dd::LN2;
        let (ln2n_hi, ln2n_lo, inv_ln2n, shift) = (k.ln2n_hi, k.ln2n_lo, k.inv_ln2n, k.shift);
        let ix = _mm512_castpd_si512(vx);
        // x positive, normal and finite: (ix − smallest normal) below the span of normals.
        let special = _mm512_cmpge_epu64_mask(_mm512_sub_epi64(ix, seti(0x0010_0000_0000_0000)), seti(0x7FE0_0000_0000_0000));
        // x = 2^k · z, z in [OFF, 2·OFF); the table interval from z's top bits.
        let tmp = _mm512_sub_epi64(ix, seti(OFF as i64));
        let idx = _mm512_and_si512(_mm512_srli_epi64::<{ 52 - LOG_BITS }>(tmp), seti(N as i64 - 1));
        let ke = _mm512_srai_epi64::<52>(tmp);
        let z = _mm512_castsi512_pd(_mm512_sub_epi64(ix, _mm512_and_si512(tmp, seti(0xFFF0_0000_0000_0000u64 as i64))));
        // k as a double (|k| < 2^51): through the bits of 1.5 · 2^52 + k.
        let kd = _mm512_sub_pd(_mm512_castsi512_pd(_mm512_add_epi64(ke, _mm512_castpd_si512(shift))), shift);
        let invc = _mm512_i64gather_pd::<8>(idx, t.invc.as_ptr().cast());
        let logc_hi = _mm512_i64gather_pd::<8>(idx, t.logc_hi.as_ptr().cast());
        let logc_lo = _mm512_i64gather_pd::<8>(idx, t.logc_lo.as_ptr().cast());
        // ln x = k·ln2 + ln c + ln(1 + r), r = z/c − 1 (exact), as hi + lo.
        let r = _mm512_fmsub_pd(z, invc, set(1.0));
        let kl_hi = _mm512_mul_pd(kd, set(ln2.0));
        let kl_lo = _mm512_fmadd_pd(kd, set(ln2.1), _mm512_fmsub_pd(kd, set(ln2.0), kl_hi));
        let ar = _mm512_mul_pd(set(-0.5), r);
        let r2_hi = _mm512_mul_pd(ar, r);
        let r2_lo = _mm512_fmsub_pd(ar, r, r2_hi);
        let mut p = set(C[8]);
        for c in C[..8].iter().rev() {
            p = _mm512_fmadd_pd(p, r, set(*c));
        }
        let p = _mm512_mul_pd(_mm512_mul_pd(_mm512_mul_pd(r, r), r), p);
        let (s, e1) = two_sum(kl_hi, logc_hi);
        let (s, e2) = two_sum(s, r);
        let (s, e3) = two_sum(s, r2_hi);
        let lo = _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(e1, e2), _mm512_add_pd(e3, r2_lo)), _mm512_add_pd(_mm512_add_pd(kl_lo, logc_lo), p));
        let (l_hi, l_lo) = two_sum(s, lo);
        // y · ln x as hi + lo.
        let e_hi = _mm512_mul_pd(vy, l_hi);
        let e_lo = _mm512_fmadd_pd(vy, l_lo, _mm512_fmsub_pd(vy, l_hi, e_hi));
        let abs_e = _mm512_abs_pd(e_hi);
        let in_range = _mm512_cmp_pd_mask::<_CMP_LE_OQ>(abs_e, set(700.0));
        // e^(e_hi + e_lo) = 2^(kk/128) · e^r2, |r2| ≤ ln2/256.
        let zz = _mm512_fmadd_pd(e_hi, inv_ln2n, shift);
        let kk = _mm512_sub_epi64(_mm512_castpd_si512(zz), _mm512_castpd_si512(shift));
        let kkd = _mm512_sub_pd(zz, shift);
        let r2 = _mm512_fnmadd_pd(kkd, ln2n_hi, e_hi); // exact
        let r2l = _mm512_fnmadd_pd(kkd, ln2n_lo, e_lo);
        let j = _mm512_and_si512(kk, seti(N as i64 - 1));
        let scale = _mm512_slli_epi64::<52>(_mm512_srai_epi64::<{ LOG_BITS }>(kk));
        let s_hi = _mm512_i64gather_pd::<8>(j, t.exp_hi.as_ptr().cast());
        let s_lo = _mm512_i64gather_pd::<8>(j, t.exp_lo.as_ptr().cast());
        let mut q = set(E[6]);
        for c in E[..6].iter().rev() {
            q = _mm512_fmadd_pd(q, r2, set(*c));
        }
        // e^(r2 + r2l) − 1 = r2 + p_lo.
        let p_lo = _mm512_fmadd_pd(r2l, r2, _mm512_fmadd_pd(_mm512_mul_pd(r2, r2), q, r2l));
        let tail = _mm512_fmadd_pd(s_hi, r2, _mm512_fmadd_pd(s_hi, p_lo, _mm512_mul_pd(s_lo, _mm512_add_pd(set(1.0), r2))));
        let res = _mm512_add_pd(s_hi, tail);
        // The rounding error of s_hi + tail, exactly.
        let err = _mm512_sub_pd(tail, _mm512_sub_pd(res, s_hi));
        let rb = _mm512_castpd_si512(res);
        // How close to a midpoint the two roundings may disagree: glibc's excess
        // (0.009 ulp from its exp, 1.3 · 2^-15 ulp per unit of |y ln x| from its log),
        // this code's (under 0.003 ulp from the exp, and |y| · 2^-17 from the log),
        // with room to spare.
        let delta = _mm512_fmadd_pd(abs_e, set(1.0 / 8192.0), _mm512_fmadd_pd(_mm512_abs_pd(vy), set(1.0 / 32768.0), set(0.02)));
        let unsure = undecided(res, err, delta);
        // NaN (a missing stock: a tenth of a rank panel's cells) as libm's x + y makes it:
        // a NaN y but for pow(1, NaN) = 1; a NaN x with its sign bit clear but for
        // pow(NaN, 0) = 1 (libm clears the sign of a negative NaN x for integer y, so
        // those lanes go to libm).
        let nan_y = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(vy, vy) & !_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(vx, set(1.0));
        let nan_x = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(vx, vx) & _mm512_cmpge_epi64_mask(ix, _mm512_setzero_si512()) & !_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(vy, set(0.0));
        let nan = nan_y | nan_x;
        let res = _mm512_mask_add_pd(_mm512_castsi512_pd(_mm512_add_epi64(rb, scale)), nan, vx, vy);
        (res, (special | !in_range | unsure) & !nan)
    }

    /// # Safety
    /// The CPU must support AVX-512F and FMA.
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn pow8(t: &Tables, x: &[f64], y: &[f64], out: &mut [f64]) -> usize {
        let k = Consts::new();
        // SAFETY: cells i..i + 8 lie inside x and y (as long as out, checked by the caller).
        unsafe { each8(out, |i| one(t, &k, _mm512_loadu_pd(x.as_ptr().add(i)), _mm512_loadu_pd(y.as_ptr().add(i))), |i| x[i].powf(y[i])) }
    }

    /// x^n of eight lanes for 3 ≤ n ≤ 16 (see [`powi_into`](super::powi_into)), and the
    /// lanes that must go to libm instead.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and FMA (inlined into [`powi8`] only).
    #[inline(always)]
    unsafe fn one_int(vx: __m512d, n: u32) -> (__m512d, u8) {
        let set = _mm512_set1_pd;
        let ax = _mm512_abs_pd(vx);
        // |x| in [2^-60, 2^60): x^n is normal and finite, far from both ends. Zeros, NaN,
        // infinities and the rest go to libm.
        let fine = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(ax, set(f64::from_bits(0x3C30_0000_0000_0000))) & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(ax, set(f64::from_bits(0x43B0_0000_0000_0000)));
        // NaN with its sign bit clear (a missing stock) is NaN, as libm's x · x makes it
        // (libm clears a negative NaN's sign: those lanes go to libm).
        let nan = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(vx, vx) & _mm512_cmpge_epi64_mask(_mm512_castpd_si512(vx), _mm512_setzero_si512());
        // x^n as h + l, |l| at most half an ulp of h: square and multiply from n's top bit.
        // Each step's product of the high parts is split exactly by an fma; the cross
        // terms are added to the low part (l·l, below 2^-104 of the value, is dropped).
        let (mut h, mut l) = (vx, _mm512_setzero_pd());
        for b in (0..31 - n.leading_zeros()).rev() {
            let p = _mm512_mul_pd(h, h);
            let e = _mm512_fmadd_pd(_mm512_add_pd(h, h), l, _mm512_fmsub_pd(h, h, p));
            (h, l) = (_mm512_add_pd(p, e), e);
            l = _mm512_sub_pd(l, _mm512_sub_pd(h, p));
            if n >> b & 1 == 1 {
                let p = _mm512_mul_pd(h, vx);
                let e = _mm512_fmadd_pd(l, vx, _mm512_fmsub_pd(h, vx, p));
                h = _mm512_add_pd(p, e);
                l = _mm512_sub_pd(e, _mm512_sub_pd(h, p));
            }
        }
        // As in `one`: glibc's excess over half an ulp (0.009 ulp, plus 1.3 · 2^-15 ulp a
        // unit of |n ln x|, here bounded through x's exponent: |ln |x|| ≤ (|k| + 1) ln 2),
        // with room to spare; this route's own error (2^-48 ulp) is far inside it.
        let k = _mm512_abs_pd(_mm512_getexp_pd(vx));
        let abs_e = _mm512_mul_pd(_mm512_add_pd(k, set(1.0)), set(f64::from(n) * std::f64::consts::LN_2));
        let delta = _mm512_fmadd_pd(abs_e, set(1.0 / 8192.0), set(0.02));
        (_mm512_mask_mul_pd(h, nan, vx, vx), (!fine | undecided(h, l, delta)) & !nan)
    }

    /// # Safety
    /// The CPU must support AVX-512F and FMA, and 3 ≤ n ≤ 16.
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn powi8(x: &[f64], n: u32, out: &mut [f64]) -> usize {
        let e = f64::from(n);
        // SAFETY: cells i..i + 8 lie inside x (as long as out, checked by the caller).
        unsafe { each8(out, |i| one_int(_mm512_loadu_pd(x.as_ptr().add(i)), n), |i| x[i].powf(e)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorshift;

    /// Every lane equal to libm's, bit for bit (NaN included); returns the share sent to libm.
    fn check(x: &[f64], y: &[f64]) -> f64 {
        let mut out = vec![0.0; x.len()];
        let slow = pow_counted(x, y, &mut out);
        for ((a, b), o) in x.iter().zip(y).zip(&out) {
            let want = a.powf(*b);
            assert!(o.to_bits() == want.to_bits(), "pow({a:e}, {b:e}): {o:e}, libm {want:e}");
        }
        slow as f64 / x.len().max(1) as f64
    }

    #[test]
    fn log_table_keeps_r_exact() {
        // At both ends of every interval (where |r| is largest), z · invc − 1 in one fma
        // equals the exact product less one.
        let t = tables();
        for i in 0..N {
            let lo = OFF + ((i as u64) << (52 - LOG_BITS));
            for zb in [lo, lo + 1, lo + (1 << (52 - LOG_BITS)) - 1, lo + (1 << (51 - LOG_BITS))] {
                let z = f64::from_bits(zb);
                let c = t.invc[i];
                let p = z * c;
                let e = z.mul_add(c, -p);
                let r = z.mul_add(c, -1.0);
                assert_eq!((r - (p - 1.0)), e, "interval {i}, z {z}");
                assert!(r.abs() < 1.0 / 128.0, "interval {i}: |r| = {r}");
            }
        }
    }

    #[test]
    fn ranks_to_rank_powers_equal_libm() {
        // The alpha101 shape: ranks k/n to the power of ranks.
        let mut s = 7u64;
        let (x, y): (Vec<f64>, Vec<f64>) = (0..400_000)
            .map(|_| {
                let n = 20 + xorshift(&mut s) % 500;
                ((1 + xorshift(&mut s) % n) as f64 / n as f64, (1 + xorshift(&mut s) % n) as f64 / n as f64)
            })
            .unzip();
        let slow = check(&x, &y);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            assert!(slow < 0.15, "{:.1} % of lanes went to libm", slow * 100.0);
        }
    }

    #[test]
    fn prices_and_wide_ranges_equal_libm() {
        let mut s = 99u64;
        let mut u = || (xorshift(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
        let mut x = Vec::new();
        let mut y = Vec::new();
        for _ in 0..300_000 {
            // Prices to integer powers, values near 1, and wide magnitudes and exponents.
            x.push(0.5 + 500.0 * u());
            y.push([4.0, 5.0, 3.0, -2.0][(u() * 4.0) as usize]);
            x.push(1.0 + (u() - 0.5) * 1e-6);
            y.push((u() - 0.5) * 2e4);
            x.push((20.0 * (u() - 0.5)).exp2().powi(8));
            y.push((u() - 0.5) * 40.0);
        }
        check(&x, &y);
    }

    /// [`powi_into`] against libm, bit for bit, for every exponent it takes: prices, ranks,
    /// values near 1, negative values, wide magnitudes (across its range's ends, where
    /// lanes go to libm) and special values.
    #[test]
    fn integer_powers_equal_libm() {
        let mut s = 31u64;
        let mut u = || (xorshift(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
        let mut x = Vec::new();
        for _ in 0..40_000 {
            x.push(0.5 + 500.0 * u());
            x.push((1.0 + (u() * 500.0).floor()) / 501.0);
            x.push(1.0 + (u() - 0.5) * 1e-6);
            x.push(-(0.01 + 100.0 * u()));
            x.push((160.0 * (u() - 0.5)).exp2());
        }
        x.extend([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN, f64::from_bits(0x7FF8_0000_0000_1234), f64::MIN_POSITIVE, 1e-310, f64::MAX, 3.0, 1.0000000000000002]);
        for n in 3..=16 {
            let mut out = vec![0.0; x.len()];
            let slow = powi_counted(&x, n, &mut out);
            for (a, o) in x.iter().zip(&out) {
                let want = a.powf(f64::from(n));
                assert!(o.to_bits() == want.to_bits(), "pow({a:e}, {n}): {o:e}, libm {want:e}");
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f") {
                // Beside the lanes near a midpoint, a tenth of these are outside the range.
                assert!(slow < x.len() / 5, "x^{n}: {slow} of {} lanes went to libm", x.len());
            }
            // Tails shorter than a vector.
            let mut short = vec![0.0; 13];
            powi_into(&x[..13], n, &mut short);
            assert!(short.iter().zip(&x).all(|(o, a)| o.to_bits() == a.powf(f64::from(n)).to_bits()), "x^{n}, 13 cells");
        }
        assert_eq!(small_integer(4.0), Some(4));
        assert_eq!([2.0, 2.5, 17.0, -3.0, f64::NAN].map(small_integer), [None; 5]);
    }

    #[test]
    fn special_values_equal_libm() {
        let v = [
            0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE, 1e-310, f64::MAX, 1e300, 1e-300, 0.25, 4.0,
            3.0, 1.0000000000000002, 0.9999999999999999, -f64::NAN, f64::from_bits(0x7FF8_0000_0000_1234), f64::from_bits(0xFFF8_0000_0000_0042),
        ];
        let e = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -3.0, 0.3, 1e10, -1e10, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1023.9, -1074.5, 700.0, 2.5, -f64::NAN, f64::from_bits(0x7FF8_0000_0000_0777)];
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for a in v {
            for b in e {
                x.push(a);
                y.push(b);
            }
        }
        check(&x, &y);
        // Tails shorter than a vector.
        check(&x[..13], &y[..13]);
        check(&[], &[]);
    }
}

