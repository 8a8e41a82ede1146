//! `ts_corr`, `ts_cov` and `ts_rank` over eight assets at once, one asset per vector lane.
//!
//! Why: the one-asset walk ([`pair_windows`](super::pair_windows)) is bound by its divider
//! (three divisions and two square roots per window) and by its serial running sums. Eight
//! assets side by side keep exactly the same operations per lane, in the same order (so
//! the results are identical bit for bit), while each divide, square root and add works
//! on eight lanes per instruction. What is rare and per-asset stays per lane: the exact
//! recompute of the sums once per `d` steps and of an ill-conditioned window. Windows of
//! at most [`DIRECT_PAIR`] days skip the running sums: each is computed from its own
//! values, eight lanes at once ([`direct8_avx512`]), as the one-asset walk does there.
//!
//! Exactness: every lane's result is the one-asset kernel's, bit for bit (the tests
//! compare them on every window). Layout: a panel group as stored, date by date with its
//! eight assets side by side, so one date's eight values are one aligned load.

use super::{corr_of, cov_of, exact_moments, Extreme, DIRECT_PAIR, ILL_CONDITIONED};
use crate::data::Panel;
use crate::expr::kernels::Src;
use rayon::prelude::*;

mod sums;
pub use sums::{decay_linear_panel, mean_panel, std_panel, sum_panel};

/// Assets per group.
pub const W: usize = crate::data::LANES;

/// Running co-moment sums of the eight lanes (one [`Comoments`](super::Comoments) per
/// lane, as arrays).
#[derive(Default)]
struct Sums {
    kx: [f64; W],
    ky: [f64; W],
    sx: [f64; W],
    sy: [f64; W],
    sxx: [f64; W],
    syy: [f64; W],
    sxy: [f64; W],
}

/// Runs a window kernel over every asset of `K` input panels: each group of eight assets
/// goes to `eight(interleaved inputs, interleaved output)`, which must write every output
/// cell, where `x[t * W + l]` is the group's asset l on day t: the panel's own layout, so
/// the inputs are read where they lie. A last group of fewer than eight assets runs like
/// the others, its spare lanes computed from padding and never read.
///
/// The result goes to a fresh panel even where an input may be taken ([`Src::Take`]): the
/// kernels read days behind the one they write, so writing over the input needed a copy
/// of each group first, and without it the rolling kernels ran 3 to 30 % faster
/// (measured 2026-11-26). A taken input goes back to the pool at the end.
fn grouped<const K: usize>(inputs: [Src<'_>; K], eight: impl Fn([&[f64]; K], &mut [f64]) + Sync) -> Panel {
    let (nd, na) = (inputs[0].panel().n_dates(), inputs[0].panel().n_assets());
    assert!(inputs.iter().all(|s| s.panel().n_dates() == nd && s.panel().n_assets() == na), "panels of one shape");
    let mut out = Panel::scratch(nd, na);
    if nd == 0 || na == 0 {
        return out;
    }
    out.par_groups_mut().enumerate().for_each(|(g, o)| eight(std::array::from_fn(|k| inputs[k].panel().group(g)), o));
    out
}

/// `ts_corr` (`CORR`) or `ts_cov` of every asset of two panels, exactly as
/// [`pair_windows`](super::pair_windows) computes them with [`corr_of`] or [`cov_of`].
pub fn pair_panel<'a, const CORR: bool>(x: impl Into<Src<'a>>, y: impl Into<Src<'a>>, d: usize) -> Panel {
    grouped([x.into(), y.into()], |[x, y], o| windows8::<CORR>(x, y, d, o))
}

/// A window's value from its moments: [`corr_of`] or [`cov_of`].
#[inline(always)]
fn finish<const CORR: bool>(m: (f64, f64, f64), cx: bool, cy: bool) -> f64 {
    if CORR {
        corr_of(m, cx, cy)
    } else {
        cov_of(m, cx, cy)
    }
}

/// [`extreme`](super::extreme) (`ts_min`, `ts_max`, `ts_argmin`, `ts_argmax`) of every
/// asset of a panel.
pub fn extreme_panel<'a>(x: impl Into<Src<'a>>, d: usize, which: Extreme) -> Panel {
    grouped([x.into()], |[x], o| match which {
        Extreme::Max => extreme8::<true, false>(x, d, o),
        Extreme::Min => extreme8::<false, false>(x, d, o),
        Extreme::ArgMax => extreme8::<true, true>(x, d, o),
        Extreme::ArgMin => extreme8::<false, true>(x, d, o),
    })
}

/// Windows up to this long take [`direct`] in `ts_min` and `ts_max`: d − 1 selects per
/// eight cells cost less than the block passes' three selects and two scratch rows
/// (measured: 3 to 5 days 25 % faster, 7 or 8 about the same, 11 and 12 slower).
const DIRECT_EXTREME: usize = 6;

/// `ts_min` (`MAX` false) or `ts_max` of eight interleaved lanes by a walk over each
/// window, from its oldest day: a day replaces the best so far only when strictly better,
/// so ties (−0 and 0) go to the older day, as in the block passes. Windows holding a
/// non-finite value are NaN, so their values need no replacing. (Its walk over the days
/// repeats the block passes' last loop: one helper taking each day's result as a closure
/// made this kernel 28 % and that loop 9–20 % slower.)
#[inline(always)]
fn direct<const MAX: bool>(x: &[f64], d: usize, out: &mut [f64]) {
    #[allow(clippy::eq_op)]
    let finite = |v: f64| v - v == 0.0;
    let n = x.len() / W;
    let mut nbad = [0u32; W];
    for t in 0..n {
        let xt = row(x, t);
        let xo = if t >= d { row(x, t - d) } else { [0.0; W] };
        for l in 0..W {
            nbad[l] = nbad[l] + u32::from(!finite(xt[l])) - u32::from(!finite(xo[l]));
        }
        let o = &mut out[t * W..(t + 1) * W];
        if t + 1 < d {
            o.fill(f64::NAN);
            continue;
        }
        let mut best = row(x, t + 1 - d);
        for i in t + 2 - d..=t {
            let v = row(x, i);
            for l in 0..W {
                let c = if MAX { v[l] > best[l] } else { v[l] < best[l] };
                best[l] = if c { v[l] } else { best[l] };
            }
        }
        for l in 0..W {
            o[l] = if nbad[l] == 0 { best[l] } else { f64::NAN };
        }
    }
}

