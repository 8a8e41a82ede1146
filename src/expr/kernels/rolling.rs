//! Time-series window kernels over one asset's series.
//!
//! Rule (conventions.md): the window is the past `d` days including today, and a result
//! exists only when all `d` values are finite (pandas `rolling(d)`); otherwise NaN.
//! Every kernel is O(n) in the series length except `ts_rank`, which counts within the
//! window (O(n·d) with a branch-free, vectorised count).
//!
//! Exactness: running sums drift and cancel; to stay exact to a few ulps they are
//! recomputed from scratch once per `d` steps (O(1) amortised) around an anchor near the
//! window mean, and a run of `d` identical values gives exactly zero variance, as pandas
//! does. `ts_corr` and `ts_cov` windows of at most six days are computed from their own
//! values, with no running sum: there a drift of an ulp would split values that tie in
//! exact arithmetic and flip the ranks and comparisons built on them. `delay`, `ts_min`,
//! `ts_max`, `ts_rank` and the arg-extremes compute nothing but comparisons and copies,
//! so they are exact; `delta` is one subtraction per cell.
//!
//! Layout: each kernel walks one asset's series (contiguous, oldest first), written by
//! [`per_asset`] from the panel's interleaved groups; the eight-lane kernels in
//! `lanes` walk a group's eight series in place.

use super::Src;
use crate::data::{transpose, Panel, LANES};
use rayon::prelude::*;

mod lanes;

/// [`sum`], [`mean`], [`decay_linear`] and [`std`] of every asset of a panel, eight assets
/// at a time (`lanes`).
pub use lanes::{decay_linear_panel, mean_panel, std_panel, sum_panel};

/// Applies a one-input kernel to every asset in parallel. Kernels write every cell of
/// their output (NaN where undefined), so the output needs no initial fill ([`Panel::scratch`]).
pub fn per_asset(x: &Panel, k: impl Fn(&[f64], &mut [f64]) + Sync) -> Panel {
    per_series([x], |[x], o| k(x, o))
}

/// Applies a kernel of `K` series to every asset in parallel: each group of eight assets
/// is transposed into eight series (in the L2 cache), and the results back.
fn per_series<const K: usize>(xs: [&Panel; K], k: impl Fn([&[f64]; K], &mut [f64]) + Sync) -> Panel {
    let (nd, na) = (xs[0].n_dates(), xs[0].n_assets());
    assert!(xs.iter().all(|x| (x.n_dates(), x.n_assets()) == (nd, na)), "panels of one shape");
    let mut out = Panel::scratch(nd, na);
    if nd == 0 {
        return out;
    }
    out.par_groups_mut().enumerate().for_each_init(
        || (std::array::from_fn::<Vec<f64>, K, _>(|_| Vec::new()), Vec::new()),
        |(ins, os), (g, og)| {
            // Only the group's real assets are run; the transposes fill every lane.
            let w = LANES.min(na - g * LANES);
            for (buf, x) in ins.iter_mut().zip(&xs) {
                buf.resize(LANES * nd, 0.0);
                transpose(x.group(g), LANES, buf);
            }
            os.resize(LANES * nd, 0.0);
            for l in 0..w {
                let r = l * nd..(l + 1) * nd;
                k(std::array::from_fn(|i| &ins[i][r.clone()]), &mut os[r]);
            }
            transpose(os, nd, og);
        },
    );
    out
}

