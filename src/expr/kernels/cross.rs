//! Cross-sectional (per-date) kernels. The panel is transposed to a date-major scratch
//! buffer in cache-sized blocks so each date's cross-section is contiguous, processed in
//! parallel over dates, and transposed back.

use crate::data::{transpose, Groups, Panel};
use rayon::prelude::*;

/// Applies `k(row_in, row_out)` to each date's cross-section.
pub fn per_date(x: &Panel, k: impl Fn(&[f64], &mut [f64]) + Sync) -> Panel {
    let (nd, na) = (x.n_dates(), x.n_assets());
    if nd == 0 || na == 0 {
        return x.clone();
    }
    let mut rows = Vec::new();
    x.to_date_major(0, nd, &mut rows);
    let mut out_rows = vec![f64::NAN; nd * na];
    out_rows.par_chunks_mut(na).zip(rows.par_chunks(na)).for_each(|(o, r)| k(r, o));
    let mut out = vec![0.0; nd * na];
    transpose(&out_rows, &mut out, nd, na);
    Panel::from_asset_major(nd, na, out)
}

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

/// Sorts the finite values of `row` as (key, index) pairs into `buf`.
#[inline]
pub fn sorted_finite(row: &[f64], buf: &mut Vec<(u64, u32)>) {
    buf.clear();
    buf.extend(row.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, v)| (order_key(*v), i as u32)));
    buf.sort_unstable();
}

/// Average ranks (1-based, ties averaged) of pre-sorted (key, index) pairs, written to
/// `out[index] = f(rank)`.
#[inline]
pub fn average_ranks(sorted: &[(u64, u32)], mut f: impl FnMut(u32, f64)) {
    let n = sorted.len();
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && sorted[j].0 == sorted[i].0 {
            j += 1;
        }
        // positions i..j (0-based) share the average of ranks i+1..=j
        let r = (i + 1 + j) as f64 / 2.0;
        for &(_, idx) in &sorted[i..j] {
            f(idx, r);
        }
        i = j;
    }
}

/// Percentile rank in (0, 1], ties averaged, NaN ignored (pandas `rank(pct=True)`).
pub fn rank_row(row: &[f64], out: &mut [f64], buf: &mut Vec<(u64, u32)>) {
    out.fill(f64::NAN);
    sorted_finite(row, buf);
    let n = buf.len() as f64;
    average_ranks(buf, |i, r| out[i as usize] = r / n);
}

/// Cross-sectional percentile rank.
pub fn rank(x: &Panel) -> Panel {
    let (nd, na) = (x.n_dates(), x.n_assets());
    if nd == 0 || na == 0 {
        return x.clone();
    }
    let mut rows = Vec::new();
    x.to_date_major(0, nd, &mut rows);
    let mut out_rows = vec![f64::NAN; nd * na];
    out_rows
        .par_chunks_mut(na)
        .zip(rows.par_chunks(na))
        .for_each_init(|| Vec::with_capacity(na), |buf, (o, r)| rank_row(r, o, buf));
    let mut out = vec![0.0; nd * na];
    transpose(&out_rows, &mut out, nd, na);
    Panel::from_asset_major(nd, na, out)
}

/// `x / sum(|x|)` per date (finite values only); NaN when the sum is zero.
pub fn scale(x: &Panel) -> Panel {
    per_date(x, |r, o| {
        let s: f64 = r.iter().filter(|v| v.is_finite()).map(|v| v.abs()).sum();
        for (o, v) in o.iter_mut().zip(r) {
            *o = if s > 0.0 && v.is_finite() { v / s } else { f64::NAN };
        }
    })
}

/// `x` minus its same-date mean within each group (finite values only). Assets without a
/// group get NaN.
pub fn indneutralize(x: &Panel, groups: &Groups) -> Panel {
    let ng = groups.names.len();
    per_date(x, |r, o| {
        let mut sum = vec![0.0; ng];
        let mut cnt = vec![0u32; ng];
        for (v, g) in r.iter().zip(&groups.ids) {
            if let (Some(g), true) = (g, v.is_finite()) {
                sum[*g as usize] += v;
                cnt[*g as usize] += 1;
            }
        }
        for ((o, v), g) in o.iter_mut().zip(r).zip(&groups.ids) {
            *o = match g {
                Some(g) if v.is_finite() => v - sum[*g as usize] / cnt[*g as usize] as f64,
                _ => f64::NAN,
            };
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_matches_pandas_pct_average() {
        let mut out = vec![0.0; 5];
        let mut buf = Vec::new();
        rank_row(&[3.0, f64::NAN, 1.0, 3.0, -0.0], &mut out, &mut buf);
        // finite: 3, 1, 3, -0 -> ranks 3.5, 2, 3.5, 1 over n = 4
        assert_eq!(out[0], 3.5 / 4.0);
        assert!(out[1].is_nan());
        assert_eq!(out[2], 2.0 / 4.0);
        assert_eq!(out[4], 1.0 / 4.0);
        assert!(order_key(-0.0) == order_key(0.0));
        assert!(order_key(-1.0) < order_key(-0.5) && order_key(0.5) < order_key(1.0));
    }
}