/// [`extreme`](super::extreme) for eight interleaved lanes: the same block prefix/suffix
/// passes and the same winner per window (ties to the older day), each step a compare and
/// selects on eight lanes; AVX-512 code where the CPU has it. Short windows of `ts_min`
/// and `ts_max` walk each window instead ([`direct`]).
fn extreme8<const MAX: bool, const ARG: bool>(x: &[f64], d: usize, out: &mut [f64]) {
    #[inline(always)]
    fn body<const MAX: bool, const ARG: bool>(x: &[f64], d: usize, out: &mut [f64], scratch: &mut [Vec<f64>; 4]) {
        let n = x.len() / W;
        if d == 0 || n < d {
            out.fill(f64::NAN);
            return;
        }
        #[allow(clippy::eq_op)]
        let finite = |v: f64| v - v == 0.0;
        let worst = if MAX { f64::NEG_INFINITY } else { f64::INFINITY };
        let better = |a: f64, b: f64| if MAX { a > b } else { a < b };
        let val = |t: usize| row(x, t).map(|u| if finite(u) { u } else { worst });
        if !ARG && d <= DIRECT_EXTREME {
            return direct::<MAX>(x, d, out);
        }
        for b in scratch.iter_mut() {
            b.resize(n * W, 0.0);
        }
        let [pv, pi, sv, si] = scratch;
        for b0 in (0..n).step_by(d) {
            let b1 = (b0 + d).min(n);
            let (mut bv, mut bi) = (val(b0), [b0 as f64; W]);
            for i in b0..b1 {
                let v = val(i);
                for l in 0..W {
                    let c = better(v[l], bv[l]);
                    bv[l] = if c { v[l] } else { bv[l] };
                    bi[l] = if c { i as f64 } else { bi[l] };
                }
                pv[i * W..(i + 1) * W].copy_from_slice(&bv);
                if ARG {
                    pi[i * W..(i + 1) * W].copy_from_slice(&bi);
                }
            }
            let (mut bv, mut bi) = (val(b1 - 1), [(b1 - 1) as f64; W]);
            for i in (b0..b1).rev() {
                let v = val(i);
                for l in 0..W {
                    let c = !better(bv[l], v[l]);
                    bv[l] = if c { v[l] } else { bv[l] };
                    bi[l] = if c { i as f64 } else { bi[l] };
                }
                sv[i * W..(i + 1) * W].copy_from_slice(&bv);
                if ARG {
                    si[i * W..(i + 1) * W].copy_from_slice(&bi);
                }
            }
        }
        let mut nbad = [0u32; W];
        for t in 0..n {
            let xt = row(x, t);
            let xo = if t >= d { row(x, t - d) } else { [0.0; W] };
            for l in 0..W {
                nbad[l] = nbad[l] + u32::from(!finite(xt[l])) - u32::from(!finite(xo[l]));
            }
            let o = &mut out[t * W..(t + 1) * W];
            if t + 1 < d {
                o.fill(f64::NAN);
                continue;
            }
            // The window is the tail of s's block (from s) plus the head of t's (to t).
            let s = t + 1 - d;
            let (nv, ov) = (row(pv, t), row(sv, s));
            let (ni, oi) = if ARG { (row(pi, t), row(si, s)) } else { ([0.0; W], [0.0; W]) };
            for l in 0..W {
                let c = better(nv[l], ov[l]);
                let r = if ARG { (if c { ni[l] } else { oi[l] }) - s as f64 + 1.0 } else if c { nv[l] } else { ov[l] };
                o[l] = if nbad[l] == 0 { r } else { f64::NAN };
            }
        }
    }
    thread_local! {
        static SCRATCH: std::cell::RefCell<[Vec<f64>; 4]> = const { std::cell::RefCell::new([Vec::new(), Vec::new(), Vec::new(), Vec::new()]) };
    }
    SCRATCH.with_borrow_mut(|scratch| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            #[target_feature(enable = "avx512f")]
            fn wide<const MAX: bool, const ARG: bool>(x: &[f64], d: usize, out: &mut [f64], scratch: &mut [Vec<f64>; 4]) {
                body::<MAX, ARG>(x, d, out, scratch)
            }
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { wide::<MAX, ARG>(x, d, out, scratch) };
        }
        body::<MAX, ARG>(x, d, out, scratch)
    })
}

/// [`ts_rank`](super::ts_rank) of every asset of a panel.
pub fn ts_rank_panel<'a>(x: impl Into<Src<'a>>, d: usize) -> Panel {
    grouped([x.into()], |[x], o| ts_rank8(x, d, o))
}

/// [`ts_rank`](super::ts_rank) for eight interleaved lanes: the same counts, eight lanes
/// at a time; on AVX-512 as sums of per-day shares ([`ts_rank8_avx512`]).
fn ts_rank8(x: &[f64], d: usize, out: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports AVX-512F (checked just above).
        return unsafe { ts_rank8_avx512(x, d, out) };
    }
    ts_rank8_walk(x, d, out)
}

/// The portable walk of `ts_rank8`: the days with a full window, NaN where it holds a
/// non-finite value, each lane's rank of today's value from [`ranks`].
fn ts_rank8_walk(x: &[f64], d: usize, out: &mut [f64]) {
    let n = x.len() / W;
    let mut nbad = [0u32; W];
    let dn = d as f64;
    for t in 0..n {
        let xt = row(x, t);
        let xo = if t >= d { row(x, t - d) } else { [0.0; W] };
        for l in 0..W {
            nbad[l] = nbad[l] + u32::from(!xt[l].is_finite()) - u32::from(!xo[l].is_finite());
        }
        let o = &mut out[t * W..(t + 1) * W];
        if t + 1 < d || d == 0 {
            o.fill(f64::NAN);
            continue;
        }
        let r = ranks(&x[(t + 1 - d) * W..(t + 1) * W], xt, dn);
        for l in 0..W {
            o[l] = if nbad[l] == 0 { r[l] } else { f64::NAN };
        }
    }
}

/// Each lane's percentile rank of `xt` among the window's rows, ties averaged.
#[inline(always)]
fn ranks(win: &[f64], xt: [f64; W], dn: f64) -> [f64; W] {
    let (mut lt, mut eq) = ([0u32; W], [0u32; W]);
    for u in win.chunks_exact(W) {
        for l in 0..W {
            lt[l] += u32::from(u[l] < xt[l]);
            eq[l] += u32::from(u[l] == xt[l]);
        }
    }
    std::array::from_fn(|l| (lt[l] as f64 + (eq[l] as f64 + 1.0) / 2.0) / dn)
}