/// Applies a kernel that works on a series by position only (`delay`, `delta`) to whole
/// groups: in a group's interleaved cells, `d` days back is `d · LANES` cells back.
/// `fresh(x, shift, out)` writes a new panel; a taken panel receives the result from
/// `in_place(x, shift)` instead, which runs from the last day back, so every day `d` back
/// is still the input when it is read (a fresh panel's lines would first have to be
/// fetched from memory).
fn per_group(
    x: Src<'_>,
    d: usize,
    fresh: impl Fn(&[f64], usize, &mut [f64]) + Sync,
    in_place: impl Fn(&mut [f64], usize) + Sync,
) -> Panel {
    let shift = d.saturating_mul(LANES);
    // Compiled for AVX-512 where the CPU has it (the kernels, generic parameters here,
    // inline into these closures).
    match x {
        Src::Take(mut p) => {
            if p.n_dates() > 0 {
                p.par_groups_mut().for_each(|o| crate::data::with_avx512(#[inline(always)] || in_place(o, shift)));
            }
            p
        }
        Src::Read(x) => {
            let nd = x.n_dates();
            let mut out = Panel::scratch(nd, x.n_assets());
            if nd > 0 {
                out.par_groups_mut().zip(x.as_slice().par_chunks(nd * LANES)).for_each(|(o, g)| crate::data::with_avx512(#[inline(always)] || fresh(g, shift, o)));
            }
            out
        }
    }
}

/// [`delay`] of every asset of a panel.
pub fn delay_panel(x: Src<'_>, d: usize) -> Panel {
    per_group(x, d, delay, delay_in_place)
}

/// [`delta`] of every asset of a panel.
pub fn delta_panel(x: Src<'_>, d: usize) -> Panel {
    per_group(x, d, delta, delta_in_place)
}

#[inline(always)]
fn bad(v: f64) -> usize {
    usize::from(!v.is_finite())
}

/// `x[t - d]`.
#[inline(always)]
pub fn delay(x: &[f64], d: usize, out: &mut [f64]) {
    let n = x.len();
    out[..d.min(n)].fill(f64::NAN);
    if d < n {
        out[d..].copy_from_slice(&x[..n - d]);
    }
}

/// [`delay`] written over its input.
#[inline(always)]
fn delay_in_place(x: &mut [f64], d: usize) {
    let n = x.len();
    if d < n {
        x.copy_within(..n - d, d);
    }
    x[..d.min(n)].fill(f64::NAN);
}

/// `x[t] - x[t - d]`.
#[inline(always)]
pub fn delta(x: &[f64], d: usize, out: &mut [f64]) {
    let n = x.len();
    out[..d.min(n)].fill(f64::NAN);
    for t in d..n {
        out[t] = x[t] - x[t - d];
    }
}

/// [`delta`] written over its input: from the last day back, so that `x[t - d]` is still
/// the input when day t is written. Blocks of `d` days (or fewer) from the end: within
/// one, no written cell is read, so the block is a plain vectorisable loop.
#[inline(always)]
fn delta_in_place(x: &mut [f64], d: usize) {
    let n = x.len();
    if d == 0 {
        // x − x: 0 where finite, NaN elsewhere, as `delta`.
        x.iter_mut().for_each(|v| *v -= *v);
        return;
    }
    let mut end = n;
    while end > d {
        let start = (end - d).max(d);
        let (head, tail) = x.split_at_mut(start);
        let src = &head[start - d..end - d];
        for (o, p) in tail[..end - start].iter_mut().zip(src) {
            *o -= p;
        }
        end = start;
    }
    x[..d.min(n)].fill(f64::NAN);
}

/// Calls `f(t)` for every day t whose window of `d` days (t + 1 - d ..= t) is all finite.
#[inline(always)]
fn finite_windows(x: &[f64], d: usize, mut f: impl FnMut(usize)) {
    let mut nbad = 0usize;
    for t in 0..x.len() {
        nbad += bad(x[t]);
        if t >= d {
            nbad -= bad(x[t - d]);
        }
        if t + 1 >= d && nbad == 0 {
            f(t);
        }
    }
}

/// Walks the windows of length `d` whose values are all finite, writing
/// `out[t] = f(t, refresh, constant)` for each and NaN for every other day (so kernels
/// need no separate pass to clear their output): `refresh` is due at the first valid
/// window after a gap and every `d` steps after (the caller then recomputes its sums
/// exactly); `constant` is true when all `d` values are identical.
#[inline(always)]
fn windows(x: &[f64], d: usize, out: &mut [f64], mut f: impl FnMut(usize, bool, bool) -> f64) {
    let n = x.len();
    let mut nbad = 0usize;
    let mut since = usize::MAX; // steps since the last exact recompute
    let mut run = 0usize;
    for t in 0..n {
        nbad += bad(x[t]);
        if t >= d {
            nbad -= bad(x[t - d]);
        }
        run = run_len(x, t, run);
        if t + 1 < d || nbad > 0 {
            since = usize::MAX;
            out[t] = f64::NAN;
            continue;
        }
        let refresh = since >= d;
        since = if refresh { 1 } else { since + 1 };
        out[t] = f(t, refresh, run >= d);
    }
}

/// Window sum.
pub fn sum(x: &[f64], d: usize, out: &mut [f64]) {
    let mut s = 0.0;
    windows(x, d, out, |t, refresh, _| {
        if refresh {
            s = x[t + 1 - d..=t].iter().sum();
        } else {
            s += x[t] - x[t - d];
        }
        s
    });
}

/// Window mean.
pub fn mean(x: &[f64], d: usize, out: &mut [f64]) {
    sum(x, d, out);
    let inv = 1.0 / d as f64;
    out.iter_mut().for_each(|v| *v *= inv);
}

/// Length of the run of identical finite values ending at t (0 for non-finite).
#[inline(always)]
fn run_len(x: &[f64], t: usize, prev: usize) -> usize {
    if !x[t].is_finite() {
        0
    } else if t > 0 && x[t] == x[t - 1] {
        prev + 1
    } else {
        1
    }
}

/// Walks the valid windows keeping the window mean and sample variance (ddof = 1):
/// `f(x[t] − mean, var)`. Sums are anchored near the mean and refreshed once per window; a
/// window of identical values has variance exactly 0, and one whose values are close is
/// recomputed exactly (see [`ILL_CONDITIONED`]).
fn mean_var(x: &[f64], d: usize, out: &mut [f64], mut f: impl FnMut(f64, f64) -> f64) {
    let (mut k, mut s1, mut s2) = (0.0, 0.0, 0.0);
    let dn = d as f64;
    windows(x, d, out, |t, refresh, constant| {
        let w = &x[t + 1 - d..=t];
        if refresh {
            k = w.iter().sum::<f64>() / dn;
            s1 = w.iter().map(|v| v - k).sum();
            s2 = w.iter().map(|v| (v - k) * (v - k)).sum();
        } else {
            let (a, r) = (x[t] - k, x[t - d] - k);
            s1 += a - r;
            s2 += a * a - r * r;
        }
        let var = (s2 - s1 * s1 / dn) / (dn - 1.0);
        if constant {
            f(0.0, 0.0)
        } else if var * (dn - 1.0) <= ILL_CONDITIONED * (s2 + dn * k * k) {
            let (m, var) = exact_var(w.iter());
            f(x[t] - w[0] - m, var)
        } else {
            f(x[t] - (k + s1 / dn), var.max(0.0))
        }
    });
}

/// Sample standard deviation (ddof = 1); NaN for d = 1, exactly 0 for a constant window.
pub fn std(x: &[f64], d: usize, out: &mut [f64]) {
    if d < 2 {
        out.fill(f64::NAN);
        return;
    }
    mean_var(x, d, out, |_, var| var.sqrt());
}

/// Below this ratio of (d − 1)·variance to the window's sum of squares, the values are
/// close enough (a spread under ~1e-3 of their magnitude) that running sums lose more
/// than 1e-10 of the variance to cancellation; the window is then recomputed exactly
/// (two passes around one of its values). Measured on the full data: a 1e-9 ratio left
/// `ts_std` and `ts_corr` off by up to 1e-8 relative in such windows.
const ILL_CONDITIONED: f64 = 1e-6;

/// A window's first value and the mean of its values' differences from it (an iterator,
/// so that eight interleaved lanes can pass one lane's values). In the windows that are
/// recomputed exactly (values within ~1e-3 of each other, see [`ILL_CONDITIONED`])
/// subtracting one of them is exact (Sterbenz), so the deviations `v − first − mean` are
/// exact small numbers, where a mean of values that differ in their last bits is off by as
/// much as the deviations themselves.
fn anchored_mean<'a>(w: impl Iterator<Item = &'a f64> + Clone) -> (f64, f64) {
    let o = w.clone().next().copied().unwrap_or(0.0);
    let n = w.clone().count() as f64;
    (o, w.map(|v| v - o).sum::<f64>() / n)
}

/// Two-pass (mean − first value, sample variance with ddof = 1) of a window's values,
/// around its first value ([`anchored_mean`]).
fn exact_var<'a>(w: impl Iterator<Item = &'a f64> + Clone) -> (f64, f64) {
    let (o, m) = anchored_mean(w.clone());
    let n = w.clone().count() as f64;
    (m, w.map(|v| (v - o - m) * (v - o - m)).sum::<f64>() / (n - 1.0))
}

/// Two-pass (cov, var_x, var_y), ddof = 1, around each side's first value
/// ([`anchored_mean`]).
fn exact_moments(x: &[f64], y: &[f64]) -> (f64, f64, f64) {
    let n = x.len() as f64;
    let ((ox, mx), (oy, my)) = (anchored_mean(x.iter()), anchored_mean(y.iter()));
    let (mut c, mut vx, mut vy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (u, v) = (a - ox - mx, b - oy - my);
        c += u * v;
        vx += u * u;
        vy += v * v;
    }
    (c / (n - 1.0), vx / (n - 1.0), vy / (n - 1.0))
}

/// Windows up to this long (`ts_corr`, `ts_cov`) are each computed from their own d
/// values by the two-pass [`exact_moments`], not by running sums.
///
/// Why: most of the alpha101 set's correlations are over 3 to 6 days, where the running
/// sums' walk (about 150 vector operations a row, an exact refresh every d rows, and the
/// exact recompute of ill-conditioned windows on top) costs more than the two passes
/// themselves. It is also the more exact answer: a window's value depends on its d values
/// alone, as the conventions define it, so equal windows give equal bits whatever came
/// before them (with running sums they differed in the last bits by the history, and broke
/// ties that the windows share in exact arithmetic). Measured 2026-12-01 on an Intel Xeon
/// (family 6 model 207): `ts_corr` at d = 3–6 −19 to −27 %, and the oracle agrees with one
/// more alpha101 formula in every cell.
pub(super) const DIRECT_PAIR: usize = 6;

/// Co-moment sums of a pair of series around anchors, refreshed exactly once per window.
struct Comoments {
    kx: f64,
    ky: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    syy: f64,
    sxy: f64,
}

impl Comoments {
    fn exact(x: &[f64], y: &[f64]) -> Comoments {
        let n = x.len() as f64;
        let kx = x.iter().sum::<f64>() / n;
        let ky = y.iter().sum::<f64>() / n;
        let mut c = Comoments { kx, ky, sx: 0.0, sy: 0.0, sxx: 0.0, syy: 0.0, sxy: 0.0 };
        for (a, b) in x.iter().zip(y) {
            c.push(*a, *b, 1.0);
        }
        c
    }

    #[inline(always)]
    fn push(&mut self, x: f64, y: f64, sign: f64) {
        let (a, b) = (x - self.kx, y - self.ky);
        self.sx += sign * a;
        self.sy += sign * b;
        self.sxx += sign * a * a;
        self.syy += sign * b * b;
        self.sxy += sign * a * b;
    }

    /// (cov, var_x, var_y), each with ddof = 1, or `None` when a variance has cancelled
    /// to noise (see [`ILL_CONDITIONED`]) and the window must be recomputed exactly.
    fn moments(&self, d: f64) -> Option<(f64, f64, f64)> {
        let cov = (self.sxy - self.sx * self.sy / d) / (d - 1.0);
        let vx = (self.sxx - self.sx * self.sx / d) / (d - 1.0);
        let vy = (self.syy - self.sy * self.sy / d) / (d - 1.0);
        // Relative to the raw sum of squares (≈ sxx + d·k²): a spread this small next to
        // the values' magnitude is rounding noise that only an exact pass resolves.
        let ill = vx * (d - 1.0) <= ILL_CONDITIONED * (self.sxx + d * self.kx * self.kx)
            || vy * (d - 1.0) <= ILL_CONDITIONED * (self.syy + d * self.ky * self.ky);
        (!ill).then_some((cov, vx, vy))
    }
}

/// Walks the windows where both series are finite, keeping the co-moments and the runs of
/// identical values of each side current; `f(t, moments, x constant, y constant)`.
/// Windows of at most [`DIRECT_PAIR`] days are each computed from their own values
/// instead ([`exact_moments`]).
fn pair_windows(x: &[f64], y: &[f64], d: usize, out: &mut [f64], mut f: impl FnMut((f64, f64, f64), bool, bool) -> f64) {
    out.fill(f64::NAN);
    let n = x.len();
    if d < 2 {
        return;
    }
    // A cell counts as missing when either side is.
    let joint_bad = |t: usize| bad(x[t]) | bad(y[t]);
    if d <= DIRECT_PAIR {
        // A constant side needs no run count here: its deviations are exact zeros, so its
        // variance is 0 (a correlation NaN, a covariance 0), as `f` makes of a constant side.
        let mut nbad = 0;
        for t in 0..n {
            nbad += joint_bad(t);
            if t >= d {
                nbad -= joint_bad(t - d);
            }
            if t + 1 >= d && nbad == 0 {
                out[t] = f(exact_moments(&x[t + 1 - d..=t], &y[t + 1 - d..=t]), false, false);
            }
        }
        return;
    }
    let (mut nbad, mut since) = (0usize, usize::MAX);
    let (mut rx, mut ry) = (0usize, 0usize);
    let mut c = Comoments { kx: 0.0, ky: 0.0, sx: 0.0, sy: 0.0, sxx: 0.0, syy: 0.0, sxy: 0.0 };
    let dn = d as f64;
    for t in 0..n {
        rx = run_len(x, t, rx);
        ry = run_len(y, t, ry);
        nbad += joint_bad(t);
        if t >= d {
            nbad -= joint_bad(t - d);
        }
        if t + 1 < d || nbad > 0 {
            since = usize::MAX;
            continue;
        }
        if since >= d {
            c = Comoments::exact(&x[t + 1 - d..=t], &y[t + 1 - d..=t]);
            since = 1;
        } else {
            c.push(x[t], y[t], 1.0);
            c.push(x[t - d], y[t - d], -1.0);
            since += 1;
        }
        let (cx, cy) = (rx >= d, ry >= d);
        let m = match c.moments(dn) {
            Some(m) if !cx && !cy => m,
            _ if cx || cy => (0.0, 0.0, 0.0),
            _ => exact_moments(&x[t + 1 - d..=t], &y[t + 1 - d..=t]),
        };
        out[t] = f(m, cx, cy);
    }
}

/// Sample covariance (ddof = 1) of one window's moments; 0 when a side is constant.
#[inline(always)]
fn cov_of((c, _, _): (f64, f64, f64), cx: bool, cy: bool) -> f64 {
    if cx | cy {
        0.0
    } else {
        c
    }
}

/// Pearson correlation of one window's moments; NaN when either side has zero variance.
#[inline(always)]
fn corr_of((c, vx, vy): (f64, f64, f64), cx: bool, cy: bool) -> f64 {
    // Computed unconditionally and selected, so that eight lanes vectorise ([`lanes`]);
    // the clamp is `f64::clamp`'s (NaN stays NaN).
    let r = c / (vx.sqrt() * vy.sqrt());
    #[allow(clippy::manual_clamp)] // two selects, which the eight lanes vectorise
    let r = if r < -1.0 { -1.0 } else if r > 1.0 { 1.0 } else { r };
    if cx | cy | (vx <= 0.0) | (vy <= 0.0) {
        f64::NAN
    } else {
        r
    }
}

/// Sample covariance (ddof = 1).
pub fn cov(x: &[f64], y: &[f64], d: usize, out: &mut [f64]) {
    pair_windows(x, y, d, out, cov_of);
}

/// Pearson correlation; NaN when either side has zero variance in the window.
pub fn corr(x: &[f64], y: &[f64], d: usize, out: &mut [f64]) {
    if d == 2 {
        return corr2(x, y, out);
    }
    pair_windows(x, y, d, out, corr_of);
}

/// Correlation over two days, exactly: two points always lie on a line, so it is +1 or
/// −1 by whether the two series moved the same way, NaN where either did not move or a
/// value is missing. (The running sums gave ±(1 − 2e-9) where the two days' values were
/// close, which breaks the ties every 2-day correlation shares; the sign of a difference
/// of two floats is exact.)
fn corr2(x: &[f64], y: &[f64], out: &mut [f64]) {
    let Some((first, rest)) = out.split_first_mut() else { return };
    *first = f64::NAN;
    for ((o, x), y) in rest.iter_mut().zip(x.windows(2)).zip(y.windows(2)) {
        let (dx, dy) = (x[1] - x[0], y[1] - y[0]);
        // signum keeps NaN (a missing value); a select, not a branch: the signs are random.
        let r = dx.signum() * dy.signum();
        *o = if (dx == 0.0) | (dy == 0.0) { f64::NAN } else { r };
    }
}

/// [`cov`] of every asset of two panels, eight assets at a time ([`lanes`]).
pub fn cov_panel<'a>(x: impl Into<Src<'a>>, y: impl Into<Src<'a>>, d: usize) -> Panel {
    lanes::pair_panel::<false>(x, y, d)
}

/// [`extreme`] of every asset of a panel, eight assets at a time ([`lanes`]).
pub fn extreme_panel<'a>(x: impl Into<Src<'a>>, d: usize, which: Extreme) -> Panel {
    lanes::extreme_panel(x, d, which)
}

