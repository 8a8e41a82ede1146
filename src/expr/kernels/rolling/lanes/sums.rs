//! `ts_sum`, `ts_mean`, `decay_linear` and `ts_std` over eight assets at once, one asset
//! per AVX-512 lane.
//!
//! Why: the one-asset kernels ([`windows`](super::super::windows)) are chains of dependent
//! adds, a few cycles per day whatever the CPU's width; eight assets side by side run the
//! same chain for eight at the price of one, and `ts_std`'s square roots and divides go
//! eight to an instruction. Each lane does exactly the one-asset operations in the same
//! order (same bits): the same running sums, refreshed exactly on the same days, the same
//! selects where a window is constant or ill-conditioned. Written with intrinsics: the
//! compiler turned the same walk over `[f64; 8]` arrays into scalar code per lane (slower
//! than one asset at a time). Without AVX-512 the one-asset kernels run.
//!
//! Layout: a panel group as stored, one date's eight values per aligned load.

use super::{grouped, Src, W};
use crate::data::Panel;

/// Which statistic a walk returns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stat {
    Sum,
    Mean,
    Decay,
    Std,
}

/// [`sum`](super::super::sum) of every asset of a panel.
pub fn sum_panel<'a>(x: impl Into<Src<'a>>, d: usize) -> Panel {
    run(x, d, Stat::Sum, super::super::sum)
}

/// [`mean`](super::super::mean) of every asset of a panel.
pub fn mean_panel<'a>(x: impl Into<Src<'a>>, d: usize) -> Panel {
    run(x, d, Stat::Mean, super::super::mean)
}

/// [`decay_linear`](super::super::decay_linear) of every asset of a panel.
pub fn decay_linear_panel<'a>(x: impl Into<Src<'a>>, d: usize) -> Panel {
    run(x, d, Stat::Decay, super::super::decay_linear)
}

/// [`std`](super::super::std) of every asset of a panel.
pub fn std_panel<'a>(x: impl Into<Src<'a>>, d: usize) -> Panel {
    run(x, d, Stat::Std, super::super::std)
}