/// [`ts_rank8_walk`] with [`ranks`], in AVX-512 registers. Inside a window that counts
/// (all its values finite) each earlier day's share of the rank, 1 below today's value, ½
/// equal, 0 above, is one `vfixupimmpd` of the difference `u − x_t` (classed as negative,
/// zero or positive; an overflow to ±∞ keeps its sign, and the difference of two finite
/// values is zero exactly when they are equal): a subtraction, a fixup and an add per
/// window day, where two compares into masks and two masked adds were (the compares all
/// run on one port). Today's own day adds ½ without being read. Every share and sum is a
/// multiple of ½ no larger than d, so exact: `lt + (eq + 1)/2` is the same double, and the
/// rank the same bits. The window's validity is a count of finite values in a row, kept in
/// a register (compiled from the portable walk, a count's scalar per-lane tests were a
/// third of `ts_rank`'s time). (Its division as [`DivBy`](crate::expr::kernels::simd::DivBy)'s
/// multiply-adds was measured: no faster, the walk is not divider-bound.)
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn ts_rank8_avx512(x: &[f64], d: usize, out: &mut [f64]) {
    use crate::expr::kernels::simd::finite;
    use std::arch::x86_64::*;
    let n = x.len() / W;
    assert!(out.len() >= n * W, "interleaved output as long as x");
    // SAFETY (every load and store below): rows t < n of slices holding n·W values.
    let ld = |t: usize| unsafe { _mm512_loadu_pd(x[t * W..t * W + W].as_ptr()) };
    let (nan, zero, one_pd, dn) = (_mm512_set1_pd(f64::NAN), _mm512_setzero_pd(), _mm512_set1_pd(1.0), _mm512_set1_pd(d as f64));
    // vfixupimmpd's table, a nibble per class of `u − x_t` (class j at bits 4j..4j + 4):
    // QNaN 0, SNaN 1, ±0 2, +1 3, −∞ 4, +∞ 5, negative 6, positive 7; answers 0x8 = +0,
    // 0xA = +1, 0xB = +½.
    let shares = _mm512_set1_epi64(0x8A8A_8B88);
    let share = |u: __m512d, xt: __m512d| _mm512_fixupimm_pd::<0>(zero, _mm512_sub_pd(u, xt), shares);
    // `good`: finite values in a row, up to today (reset by a non-finite one); the window
    // counts when it holds d of them (the correlation walk's count).
    let (one, du) = (_mm512_set1_epi64(1), _mm512_set1_epi64(d as i64));
    let mut good = _mm512_setzero_si512();
    for t in 0..n {
        let xt = ld(t);
        good = _mm512_maskz_add_epi64(finite(xt), good, one);
        let o = out[t * W..(t + 1) * W].as_mut_ptr();
        if t + 1 < d || d == 0 {
            // SAFETY: `o` holds W values.
            unsafe { _mm512_storeu_pd(o, nan) };
            continue;
        }
        // Two sums, so that the adds' latency overlaps; today's ½ and the formula's ½.
        let (mut s0, mut s1) = (one_pd, zero);
        let mut i = t + 1 - d;
        while i + 1 < t {
            s0 = _mm512_add_pd(s0, share(ld(i), xt));
            s1 = _mm512_add_pd(s1, share(ld(i + 1), xt));
            i += 2;
        }
        if i < t {
            s0 = _mm512_add_pd(s0, share(ld(i), xt));
        }
        let r = _mm512_div_pd(_mm512_add_pd(s0, s1), dn);
        let ok = _mm512_cmpge_epu64_mask(good, du);
        // SAFETY: `o` holds W values.
        unsafe { _mm512_storeu_pd(o, _mm512_mask_mov_pd(nan, ok, r)) };
    }
}

/// The walk of [`pair_windows`](super::pair_windows) for eight lanes: on AVX-512 with
/// explicit vector code ([`walk_avx512`]), else the portable [`walk`].
fn windows8<const CORR: bool>(x: &[f64], y: &[f64], d: usize, out: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports AVX-512F (checked just above).
        return unsafe { walk8_avx512::<CORR>(x, y, d, crate::expr::kernels::simd::divider_is_slow(), out) };
    }
    walk(x, y, d, out, finish::<CORR>)
}

/// [`direct8_avx512`] for windows of 2 to [`DIRECT_PAIR`] days, compiled for each length;
/// longer ones: [`walk_avx512`] compiled for d: one walk per (d, d − 1) being a power of two or not
/// (dividing by a power of two is multiplying by its reciprocal, the same bits: both round
/// the same exact quotient), and per whether the other divisions by d and d − 1 (six of
/// the walk's seven) run on the divider or as
/// [`DivBy`](crate::expr::kernels::simd::DivBy)'s multiply-adds (`fma`), which give the
/// same bits.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
unsafe fn walk8_avx512<const CORR: bool>(x: &[f64], y: &[f64], d: usize, fma: bool, out: &mut [f64]) {
    // SAFETY (each call): passed on from the caller.
    unsafe {
        if d <= DIRECT_PAIR {
            match (d, fma) {
                (2, false) => return direct8_avx512::<CORR, 2, false>(x, y, out),
                (2, true) => return direct8_avx512::<CORR, 2, true>(x, y, out),
                (3, false) => return direct8_avx512::<CORR, 3, false>(x, y, out),
                (3, true) => return direct8_avx512::<CORR, 3, true>(x, y, out),
                (4, false) => return direct8_avx512::<CORR, 4, false>(x, y, out),
                (4, true) => return direct8_avx512::<CORR, 4, true>(x, y, out),
                (5, false) => return direct8_avx512::<CORR, 5, false>(x, y, out),
                (5, true) => return direct8_avx512::<CORR, 5, true>(x, y, out),
                (6, false) => return direct8_avx512::<CORR, 6, false>(x, y, out),
                (6, true) => return direct8_avx512::<CORR, 6, true>(x, y, out),
                // d < 2: the walk's own NaN.
                _ => {}
            }
        }
        match (d.is_power_of_two(), d.saturating_sub(1).is_power_of_two(), fma) {
            (true, _, false) => walk_avx512::<CORR, true, false, false>(x, y, d, out),
            (true, _, true) => walk_avx512::<CORR, true, false, true>(x, y, d, out),
            (_, true, false) => walk_avx512::<CORR, false, true, false>(x, y, d, out),
            (_, true, true) => walk_avx512::<CORR, false, true, true>(x, y, d, out),
            (_, _, false) => walk_avx512::<CORR, false, false, false>(x, y, d, out),
            (_, _, true) => walk_avx512::<CORR, false, false, true>(x, y, d, out),
        }
    }
}