/// [`ts_rank`] of every asset of a panel, eight assets at a time ([`lanes`]).
pub fn ts_rank_panel<'a>(x: impl Into<Src<'a>>, d: usize) -> Panel {
    lanes::ts_rank_panel(x, d)
}

/// [`corr`] of every asset of two panels, eight assets at a time ([`lanes`]); over two
/// days, asset by asset ([`corr2`]).
pub fn corr_panel<'a>(x: impl Into<Src<'a>>, y: impl Into<Src<'a>>, d: usize) -> Panel {
    let (x, y) = (x.into(), y.into());
    if d != 2 {
        return lanes::pair_panel::<true>(x, y, d);
    }
    per_series([x.panel(), y.panel()], |[x, y], o| corr2(x, y, o))
}

/// Which statistic a monotonic-deque pass returns.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    Min,
    Max,
    ArgMin,
    ArgMax,
}

/// `ts_min`, `ts_max`, `ts_argmin`, `ts_argmax` by block prefix/suffix extremes (van Herk /
/// Gil-Werman): cut the series into blocks of d days; a window then spans the tail of one
/// block and the head of the next, whose best elements are precomputed in one forward and
/// one backward pass. Three branch-light passes, O(n) for any d (a monotonic deque was 2.5×
/// slower here). Arg positions are 1-based from the oldest day (d = today); ties resolve
/// to the oldest occurrence, as numpy's argmax does.
pub fn extreme(x: &[f64], d: usize, which: Extreme, out: &mut [f64]) {
    match which {
        Extreme::Max | Extreme::ArgMax => extreme_by::<true>(x, d, which, out),
        Extreme::Min | Extreme::ArgMin => extreme_by::<false>(x, d, which, out),
    }
}

