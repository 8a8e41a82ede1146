//! The dense dates × assets panel every kernel works on.
//!
//! Storage is asset-major (each asset's time series is one contiguous slice), because most
//! operators are time-series ones that walk a single asset's history. Cross-sectional
//! kernels transpose blocks into a date-major scratch buffer instead of striding.

use ndarray::{ArrayView2, ShapeBuilder};
use rayon::prelude::*;

/// A dates × assets panel of `f64`, NaN for missing, stored asset-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    n_dates: usize,
    n_assets: usize,
    data: Vec<f64>,
}

impl Panel {
    /// A panel filled with NaN.
    pub fn nan(n_dates: usize, n_assets: usize) -> Panel {
        Panel::filled(n_dates, n_assets, f64::NAN)
    }

    /// A panel filled with one value.
    pub fn filled(n_dates: usize, n_assets: usize, v: f64) -> Panel {
        Panel { n_dates, n_assets, data: vec![v; n_dates * n_assets] }
    }

    /// Wraps an asset-major buffer (`data[asset * n_dates + date]`).
    ///
    /// # Panics
    /// If the buffer length is not `n_dates * n_assets` (a programming error, never data).
    pub fn from_asset_major(n_dates: usize, n_assets: usize, data: Vec<f64>) -> Panel {
        assert_eq!(data.len(), n_dates * n_assets, "panel buffer has the wrong length");
        Panel { n_dates, n_assets, data }
    }

    /// Builds a panel from a date-major buffer (`data[date * n_assets + asset]`).
    pub fn from_date_major(n_dates: usize, n_assets: usize, data: &[f64]) -> Panel {
        let mut p = Panel::nan(n_dates, n_assets);
        transpose(data, &mut p.data, n_dates, n_assets);
        p
    }

    pub fn n_dates(&self) -> usize {
        self.n_dates
    }

    pub fn n_assets(&self) -> usize {
        self.n_assets
    }

    /// Value at (date, asset).
    #[inline]
    pub fn get(&self, date: usize, asset: usize) -> f64 {
        self.data[asset * self.n_dates + date]
    }

    #[inline]
    pub fn set(&mut self, date: usize, asset: usize, v: f64) {
        self.data[asset * self.n_dates + date] = v;
    }

    /// One asset's full time series.
    #[inline]
    pub fn series(&self, asset: usize) -> &[f64] {
        &self.data[asset * self.n_dates..(asset + 1) * self.n_dates]
    }

    /// The raw asset-major buffer.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    pub fn as_mut_slice(&mut self) -> &mut [f64] {
        &mut self.data
    }

    pub fn into_vec(self) -> Vec<f64> {
        self.data
    }

    /// Iterates mutable per-asset series in parallel.
    pub fn par_series_mut(&mut self) -> rayon::slice::ChunksMut<'_, f64> {
        let n = self.n_dates.max(1);
        self.data.par_chunks_mut(n)
    }

    /// A zero-copy `ndarray` view with shape (dates, assets).
    pub fn view(&self) -> ArrayView2<'_, f64> {
        // Column-major (Fortran) layout of a (dates, assets) array is exactly asset-major.
        ArrayView2::from_shape((self.n_dates, self.n_assets).f(), &self.data)
            .expect("panel shape matches its buffer")
    }

    /// The first `n` dates only (used to cut a panel at a period's end so that nothing
    /// after it can be read).
    pub fn truncate_dates(&self, n: usize) -> Panel {
        let n = n.min(self.n_dates);
        let mut data = Vec::with_capacity(n * self.n_assets);
        for a in 0..self.n_assets {
            data.extend_from_slice(&self.series(a)[..n]);
        }
        Panel { n_dates: n, n_assets: self.n_assets, data }
    }

    /// Date-major copy (`out[date * n_assets + asset]`) of dates `from..to`.
    pub fn to_date_major(&self, from: usize, to: usize, out: &mut Vec<f64>) {
        let nd = to - from;
        out.clear();
        out.resize(nd * self.n_assets, f64::NAN);
        let na = self.n_assets;
        // Blocked transpose keeps both sides in cache.
        const B: usize = 64;
        for a0 in (0..na).step_by(B) {
            let a1 = (a0 + B).min(na);
            for t0 in (0..nd).step_by(B) {
                let t1 = (t0 + B).min(nd);
                for a in a0..a1 {
                    let src = &self.data[a * self.n_dates + from..];
                    for t in t0..t1 {
                        out[t * na + a] = src[t];
                    }
                }
            }
        }
    }

    /// Share of cells that are not finite.
    pub fn missing_share(&self) -> f64 {
        if self.data.is_empty() {
            return 0.0;
        }
        self.data.iter().filter(|v| !v.is_finite()).count() as f64 / self.data.len() as f64
    }
}

/// Transposes a `rows × cols` row-major buffer into `cols × rows` row-major, in blocks.
pub fn transpose(src: &[f64], dst: &mut [f64], rows: usize, cols: usize) {
    const B: usize = 64;
    for r0 in (0..rows).step_by(B) {
        let r1 = (r0 + B).min(rows);
        for c0 in (0..cols).step_by(B) {
            let c1 = (c0 + B).min(cols);
            for r in r0..r1 {
                for c in c0..c1 {
                    dst[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_agree() {
        let dm: Vec<f64> = (0..12).map(|v| v as f64).collect(); // 4 dates × 3 assets
        let p = Panel::from_date_major(4, 3, &dm);
        assert_eq!(p.get(2, 1), 7.0);
        assert_eq!(p.series(1), &[1.0, 4.0, 7.0, 10.0]);
        assert_eq!(p.view()[[3, 2]], 11.0);
        let mut back = Vec::new();
        p.to_date_major(0, 4, &mut back);
        assert_eq!(back, dm);
        p.to_date_major(1, 3, &mut back);
        assert_eq!(back, dm[3..9].to_vec());
        assert_eq!(p.truncate_dates(2).series(2), &[2.0, 5.0]);
    }
}