/// [`exact_moments`] of lane l's window `from..=to`: for the portable walk's exact
/// recomputes of ill-conditioned windows (the AVX-512 walk recomputes all eight lanes at
/// once, [`recompute_ill`]). The lane's values are copied out first (into buffers kept
/// per thread): read in place, stepping over the other lanes, the three passes took
/// 0.8 % of the alpha101 batch's profile, copied 0.6 %.
fn exact_lane(x: &[f64], y: &[f64], l: usize, from: usize, to: usize) -> (f64, f64, f64) {
    thread_local! {
        static BUF: std::cell::RefCell<(Vec<f64>, Vec<f64>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    BUF.with_borrow_mut(|(a, b)| {
        a.clear();
        b.clear();
        a.extend(x[from * W + l..=to * W + l].iter().step_by(W));
        b.extend(y[from * W + l..=to * W + l].iter().step_by(W));
        exact_moments(a, b)
    })
}

/// Day t's eight lanes (one bounds check, then a vector load).
#[inline(always)]
fn row(v: &[f64], t: usize) -> [f64; W] {
    let s = &v[t * W..t * W + W];
    std::array::from_fn(|l| s[l])
}

/// [`Comoments::exact`](super::Comoments::exact) of days `from..to` for every lane, operation for operation
/// (`f64`'s `sum` starts from −0.0; the moment sums from 0.0).
#[inline(always)]
fn exact8(x: &[f64], y: &[f64], from: usize, to: usize) -> Sums {
    let n = (to - from) as f64;
    // Whole rows as fixed-size chunks and the sums in local arrays: written with per-day
    // `row` calls into the struct's fields, this compiled to scalar code (measured: half
    // of `ts_corr`'s instructions).
    let (xs, ys) = (&x[from * W..to * W], &y[from * W..to * W]);
    let (mut mx, mut my) = ([-0.0; W], [-0.0; W]);
    for (xt, yt) in xs.chunks_exact(W).zip(ys.chunks_exact(W)) {
        for l in 0..W {
            mx[l] += xt[l];
            my[l] += yt[l];
        }
    }
    let (kx, ky) = (mx.map(|v| v / n), my.map(|v| v / n));
    let (mut sx, mut sy, mut sxx, mut syy, mut sxy) = ([0.0; W], [0.0; W], [0.0; W], [0.0; W], [0.0; W]);
    for (xt, yt) in xs.chunks_exact(W).zip(ys.chunks_exact(W)) {
        for l in 0..W {
            let (a, b) = (xt[l] - kx[l], yt[l] - ky[l]);
            sx[l] += a;
            sy[l] += b;
            sxx[l] += a * a;
            syy[l] += b * b;
            sxy[l] += a * b;
        }
    }
    Sums { kx, ky, sx, sy, sxx, syy, sxy }
}

/// The walk of [`pair_windows`](super::pair_windows) for eight lanes: `x[t * W + l]` is
/// lane l's value on day t (likewise `y` and `out`).
#[inline(always)]
fn walk<F: Fn((f64, f64, f64), bool, bool) -> f64 + Copy>(
    x: &[f64],
    y: &[f64],
    d: usize,
    out: &mut [f64],
    f: F,
) {
    let n = x.len() / W;
    if d < 2 {
        out.fill(f64::NAN);
        return;
    }
    let dn = d as f64;
    let du = d as u64;
    let (mut nbad, mut since, mut rx, mut ry) = ([0u64; W], [u64::MAX; W], [0u64; W], [0u64; W]);
    let mut c = Sums::default();
    // `v - v == 0` exactly when v is finite; unlike `is_finite` it stays in float
    // registers, which lets the lanes vectorise.
    #[allow(clippy::eq_op)]
    let finite = |v: f64| v - v == 0.0;
    if d <= DIRECT_PAIR {
        // Each window from its own values, as the one-asset walk does at these lengths.
        for t in 0..n {
            let (xt, yt) = (row(x, t), row(y, t));
            let (xo, yo) = if t >= d { (row(x, t - d), row(y, t - d)) } else { ([0.0; W], [0.0; W]) };
            for l in 0..W {
                nbad[l] = nbad[l] + u64::from(!(finite(xt[l]) & finite(yt[l]))) - u64::from(!(finite(xo[l]) & finite(yo[l])));
                out[t * W + l] = if t + 1 >= d && nbad[l] == 0 { f(exact_lane(x, y, l, t + 1 - d, t), false, false) } else { f64::NAN };
            }
        }
        return;
    }
    for t in 0..n {
        let (xt, yt) = (row(x, t), row(y, t));
        let (xp, yp) = if t > 0 { (row(x, t - 1), row(y, t - 1)) } else { ([f64::NAN; W], [f64::NAN; W]) };
        // Before day d the window drops nothing: zeros count as finite and are not pushed.
        let (xo, yo) = if t >= d { (row(x, t - d), row(y, t - d)) } else { ([0.0; W], [0.0; W]) };
        let mut valid = [false; W];
        let mut refresh = 0u32;
        for l in 0..W {
            let (a, b) = (xt[l], yt[l]);
            let (fa, fb) = (finite(a), finite(b));
            rx[l] = if fa { if a == xp[l] { rx[l] + 1 } else { 1 } } else { 0 };
            ry[l] = if fb { if b == yp[l] { ry[l] + 1 } else { 1 } } else { 0 };
            nbad[l] = nbad[l] + u64::from(!(fa & fb)) - u64::from(!(finite(xo[l]) & finite(yo[l])));
            let ok = t + 1 >= d && nbad[l] == 0;
            let due = since[l] >= du;
            // Comoments::push(x[t], y[t], 1) then push(x[t-d], y[t-d], -1), term by term:
            // 1·a is a and (−1·a)·b is −(a·b), exactly.
            let (ka, kb) = (a - c.kx[l], b - c.ky[l]);
            let (oa, ob) = (xo[l] - c.kx[l], yo[l] - c.ky[l]);
            let keep = ok & !due;
            c.sx[l] = if keep { c.sx[l] + ka - oa } else { c.sx[l] };
            c.sy[l] = if keep { c.sy[l] + kb - ob } else { c.sy[l] };
            c.sxx[l] = if keep { c.sxx[l] + ka * ka - oa * oa } else { c.sxx[l] };
            c.syy[l] = if keep { c.syy[l] + kb * kb - ob * ob } else { c.syy[l] };
            c.sxy[l] = if keep { c.sxy[l] + ka * kb - oa * ob } else { c.sxy[l] };
            since[l] = if !ok {
                u64::MAX
            } else if due {
                1
            } else {
                since[l].wrapping_add(1)
            };
            valid[l] = ok;
            refresh |= u32::from(ok & due) << l;
        }
        if refresh != 0 {
            // Usually every lane at once (their schedules only part at gaps in the data):
            // recompute all eight and keep the lanes that are due.
            let e = exact8(x, y, t + 1 - d, t + 1);
            for l in 0..W {
                let m = refresh >> l & 1 == 1;
                for (dst, src) in [
                    (&mut c.kx, &e.kx),
                    (&mut c.ky, &e.ky),
                    (&mut c.sx, &e.sx),
                    (&mut c.sy, &e.sy),
                    (&mut c.sxx, &e.sxx),
                    (&mut c.syy, &e.syy),
                    (&mut c.sxy, &e.sxy),
                ] {
                    dst[l] = if m { src[l] } else { dst[l] };
                }
            }
        }
        let o = &mut out[t * W..(t + 1) * W];
        let mut exact = 0u32;
        for l in 0..W {
            // Comoments::moments, operation for operation.
            let cov = (c.sxy[l] - c.sx[l] * c.sy[l] / dn) / (dn - 1.0);
            let vx = (c.sxx[l] - c.sx[l] * c.sx[l] / dn) / (dn - 1.0);
            let vy = (c.syy[l] - c.sy[l] * c.sy[l] / dn) / (dn - 1.0);
            let ill = (vx * (dn - 1.0) <= ILL_CONDITIONED * (c.sxx[l] + dn * c.kx[l] * c.kx[l]))
                | (vy * (dn - 1.0) <= ILL_CONDITIONED * (c.syy[l] + dn * c.ky[l] * c.ky[l]));
            let (cx, cy) = (rx[l] >= du, ry[l] >= du);
            // Selects, not branches, so that the lanes vectorise.
            let z = cx | cy;
            let m = (if z { 0.0 } else { cov }, if z { 0.0 } else { vx }, if z { 0.0 } else { vy });
            let r = f(m, cx, cy);
            o[l] = if valid[l] { r } else { f64::NAN };
            exact |= u32::from(valid[l] & ill & !cx & !cy) << l;
        }
        while exact != 0 {
            let l = exact.trailing_zeros() as usize;
            exact &= exact - 1;
            o[l] = f(exact_lane(x, y, l, t + 1 - d, t), false, false);
        }
    }
}

/// [`walk`] written with AVX-512 instructions, one asset per lane: the same operations in
/// the same order (so the same bits), with the running sums, counters and masks held in
/// registers. The compiled [`walk`] kept its sums on the stack and turned [`exact8`]'s
/// refresh into scalar code: together more than half of `ts_corr`'s time.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn walk_avx512<const CORR: bool, const POW2_D: bool, const POW2_D1: bool, const FMA: bool>(x: &[f64], y: &[f64], d: usize, out: &mut [f64]) {
    use crate::expr::kernels::simd::{finite, DivBy};
    use std::arch::x86_64::*;
    let n = x.len() / W;
    if d < 2 {
        out.fill(f64::NAN);
        return;
    }
    assert!(y.len() >= n * W && out.len() >= n * W, "interleaved y and output at least as long as x");
    // Raw pointers and no bounds checks in the loop: with them, the loop's index and
    // bounds values outgrew the registers, and how the compiler spilled them changed from
    // build to build with the crate's partitioning (`ts_corr` ran at 44 or 60 ms for the
    // same three correlations).
    let (px, py, po) = (x.as_ptr(), y.as_ptr(), out.as_mut_ptr());
    // SAFETY (every load below): rows t < n of slices holding at least n·W values
    // (asserted above).
    let ld = |v: *const f64, t: usize| unsafe { _mm512_loadu_pd(v.add(t * W)) };
    let dn = d as f64;
    let (vdn, vdn1, zero, nan) = (_mm512_set1_pd(dn), _mm512_set1_pd(dn - 1.0), _mm512_setzero_pd(), _mm512_set1_pd(f64::NAN));
    // `v / d` and `v / (d − 1)`, with the divider's bits.
    debug_assert!(!POW2_D || d.is_power_of_two());
    debug_assert!(!POW2_D1 || (d - 1).is_power_of_two());
    let (div_d, div_d1) = (DivBy::new(d), DivBy::new(d - 1));
    let by_d = |v: __m512d| div_d.quotient::<FMA>(v, POW2_D);
    let by_d1 = |v: __m512d| div_d1.quotient::<FMA>(v, POW2_D1);
    let (one, du, never) = (_mm512_set1_epi64(1), _mm512_set1_epi64(d as i64), _mm512_set1_epi64(-1));
    let ill_k = _mm512_set1_pd(ILL_CONDITIONED);
    let (mut kx, mut ky, mut sx, mut sy, mut sxx, mut syy, mut sxy) = (zero, zero, zero, zero, zero, zero, zero);
    // d·k² of each anchor, for the ill-conditioning test: the anchors move only at a
    // refresh, so it is computed there (the same products, once per d steps).
    let (mut dkkx, mut dkky) = (zero, zero);
    // `good`: rows in a row, up to today, whose x and y are both finite; a window counts
    // when it holds d of them (which also asks for d rows). Counted as the runs below are:
    // three operations a row where a count of the window's non-finite rows (adding today's,
    // testing and taking out the row leaving) took eleven and a branch.
    let (mut good, mut since, mut rx, mut ry) = (_mm512_setzero_si512(), never, _mm512_setzero_si512(), _mm512_setzero_si512());
    let (mut xp, mut yp) = (nan, nan);
    for t in 0..n {
        let (xt, yt) = (ld(px, t), ld(py, t));
        let (xo, yo) = if t >= d { (ld(px, t - d), ld(py, t - d)) } else { (zero, zero) };
        let (fa, fb) = (finite(xt), finite(yt));
        // Run lengths of identical finite values: +1 when today repeats yesterday.
        rx = _mm512_maskz_mov_epi64(fa, _mm512_mask_add_epi64(one, _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>(fa, xt, xp), rx, one));
        ry = _mm512_maskz_mov_epi64(fb, _mm512_mask_add_epi64(one, _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>(fb, yt, yp), ry, one));
        good = _mm512_maskz_add_epi64(fa & fb, good, one);
        let ok = _mm512_cmpge_epu64_mask(good, du);
        let due = _mm512_cmpge_epu64_mask(since, du);
        let keep = ok & !due;
        let (ka, kb) = (_mm512_sub_pd(xt, kx), _mm512_sub_pd(yt, ky));
        let (oa, ob) = (_mm512_sub_pd(xo, kx), _mm512_sub_pd(yo, ky));
        sx = _mm512_mask_sub_pd(sx, keep, _mm512_add_pd(sx, ka), oa);
        sy = _mm512_mask_sub_pd(sy, keep, _mm512_add_pd(sy, kb), ob);
        sxx = _mm512_mask_sub_pd(sxx, keep, _mm512_add_pd(sxx, _mm512_mul_pd(ka, ka)), _mm512_mul_pd(oa, oa));
        syy = _mm512_mask_sub_pd(syy, keep, _mm512_add_pd(syy, _mm512_mul_pd(kb, kb)), _mm512_mul_pd(ob, ob));
        sxy = _mm512_mask_sub_pd(sxy, keep, _mm512_add_pd(sxy, _mm512_mul_pd(ka, kb)), _mm512_mul_pd(oa, ob));
        // since: never without a full window, 1 after a refresh, else one more.
        since = _mm512_mask_mov_epi64(never, ok, _mm512_mask_mov_epi64(_mm512_add_epi64(since, one), due, one));
        let refresh = ok & due;
        if refresh != 0 {
            let e = exact8_avx512(x, y, t + 1 - d, t + 1, by_d);
            kx = _mm512_mask_mov_pd(kx, refresh, e[0]);
            ky = _mm512_mask_mov_pd(ky, refresh, e[1]);
            sx = _mm512_mask_mov_pd(sx, refresh, e[2]);
            sy = _mm512_mask_mov_pd(sy, refresh, e[3]);
            sxx = _mm512_mask_mov_pd(sxx, refresh, e[4]);
            syy = _mm512_mask_mov_pd(syy, refresh, e[5]);
            sxy = _mm512_mask_mov_pd(sxy, refresh, e[6]);
            dkkx = _mm512_mul_pd(_mm512_mul_pd(vdn, kx), kx);
            dkky = _mm512_mul_pd(_mm512_mul_pd(vdn, ky), ky);
        }
        // Comoments::moments, operation for operation.
        let cov = by_d1(_mm512_sub_pd(sxy, by_d(_mm512_mul_pd(sx, sy))));
        let vx = by_d1(_mm512_sub_pd(sxx, by_d(_mm512_mul_pd(sx, sx))));
        let vy = by_d1(_mm512_sub_pd(syy, by_d(_mm512_mul_pd(sy, sy))));
        let ill_of = |v: __m512d, s: __m512d, dkk: __m512d| _mm512_cmp_pd_mask::<_CMP_LE_OQ>(_mm512_mul_pd(v, vdn1), _mm512_mul_pd(ill_k, _mm512_add_pd(s, dkk)));
        let ill = ill_of(vx, sxx, dkkx) | ill_of(vy, syy, dkky);
        let z = _mm512_cmpge_epu64_mask(rx, du) | _mm512_cmpge_epu64_mask(ry, du);
        let (c, vx, vy) = (_mm512_maskz_mov_pd(!z, cov), _mm512_maskz_mov_pd(!z, vx), _mm512_maskz_mov_pd(!z, vy));
        let r = if CORR {
            corr8(c, vx, vy, z)
        } else {
            // cov_of: 0 where a side is constant, which `c` already is.
            c
        };
        // SAFETY: row t < n of `out`, which holds at least n·W values (asserted above).
        unsafe { _mm512_storeu_pd(po.add(t * W), _mm512_mask_mov_pd(nan, ok, r)) };
        let exact = ok & ill & !z;
        if exact != 0 {
            // SAFETY: the CPU has AVX-512F (this function's own requirement); row t < n of
            // `out` (asserted above), written through `po` like every other write of the
            // loop.
            unsafe { recompute_ill::<CORR>(exact, x, y, t + 1 - d..t + 1, po.add(t * W), by_d, by_d1) };
        }
        (xp, yp) = (xt, yt);
    }
}

// `walk8_avx512` dispatches `direct8_avx512` for each window length up to DIRECT_PAIR.
const _: () = assert!(DIRECT_PAIR == 6, "add or remove direct8_avx512's arms in walk8_avx512");

/// `ts_corr` (`CORR`) or `ts_cov` of eight lanes over windows of `D` days (at most
/// [`DIRECT_PAIR`]), each window from its own values ([`exact_window8`]); the finite rows
/// in a row tell which windows count, as in [`walk_avx512`]. With the window's length a
/// constant, its rows and their differences from the anchor stay in registers between
/// the two passes. The divisions by D and D − 1 as the walk makes them
/// ([`DivBy::quotient`](crate::expr::kernels::simd::DivBy::quotient)).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn direct8_avx512<const CORR: bool, const D: usize, const FMA: bool>(x: &[f64], y: &[f64], out: &mut [f64]) {
    use crate::expr::kernels::simd::{finite, DivBy};
    use std::arch::x86_64::*;
    let n = x.len() / W;
    assert!(y.len() >= n * W && out.len() >= n * W, "interleaved y and output at least as long as x");
    let nan = _mm512_set1_pd(f64::NAN);
    let (div_d, div_d1) = (DivBy::new(D), DivBy::new(D - 1));
    let by_d = |v: __m512d| div_d.quotient::<FMA>(v, D.is_power_of_two());
    let by_d1 = |v: __m512d| div_d1.quotient::<FMA>(v, (D - 1).is_power_of_two());
    let (one, du) = (_mm512_set1_epi64(1), _mm512_set1_epi64(D as i64));
    let mut good = _mm512_setzero_si512();
    for t in 0..n {
        let (xt, yt) = (&x[t * W..t * W + W], &y[t * W..t * W + W]);
        // SAFETY: each slice holds W values.
        let (xt, yt) = unsafe { (_mm512_loadu_pd(xt.as_ptr()), _mm512_loadu_pd(yt.as_ptr())) };
        good = _mm512_maskz_add_epi64(finite(xt) & finite(yt), good, one);
        let ok = _mm512_cmpge_epu64_mask(good, du);
        // (A full window needs D rows, so t + 1 ≥ D where ok is set.)
        let r = if ok == 0 { nan } else { exact_window8::<CORR>(x, y, t + 1 - D..t + 1, by_d, by_d1) };
        let o = &mut out[t * W..t * W + W];
        // SAFETY: `o` holds W values.
        unsafe { _mm512_storeu_pd(o.as_mut_ptr(), _mm512_mask_mov_pd(nan, ok, r)) };
    }
}