fn extreme_by<const MAX: bool>(x: &[f64], d: usize, which: Extreme, out: &mut [f64]) {
    let n = x.len();
    out.fill(f64::NAN);
    if d == 0 || n < d {
        return;
    }
    // Non-finite cells never win (their windows are NaN anyway).
    let worst = if MAX { f64::NEG_INFINITY } else { f64::INFINITY };
    let v: Vec<f64> = x.iter().map(|&u| if u.is_finite() { u } else { worst }).collect();
    // `a` strictly better than `b`; every tie keeps the older cell.
    #[inline(always)]
    fn better<const MAX: bool>(a: f64, b: f64) -> bool {
        if MAX {
            a > b
        } else {
            a < b
        }
    }
    // pre[i]: best of its block's cells up to i; suf[i]: best of its block's cells from
    // i. Selects, not branches: which cell wins is data, and unpredictable.
    let mut pre = vec![0u32; n];
    let mut suf = vec![0u32; n];
    for b0 in (0..n).step_by(d) {
        let b1 = (b0 + d).min(n);
        let (mut best, mut bv) = (b0 as u32, v[b0]);
        for i in b0..b1 {
            let c = better::<MAX>(v[i], bv);
            best = if c { i as u32 } else { best };
            bv = if c { v[i] } else { bv };
            pre[i] = best;
        }
        let (mut best, mut bv) = ((b1 - 1) as u32, v[b1 - 1]);
        for i in (b0..b1).rev() {
            let c = !better::<MAX>(bv, v[i]);
            best = if c { i as u32 } else { best };
            bv = if c { v[i] } else { bv };
            suf[i] = best;
        }
    }
    finite_windows(x, d, |t| {
        let s = t + 1 - d;
        // The window is the tail of s's block (from s) plus the head of t's block (to t).
        let (old, new) = (suf[s] as usize, pre[t] as usize);
        let f = if better::<MAX>(v[new], v[old]) { new } else { old };
        out[t] = match which {
            Extreme::Min | Extreme::Max => v[f],
            Extreme::ArgMin | Extreme::ArgMax => (f - s + 1) as f64,
        };
    });
}