fn run<'a>(x: impl Into<Src<'a>>, d: usize, stat: Stat, one: fn(&[f64], usize, &mut [f64])) -> Panel {
    let x = x.into();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports AVX-512F (checked just above).
        return grouped([x], |[x], o| unsafe { avx512::walk(x, d, stat, o) });
    }
    super::super::apply(x.panel(), d, one)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::super::{exact_var, ILL_CONDITIONED};
    use super::{Stat, W};
    use crate::expr::kernels::simd::finite;
    use std::arch::x86_64::*;

    /// The walk of [`windows`](super::super::super::windows) with the running sums of
    /// `stat`, for eight interleaved lanes (`x[t * W + l]`, likewise `out`).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    pub unsafe fn walk(x: &[f64], d: usize, stat: Stat, out: &mut [f64]) {
        // One compiled walk per statistic, so that each loop holds only its own sums and
        // branches (one walk for all four spilled 25 vector registers to the stack).
        // SAFETY: passed on from the caller.
        unsafe {
            match stat {
                Stat::Sum => walk_of::sum(x, d, out),
                Stat::Mean => walk_of::mean(x, d, out),
                Stat::Decay => walk_of::decay(x, d, out),
                Stat::Std => walk_of::std(x, d, out),
            }
        }
    }

    mod walk_of {
        use super::{body, Stat};
        macro_rules! each {
            ($($name:ident: $stat:expr),*) => {$(
                /// # Safety
                /// The CPU must support AVX-512F.
                #[target_feature(enable = "avx512f")]
                pub unsafe fn $name(x: &[f64], d: usize, out: &mut [f64]) {
                    // SAFETY: passed on from the caller.
                    unsafe { body(x, d, $stat, out) }
                }
            )*};
        }
        each!(sum: Stat::Sum, mean: Stat::Mean, decay: Stat::Decay, std: Stat::Std);
    }

    /// The walk itself, compiled into each of [`walk_of`]'s functions with `stat` fixed.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline(always)]
    unsafe fn body(x: &[f64], d: usize, stat: Stat, out: &mut [f64]) {
        let n = x.len() / W;
        assert!(out.len() >= n * W && d >= 1, "interleaved output as long as x, window of a day or more");
        if stat == Stat::Std && d < 2 {
            out.fill(f64::NAN);
            return;
        }
        let (px, po) = (x.as_ptr(), out.as_mut_ptr());
        // SAFETY (every load below): rows t < n of `x`, which holds at least n·W values.
        let ld = |t: usize| unsafe { _mm512_loadu_pd(px.add(t * W)) };
        let dn = d as f64;
        let (vdn, vdn1, zero, nan) = (_mm512_set1_pd(dn), _mm512_set1_pd(dn - 1.0), _mm512_setzero_pd(), _mm512_set1_pd(f64::NAN));
        let (one, du, never) = (_mm512_set1_epi64(1), _mm512_set1_epi64(d as i64), _mm512_set1_epi64(-1));
        let (norm, inv, ill_k) = (_mm512_set1_pd((d * (d + 1)) as f64 / 2.0), _mm512_set1_pd(1.0 / dn), _mm512_set1_pd(ILL_CONDITIONED));
        // The window's plain sum, from −0.0 in day order (as `f64`'s `sum`).
        let window_sum = |from: usize, to: usize| (from..to).fold(_mm512_set1_pd(-0.0), |s, i| _mm512_add_pd(s, ld(i)));
        // Sums: the plain sum (Sum, Mean, Decay), the weighted sum (Decay), or the anchor
        // and the anchored sums of values and squares (Std).
        let (mut s, mut w, mut k, mut s1, mut s2) = (zero, zero, zero, zero, zero);
        // `good`: finite values in a row, up to today (reset by a non-finite one); the
        // window counts when it holds d of them.
        let (mut good, mut since, mut run) = (_mm512_setzero_si512(), never, _mm512_setzero_si512());
        let mut xp = nan;
        for t in 0..n {
            let xt = ld(t);
            let xo = if t >= d { ld(t - d) } else { zero };
            let ft = finite(xt);
            good = _mm512_maskz_add_epi64(ft, good, one);
            let ok = _mm512_cmpge_epu64_mask(good, du);
            let due = _mm512_cmpge_epu64_mask(since, du);
            since = _mm512_mask_mov_epi64(_mm512_mask_mov_epi64(_mm512_add_epi64(since, one), due, one), !ok, never);
            let (keep, refresh) = (ok & !due, ok & due);
            let value = match stat {
                Stat::Sum | Stat::Mean | Stat::Decay => {
                    if stat == Stat::Decay {
                        // W += d·x(t) − S (with the previous S), then S steps.
                        w = _mm512_mask_add_pd(w, keep, w, _mm512_sub_pd(_mm512_mul_pd(vdn, xt), s));
                    }
                    s = _mm512_mask_add_pd(s, keep, s, _mm512_sub_pd(xt, xo));
                    if refresh != 0 {
                        let from = t + 1 - d;
                        s = _mm512_mask_mov_pd(s, refresh, window_sum(from, t + 1));
                        if stat == Stat::Decay {
                            let e = (from..=t).fold(_mm512_set1_pd(-0.0), |e, i| {
                                _mm512_add_pd(e, _mm512_mul_pd(_mm512_set1_pd((i - from + 1) as f64), ld(i)))
                            });
                            w = _mm512_mask_mov_pd(w, refresh, e);
                        }
                    }
                    match stat {
                        Stat::Mean => _mm512_mul_pd(s, inv),
                        Stat::Decay => _mm512_div_pd(w, norm),
                        _ => s,
                    }
                }
                Stat::Std => {
                    // Run lengths of identical finite values: +1 when today repeats yesterday.
                    run = _mm512_maskz_mov_epi64(ft, _mm512_mask_add_epi64(one, _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>(ft, xt, xp), run, one));
                    let (a, r) = (_mm512_sub_pd(xt, k), _mm512_sub_pd(xo, k));
                    s1 = _mm512_mask_add_pd(s1, keep, s1, _mm512_sub_pd(a, r));
                    s2 = _mm512_mask_add_pd(s2, keep, s2, _mm512_sub_pd(_mm512_mul_pd(a, a), _mm512_mul_pd(r, r)));
                    if refresh != 0 {
                        let from = t + 1 - d;
                        let m = _mm512_div_pd(window_sum(from, t + 1), vdn);
                        let (mut e1, mut e2) = (_mm512_set1_pd(-0.0), _mm512_set1_pd(-0.0));
                        for i in from..=t {
                            let u = _mm512_sub_pd(ld(i), m);
                            e1 = _mm512_add_pd(e1, u);
                            e2 = _mm512_add_pd(e2, _mm512_mul_pd(u, u));
                        }
                        (k, s1, s2) = (_mm512_mask_mov_pd(k, refresh, m), _mm512_mask_mov_pd(s1, refresh, e1), _mm512_mask_mov_pd(s2, refresh, e2));
                    }
                    let var = _mm512_div_pd(_mm512_sub_pd(s2, _mm512_div_pd(_mm512_mul_pd(s1, s1), vdn)), vdn1);
                    let constant = _mm512_cmpge_epu64_mask(run, du);
                    let scale = _mm512_add_pd(s2, _mm512_mul_pd(_mm512_mul_pd(vdn, k), k));
                    let ill = _mm512_cmp_pd_mask::<_CMP_LE_OQ>(_mm512_mul_pd(var, vdn1), _mm512_mul_pd(ill_k, scale));
                    // `f64::max(var, 0)`: 0 for NaN, as maxpd's second operand.
                    let sd = _mm512_maskz_mov_pd(!constant, _mm512_sqrt_pd(_mm512_max_pd(var, zero)));
                    let exact = ok & ill & !constant;
                    if exact != 0 {
                        let mut v = [0.0; W];
                        // SAFETY: stores W values into an array of W.
                        unsafe { _mm512_storeu_pd(v.as_mut_ptr(), sd) };
                        exact_sd(exact, x, t + 1 - d, t + 1, &mut v);
                        // SAFETY: loads W values from an array of W.
                        unsafe { _mm512_loadu_pd(v.as_ptr()) }
                    } else {
                        sd
                    }
                }
            };
            xp = xt;
            // SAFETY: row t of `out` (asserted to hold n·W values).
            unsafe { _mm512_storeu_pd(po.add(t * W), _mm512_mask_mov_pd(nan, ok, value)) };
        }
    }

    /// Values equal up to rounding noise: the two-pass standard deviation of days
    /// `from..to` into `v[l]`, for each lane l set in `lanes`. Rare, and out of line so
    /// that the walk keeps its registers.
    #[cold]
    #[inline(never)]
    fn exact_sd(lanes: u8, x: &[f64], from: usize, to: usize, v: &mut [f64; W]) {
        for (l, v) in v.iter_mut().enumerate().filter(|(l, _)| lanes >> l & 1 == 1) {
            *v = exact_var(x[from * W + l..to * W].iter().step_by(W)).1.sqrt();
        }
    }
}