/// The windows of `days` (d of them) of the lanes set in `lanes`, recomputed exactly (they
/// were ill-conditioned for the running sums) into `o`, the day's eight outputs
/// ([`exact_window8`]). Lane by lane, copying each lane's values out first, these windows
/// (1.4 million lane-windows in the alpha101 batch, many of them ranks that barely move)
/// were 1 % of its profile. Kept out of line so that the walk's loop keeps its registers.
///
/// # Safety
/// The CPU must support AVX-512F; `o` must be valid for writing eight values.
#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
#[target_feature(enable = "avx512f")]
unsafe fn recompute_ill<const CORR: bool>(
    lanes: u8,
    x: &[f64],
    y: &[f64],
    days: std::ops::Range<usize>,
    o: *mut f64,
    by_d: impl Fn(std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d,
    by_d1: impl Fn(std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d,
) {
    let r = exact_window8::<CORR>(x, y, days, by_d, by_d1);
    // SAFETY: `o` holds eight values (the caller's).
    unsafe { std::arch::x86_64::_mm512_mask_storeu_pd(o, lanes, r) };
}

/// The eight lanes' windows `days` (d of them), each computed from its own values: each
/// lane's [`exact_moments`](super::exact_moments) and [`finish`], operation for operation
/// (so the bits of [`exact_lane`]'s scalar route), for all eight lanes at once, `by_d` and
/// `by_d1` being the walk's divisions by d and d − 1. A constant side's deviations are
/// exact zeros, so its variance is 0 and the value NaN (a covariance 0), as [`finish`]
/// makes of a constant side.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exact_window8<const CORR: bool>(
    x: &[f64],
    y: &[f64],
    days: std::ops::Range<usize>,
    by_d: impl Fn(std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d,
    by_d1: impl Fn(std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d,
) -> std::arch::x86_64::__m512d {
    use std::arch::x86_64::*;
    let (xs, ys) = (&x[days.start * W..days.end * W], &y[days.start * W..days.end * W]);
    // SAFETY: every chunk holds W values.
    let ld = |v: &[f64]| unsafe { _mm512_loadu_pd(v.as_ptr()) };
    // anchored_mean: each side's first value, and the mean of the differences from it
    // (`f64`'s `sum` starts from −0.0).
    let (ox, oy) = (ld(xs), ld(ys));
    let (mut mx, mut my) = (_mm512_set1_pd(-0.0), _mm512_set1_pd(-0.0));
    for (xt, yt) in xs.chunks_exact(W).zip(ys.chunks_exact(W)) {
        mx = _mm512_add_pd(mx, _mm512_sub_pd(ld(xt), ox));
        my = _mm512_add_pd(my, _mm512_sub_pd(ld(yt), oy));
    }
    let (mx, my) = (by_d(mx), by_d(my));
    let zero = _mm512_setzero_pd();
    let (mut c, mut vx, mut vy) = (zero, zero, zero);
    for (xt, yt) in xs.chunks_exact(W).zip(ys.chunks_exact(W)) {
        let (u, v) = (_mm512_sub_pd(_mm512_sub_pd(ld(xt), ox), mx), _mm512_sub_pd(_mm512_sub_pd(ld(yt), oy), my));
        c = _mm512_add_pd(c, _mm512_mul_pd(u, v));
        vx = _mm512_add_pd(vx, _mm512_mul_pd(u, u));
        vy = _mm512_add_pd(vy, _mm512_mul_pd(v, v));
    }
    let (c, vx, vy) = (by_d1(c), by_d1(vx), by_d1(vy));
    if CORR {
        // SAFETY: the CPU has AVX-512F (this function's own requirement).
        unsafe { corr8(c, vx, vy, 0) }
    } else {
        c
    }
}

/// [`corr_of`] of eight lanes' moments, `constant` marking the lanes where a side is
/// constant: the clamp keeps NaN; NaN where a side is constant or has no variance.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn corr8(c: std::arch::x86_64::__m512d, vx: std::arch::x86_64::__m512d, vy: std::arch::x86_64::__m512d, constant: std::arch::x86_64::__mmask8) -> std::arch::x86_64::__m512d {
    use std::arch::x86_64::*;
    let r = _mm512_div_pd(c, _mm512_mul_pd(_mm512_sqrt_pd(vx), _mm512_sqrt_pd(vy)));
    // (vmaxpd and vminpd return their second operand where either is NaN.)
    let r = _mm512_min_pd(_mm512_set1_pd(1.0), _mm512_max_pd(_mm512_set1_pd(-1.0), r));
    let zero = _mm512_setzero_pd();
    let undefined = constant | _mm512_cmp_pd_mask::<_CMP_LE_OQ>(vx, zero) | _mm512_cmp_pd_mask::<_CMP_LE_OQ>(vy, zero);
    _mm512_mask_mov_pd(r, undefined, _mm512_set1_pd(f64::NAN))
}

/// [`exact8`] on AVX-512: `[kx, ky, sx, sy, sxx, syy, sxy]`, the same sums in the same order.
/// The means divide by the window length through `by_d`, the walk's own division by d
/// (the divider's bits, on the multiply-add units where the divider is slow: the
/// refreshes come every few rows at the short windows most correlations use, 5.4 million
/// of them in the alpha101 batch, two divisions each).
///
/// # Safety
/// The CPU must support AVX-512F; `by_d` divides by `to - from`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exact8_avx512(x: &[f64], y: &[f64], from: usize, to: usize, by_d: impl Fn(std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d) -> [std::arch::x86_64::__m512d; 7] {
    use std::arch::x86_64::*;
    let (xs, ys) = (&x[from * W..to * W], &y[from * W..to * W]);
    // SAFETY: every chunk holds W values.
    let ld = |v: &[f64]| unsafe { _mm512_loadu_pd(v.as_ptr()) };
    let (mut mx, mut my) = (_mm512_set1_pd(-0.0), _mm512_set1_pd(-0.0));
    for (xt, yt) in xs.chunks_exact(W).zip(ys.chunks_exact(W)) {
        mx = _mm512_add_pd(mx, ld(xt));
        my = _mm512_add_pd(my, ld(yt));
    }
    let (kx, ky) = (by_d(mx), by_d(my));
    let zero = _mm512_setzero_pd();
    let (mut sx, mut sy, mut sxx, mut syy, mut sxy) = (zero, zero, zero, zero, zero);
    for (xt, yt) in xs.chunks_exact(W).zip(ys.chunks_exact(W)) {
        let (a, b) = (_mm512_sub_pd(ld(xt), kx), _mm512_sub_pd(ld(yt), ky));
        sx = _mm512_add_pd(sx, a);
        sy = _mm512_add_pd(sy, b);
        sxx = _mm512_add_pd(sxx, _mm512_mul_pd(a, a));
        syy = _mm512_add_pd(syy, _mm512_mul_pd(b, b));
        sxy = _mm512_add_pd(sxy, _mm512_mul_pd(a, b));
    }
    [kx, ky, sx, sy, sxx, syy, sxy]
}

#[cfg(test)]
mod tests {
    use super::super::{corr, cov, decay_linear, extreme, mean, std, sum, ts_rank, Extreme};
    use crate::data::Panel;

    /// Assets whose series stress every path: NaN gaps, constant runs, values equal up to
    /// rounding (ill-conditioned windows), large offsets, infinities.
    fn panel(nd: usize, na: usize, seed: u64) -> Panel {
        let mut s = seed;
        let mut rnd = || crate::xorshift(&mut s);
        let mut data = Vec::with_capacity(nd * na);
        for a in 0..na {
            let mut level = 100.0;
            for t in 0..nd {
                let r = rnd();
                let v = match (a % 5, r % 23) {
                    (_, 0) => f64::NAN,
                    (_, 1) if a % 3 == 0 => f64::INFINITY,
                    (0, _) => (r % 4) as f64,                             // many ties and runs
                    (1, _) => 1e6 + ((r % 3) as f64) * 1e-9,              // near-constant
                    (2, _) if (t / 17) % 2 == 0 => 7.0,                   // constant stretches
                    _ => {
                        level *= 1.0 + ((r % 2001) as f64 - 1000.0) * 1e-5;
                        level
                    }
                };
                data.push(v);
            }
        }
        Panel::from_asset_major(nd, na, data)
    }

    /// A kernel writing into an input it may take gives the bits of one writing into a
    /// fresh panel: full groups and the tail's assets, either input of a pair taken, on
    /// several threads (groups written back while others are still read); `delta` and
    /// `delay` at lengths from 0 to beyond the series.
    #[test]
    fn taken_inputs_give_the_fresh_results() {
        use super::{extreme_panel, pair_panel, sum_panel, ts_rank_panel, Src};
        let (x, y) = (panel(300, 21, 3), panel(300, 21, 4));
        let bits = |p: &Panel| p.to_asset_major().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
        pool.install(|| {
            assert_eq!(bits(&pair_panel::<true>(Src::Take(x.clone()), &y, 10)), bits(&pair_panel::<true>(&x, &y, 10)));
            assert_eq!(bits(&pair_panel::<false>(&x, Src::Take(y.clone()), 7)), bits(&pair_panel::<false>(&x, &y, 7)));
            assert_eq!(bits(&ts_rank_panel(Src::Take(x.clone()), 9)), bits(&ts_rank_panel(&x, 9)));
            assert_eq!(bits(&extreme_panel(Src::Take(x.clone()), 6, Extreme::ArgMax)), bits(&extreme_panel(&x, 6, Extreme::ArgMax)));
            assert_eq!(bits(&sum_panel(Src::Take(y.clone()), 12)), bits(&sum_panel(&y, 12)));
            for d in [0, 1, 3, 150, 299, 300, 1000] {
                use super::super::{delay_panel, delta_panel};
                assert_eq!(bits(&delta_panel(Src::Take(x.clone()), d)), bits(&delta_panel(Src::Read(&x), d)), "delta d = {d}");
                assert_eq!(bits(&delay_panel(Src::Take(x.clone()), d)), bits(&delay_panel(Src::Read(&x), d)), "delay d = {d}");
            }
        });
    }

    #[test]
    fn lanes_equal_the_one_asset_walk_bit_for_bit() {
        for (nd, na) in [(300, 19), (40, 8), (5, 16), (0, 9), (60, 3)] {
            let (x, y) = (panel(nd, na, 11 + nd as u64), panel(nd, na, 977 + na as u64));
            for d in [1, 2, 3, 5, 10, 30, nd.max(1), nd + 1] {
                let rank = |x: &[f64], _: &[f64], d: usize, o: &mut [f64]| ts_rank(x, d, o);
                let ext = |w: Extreme| move |x: &[f64], _: &[f64], d: usize, o: &mut [f64]| extreme(x, d, w, o);
                let (max, min, argmax, argmin) = (ext(Extreme::Max), ext(Extreme::Min), ext(Extreme::ArgMax), ext(Extreme::ArgMin));
                let one = |k: fn(&[f64], usize, &mut [f64])| move |x: &[f64], _: &[f64], d: usize, o: &mut [f64]| k(x, d, o);
                let (sum1, mean1, decay1, std1) = (one(sum), one(mean), one(decay_linear), one(std));
                for (name, lanes, one) in [
                    ("corr", super::super::corr_panel(&x, &y, d), &corr as &dyn Fn(&[f64], &[f64], usize, &mut [f64])),
                    ("cov", super::super::cov_panel(&x, &y, d), &cov),
                    ("ts_rank", super::super::ts_rank_panel(&x, d), &rank),
                    ("ts_max", super::super::extreme_panel(&x, d, Extreme::Max), &max),
                    ("ts_min", super::super::extreme_panel(&x, d, Extreme::Min), &min),
                    ("ts_argmax", super::super::extreme_panel(&x, d, Extreme::ArgMax), &argmax),
                    ("ts_argmin", super::super::extreme_panel(&x, d, Extreme::ArgMin), &argmin),
                    ("ts_sum", super::super::sum_panel(&x, d), &sum1),
                    ("ts_mean", super::super::mean_panel(&x, d), &mean1),
                    ("decay_linear", super::super::decay_linear_panel(&x, d), &decay1),
                    ("ts_std", super::super::std_panel(&x, d), &std1),
                ] {
                    for a in 0..na {
                        let mut want = vec![0.0; nd];
                        one(&x.series(a), &y.series(a), d, &mut want);
                        let got = lanes.series(a);
                        for t in 0..nd {
                            assert!(
                                got[t].to_bits() == want[t].to_bits() || (got[t].is_nan() && want[t].is_nan()),
                                "{name} nd={nd} na={na} d={d} asset {a} day {t}: lanes {} one-asset {}",
                                got[t],
                                want[t]
                            );
                        }
                    }
                }
            }
        }
    }

    /// Windows of at most `DIRECT_PAIR` days are computed from their own values: the same
    /// d values give the same bits whatever came before them (running sums carried their
    /// history into the last bits), in the lanes and in the one-asset walk.
    #[test]
    fn short_windows_depend_on_their_own_values_alone() {
        let (nd, na) = (120, 19);
        let (mut x, mut y) = (panel(nd, na, 5), panel(nd, na, 6));
        // The same window of well-conditioned values at the end of every asset's series,
        // after histories that differ (gaps, ties, near-constant runs, other levels).
        let window_x = [101.3, 99.7, 100.9, 102.2, 98.4, 100.1];
        let window_y = [5.1e6, 4.7e6, 6.3e6, 5.5e6, 5.9e6, 4.2e6];
        let (mut xs, mut ys) = (x.to_asset_major(), y.to_asset_major());
        for a in 0..na {
            for (k, (&u, &v)) in window_x.iter().zip(&window_y).enumerate() {
                xs[a * nd + nd - 6 + k] = u;
                ys[a * nd + nd - 6 + k] = v;
            }
        }
        (x, y) = (Panel::from_asset_major(nd, na, xs), Panel::from_asset_major(nd, na, ys));
        for d in 2..=super::super::DIRECT_PAIR {
            for (name, lanes, one) in [
                ("cov", super::super::cov_panel(&x, &y, d), &cov as &dyn Fn(&[f64], &[f64], usize, &mut [f64])),
                ("corr", super::super::corr_panel(&x, &y, d), &corr),
            ] {
                let last: Vec<u64> = (0..na).map(|a| lanes.series(a)[nd - 1].to_bits()).collect();
                assert!(last.iter().all(|&b| b == last[0]), "{name} d={d}: {last:?}");
                assert!(f64::from_bits(last[0]).is_finite(), "{name} d={d}");
                let mut want = vec![0.0; nd];
                for a in 0..na {
                    one(&x.series(a), &y.series(a), d, &mut want);
                    assert_eq!(want[nd - 1].to_bits(), last[0], "{name} d={d} asset {a}: one-asset walk");
                }
            }
        }
    }

    /// The portable `ts_corr`/`ts_cov` walk (used where the CPU lacks AVX-512) equals the
    /// AVX-512 one bit for bit.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn portable_pair_walk_equals_the_avx512_one() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let nd = 300;
        let (px, py) = (panel(nd, 8, 3), panel(nd, 8, 41));
        // One group of eight assets: the panels' buffers are the interleaved lanes.
        let (x, y) = (px.as_slice(), py.as_slice());
        for d in [1, 2, 3, 4, 5, 8, 9, 10, 17, 37, nd, nd + 1] {
            for (corr, fma) in [(true, false), (true, true), (false, false), (false, true)] {
                let (mut fast, mut slow) = (vec![0.0; nd * 8], vec![0.0; nd * 8]);
                // (The CPU has AVX-512F, checked above: the vector walk, with its
                // power-of-two variants for d = 2, 4, 8 and 3, 5, 9, 17, its other
                // divisions on the divider and as multiply-adds.)
                // SAFETY: AVX-512F checked above.
                unsafe {
                    if corr {
                        super::walk8_avx512::<true>(x, y, d, fma, &mut fast)
                    } else {
                        super::walk8_avx512::<false>(x, y, d, fma, &mut fast)
                    }
                }
                if corr {
                    super::walk(x, y, d, &mut slow, super::finish::<true>);
                } else {
                    super::walk(x, y, d, &mut slow, super::finish::<false>);
                }
                let bits = |v: &[f64]| v.iter().map(|f| if f.is_nan() { u64::MAX } else { f.to_bits() }).collect::<Vec<_>>();
                assert_eq!(bits(&fast), bits(&slow), "corr={corr} fma={fma} d={d}");
            }
        }
    }

    /// The short-window walk of `ts_min`/`ts_max` keeps the block passes' winner where
    /// values tie as numbers but not as bits (−0 and 0: the older day's), and their NaN.
    #[test]
    fn short_window_extremes_keep_the_older_of_equal_values() {
        let (nd, na) = (200, 11);
        let mut s = 7u64;
        let cells: Vec<f64> = (0..nd * na).map(|_| [-0.0, 0.0, 0.0, -0.0, 1.0, -1.0, f64::NAN][(crate::xorshift(&mut s) % 7) as usize]).collect();
        let x = Panel::from_asset_major(nd, na, cells);
        for d in 1..=super::DIRECT_EXTREME + 1 {
            for which in [Extreme::Max, Extreme::Min] {
                let lanes = super::extreme_panel(&x, d, which);
                for a in 0..na {
                    let mut want = vec![0.0; nd];
                    extreme(&x.series(a), d, which, &mut want);
                    let got = lanes.series(a);
                    assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())), "d = {d}, asset {a}");
                    assert!(d > 8 || got.iter().any(|v| v.to_bits() == (-0.0f64).to_bits()), "d = {d}: some −0 wins");
                }
            }
        }
    }

    /// The portable ts_rank walk (used where the CPU lacks AVX-512) equals the AVX-512 one,
    /// on windows with ties, NaN, infinities, signed zeros and differences beyond the largest
    /// double, of lengths 1 to the whole series and beyond.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn portable_ts_rank_equals_the_avx512_one() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut p = panel(64, 8, 5);
        for (i, v) in p.as_mut_slice().iter_mut().enumerate() {
            match i % 37 {
                0 => *v = f64::NAN,
                9 => *v = f64::INFINITY,
                // Differences that overflow to ±∞, and zeros of both signs, on one lane's
                // neighbouring days (cells eight apart).
                13 | 29 => *v = -1.5e308,
                21 => *v = 1.5e308,
                17 => *v = -0.0,
                25 => *v = 0.0,
                _ if i % 5 == 0 => *v = (*v * 4.0).round(),
                _ => {}
            }
        }
        // One group of eight assets: the panel's buffer is the interleaved lanes.
        let x = p.as_slice();
        for d in [0, 1, 2, 3, 4, 7, 64, 65] {
            let (mut fast, mut slow) = (vec![0.0; 64 * 8], vec![1.0; 64 * 8]);
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { super::ts_rank8_avx512(x, d, &mut fast) };
            super::ts_rank8_walk(x, d, &mut slow);
            assert_eq!(fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), slow.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "d = {d}");
            assert!(!(1..=7).contains(&d) || fast.iter().any(|v| v.is_finite()), "d = {d}: some ranks");
        }
    }
}