/// Window product, by block prefix/suffix products (van Herk / Gil-Werman): exact O(n).
pub fn product(x: &[f64], d: usize, out: &mut [f64]) {
    let n = x.len();
    out.fill(f64::NAN);
    let v = |i: usize| if x[i].is_finite() { x[i] } else { 1.0 };
    let mut pre = vec![0.0; n];
    let mut suf = vec![0.0; n];
    // Block by block (a `%` per day was most of the time).
    for b0 in (0..n).step_by(d) {
        let b1 = (b0 + d).min(n);
        pre[b0] = v(b0);
        for i in b0 + 1..b1 {
            pre[i] = pre[i - 1] * v(i);
        }
        suf[b1 - 1] = v(b1 - 1);
        for i in (b0..b1 - 1).rev() {
            suf[i] = v(i) * suf[i + 1];
        }
    }
    finite_windows(x, d, |t| {
        let s = t + 1 - d;
        let p = if s.is_multiple_of(d) { pre[t] } else { suf[s] * pre[t] };
        out[t] = if p.is_infinite() { f64::NAN } else { p };
    });
}

/// Percentile rank of today's value among the window's d values, ties averaged, in (0, 1].
pub fn ts_rank(x: &[f64], d: usize, out: &mut [f64]) {
    out.fill(f64::NAN);
    finite_windows(x, d, |t| {
        let v = x[t];
        let w = &x[t + 1 - d..=t];
        let (mut lt, mut eq) = (0u32, 0u32);
        for &u in w {
            lt += u32::from(u < v);
            eq += u32::from(u == v);
        }
        out[t] = (lt as f64 + (eq as f64 + 1.0) / 2.0) / d as f64;
    });
}

/// Linearly decaying weighted mean: weight d for today down to 1 for the oldest day,
/// normalised to sum 1. O(n): W(t) = W(t-1) + d·x(t) − S(t-1), S the plain window sum.
pub fn decay_linear(x: &[f64], d: usize, out: &mut [f64]) {
    let norm = (d * (d + 1)) as f64 / 2.0;
    let dn = d as f64;
    let (mut w, mut s) = (0.0, 0.0);
    windows(x, d, out, |t, refresh, _| {
        if refresh {
            let win = &x[t + 1 - d..=t];
            s = win.iter().sum();
            w = win.iter().enumerate().map(|(i, v)| (i + 1) as f64 * v).sum();
        } else {
            w += dn * x[t] - s;
            s += x[t] - x[t - d];
        }
        w / norm
    });
}

/// `(x − ts_mean(x, d)) / ts_std(x, d)`; NaN when the window is constant.
pub fn zscore(x: &[f64], d: usize, out: &mut [f64]) {
    if d < 2 {
        out.fill(f64::NAN);
        return;
    }
    mean_var(x, d, out, |dev, var| if var > 0.0 { dev / var.sqrt() } else { f64::NAN });
}

/// The least-squares line through a window's values against their days 1 (the oldest) to
/// d (today), as Qlib's `Slope`, `Rsquare` and `Resi` fit it: `f(slope, r², residual)`,
/// the residual being today's value less the line's value today. A constant window has
/// slope 0, residual 0 and r² NaN (no variance to explain). The sums Σ y, Σ i·y and Σ y²
/// run around an anchor near the window mean and are refreshed once per `d` steps (sliding
/// moves every day one position older: Σ i·y loses Σ y and gains d · today's value);
/// where the values are too close for them ([`ILL_CONDITIONED`]) the window is
/// recomputed exactly, around one of its values.
fn line(x: &[f64], d: usize, out: &mut [f64], f: impl Fn(f64, f64, f64) -> f64) {
    if d < 2 {
        out.fill(f64::NAN);
        return;
    }
    let dn = d as f64;
    // Mean day and Σ (i − mean day)², exact.
    let (mid, sxx) = ((dn + 1.0) / 2.0, dn * (dn * dn - 1.0) / 12.0);
    let (mut k, mut s, mut si, mut ss) = (0.0, 0.0, 0.0, 0.0);
    windows(x, d, out, |t, refresh, constant| {
        let w = &x[t + 1 - d..=t];
        if refresh {
            k = w.iter().sum::<f64>() / dn;
            (s, si, ss) = (0.0, 0.0, 0.0);
            for (i, v) in w.iter().enumerate() {
                let a = v - k;
                (s, si, ss) = (s + a, si + (i + 1) as f64 * a, ss + a * a);
            }
        } else {
            let (a, r) = (x[t] - k, x[t - d] - k);
            si += dn * a - s;
            s += a - r;
            ss += a * a - r * r;
        }
        if constant {
            return f(0.0, f64::NAN, 0.0);
        }
        // Σ (i − mid)(y − ȳ), Σ (y − ȳ)² and today's y − ȳ.
        let mut syy = ss - s * s / dn;
        let (sxy, dev) = if syy <= ILL_CONDITIONED * (ss + dn * k * k) {
            let (o, m) = anchored_mean(w.iter());
            let u = |v: f64| v - o - m;
            syy = w.iter().map(|&v| u(v) * u(v)).sum();
            (w.iter().enumerate().map(|(i, &v)| ((i + 1) as f64 - mid) * u(v)).sum(), u(x[t]))
        } else {
            (si - mid * s, x[t] - k - s / dn)
        };
        let slope = sxy / sxx;
        let r2 = if syy > 0.0 { (sxy * sxy / (sxx * syy)).min(1.0) } else { f64::NAN };
        let v = f(slope, r2, dev - slope * (dn - mid));
        if v.is_finite() { v } else { f64::NAN }
    });
}

/// Slope of the window's least-squares line against days 1 (oldest) to d ([`line`]).
pub fn slope(x: &[f64], d: usize, out: &mut [f64]) {
    line(x, d, out, |b, _, _| b);
}

/// R² of the window's least-squares line ([`line`]); NaN for a constant window.
pub fn rsquare(x: &[f64], d: usize, out: &mut [f64]) {
    line(x, d, out, |_, r2, _| r2);
}

/// Today's value less the window's least-squares line's value today ([`line`]).
pub fn resi(x: &[f64], d: usize, out: &mut [f64]) {
    line(x, d, out, |_, _, e| e);
}

/// The q-quantile of the window's d values, between the two nearest order statistics as
/// pandas' `rolling(d).quantile(q)` interpolates: position h = q·(d − 1) from the smallest,
/// `s[⌊h⌋] + (s[⌊h⌋ + 1] − s[⌊h⌋]) · (h − ⌊h⌋)`. The window is kept sorted: today's value
/// takes the place of the day that left (their positions counted, the values between them
/// shifted by one; sorted afresh after a gap).
pub fn quantile(x: &[f64], d: usize, q: f64, out: &mut [f64]) {
    out.fill(f64::NAN);
    if d == 0 {
        return;
    }
    let h = q.clamp(0.0, 1.0) * (d - 1) as f64;
    let (lo, frac) = (h.floor() as usize, h - h.floor());
    let mut sorted: Vec<f64> = Vec::with_capacity(d);
    let mut last = None;
    finite_windows(x, d, |t| {
        if last == Some(t.wrapping_sub(1)) {
            // The positions are counted, not searched: a branch-free count over the window
            // took 15 % less time than two binary searches, whose branches mispredict.
            let (old, new) = (x[t - d], x[t]);
            let (mut i, mut j) = (0, 0);
            for &u in sorted.iter() {
                (i, j) = (i + usize::from(u < old), j + usize::from(u < new));
            }
            // Today's value enters at its place and each value up to the leaving one's
            // moves one step towards it: a chain of swaps (a call to memmove per day cost
            // more than the few values most days move).
            let mut carry = new;
            if j > i {
                sorted[i..j].iter_mut().rev().for_each(|v| std::mem::swap(v, &mut carry));
            } else {
                sorted[j..=i].iter_mut().for_each(|v| std::mem::swap(v, &mut carry));
            }
        } else {
            sorted.clear();
            sorted.extend_from_slice(&x[t + 1 - d..=t]);
            sorted.sort_unstable_by(f64::total_cmp);
        }
        last = Some(t);
        let a = sorted[lo];
        let v = if frac == 0.0 { a } else { a + (sorted[lo + 1] - a) * frac };
        out[t] = if v.is_finite() { v } else { f64::NAN };
    });
}

/// The last finite value within the past d days including today (forward fill with a
/// limit); NaN when there is none.
pub fn ffill(x: &[f64], d: usize, out: &mut [f64]) {
    let mut last: Option<usize> = None;
    for t in 0..x.len() {
        if x[t].is_finite() {
            last = Some(t);
        }
        out[t] = match last {
            Some(l) if t - l < d => x[l],
            _ => f64::NAN,
        };
    }
}

/// Runs a window kernel on every asset of a panel.
pub fn apply(x: &Panel, d: usize, k: fn(&[f64], usize, &mut [f64])) -> Panel {
    per_asset(x, |s, o| k(s, d, o))
}
