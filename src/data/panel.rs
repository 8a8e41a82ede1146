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

    /// A panel for a kernel that overwrites every cell: a buffer freed by an earlier panel
    /// of about this size when there is one (its old values are still in it), else zeroed
    /// memory straight from the allocator. See [`pool`].
    pub fn scratch(n_dates: usize, n_assets: usize) -> Panel {
        Panel { n_dates, n_assets, data: pool::take(n_dates * n_assets) }
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
        transpose_strided(data, n_assets, &mut p.data, n_dates, n_assets);
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
        // Asset a's dates start at a * n_dates + from: a rows × cols transpose with a
        // source row stride of n_dates.
        transpose_strided(&self.data[from.min(self.data.len())..], self.n_dates, out, self.n_assets, nd);
    }

    /// Share of cells that are not finite.
    pub fn missing_share(&self) -> f64 {
        if self.data.is_empty() {
            return 0.0;
        }
        self.data.iter().filter(|v| !v.is_finite()).count() as f64 / self.data.len() as f64
    }
}

/// Large panels give their buffers back to [`pool`] when dropped.
impl Drop for Panel {
    fn drop(&mut self) {
        pool::give(std::mem::take(&mut self.data));
    }
}

/// Recycles the buffers of dropped panels.
///
/// Evaluating an expression allocates one ~19 MB panel per operator and frees most of them
/// soon after. Each fresh allocation of that size is a new `mmap` whose pages fault in one by
/// one and are cleared by the kernel: measured, about 7 % of the time of evaluating the
/// alpha101 set on one thread. Reusing a freed buffer costs nothing, and since a buffer is
/// only kept while no new panel needs it, the peak memory does not grow: a new panel takes
/// a pooled buffer before it allocates.
pub mod pool {
    use std::sync::Mutex;

    /// Buffers smaller than this (in cells, 256 KB) go back to the allocator: below
    /// glibc's mmap threshold it recycles them well by itself.
    const MIN_CELLS: usize = 1 << 15;
    /// At most this many buffers are kept.
    const MAX_BUFFERS: usize = 8;

    static POOL: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());

    /// A buffer of `len` cells: a pooled one of at least `len` and at most twice `len`
    /// cells (its contents are whatever it last held), else a zeroed allocation.
    pub fn take(len: usize) -> Vec<f64> {
        if len >= MIN_CELLS {
            if let Ok(mut p) = POOL.lock() {
                // The most recently freed first: its pages are the likeliest still in cache.
                if let Some(i) = p.iter().rposition(|b| b.capacity() >= len && b.capacity() <= 2 * len) {
                    let mut b = p.remove(i);
                    drop(p);
                    if b.len() >= len {
                        b.truncate(len);
                    } else {
                        b.resize(len, 0.0);
                    }
                    return b;
                }
            }
        }
        vec![0.0; len]
    }

    /// Keeps `buf` for reuse if it is large and the pool has room; frees it otherwise.
    pub fn give(buf: Vec<f64>) {
        if buf.capacity() < MIN_CELLS {
            return;
        }
        if let Ok(mut p) = POOL.lock() {
            if p.len() >= MAX_BUFFERS {
                // Full: make room by dropping the smallest (the oldest of equals), unless
                // this one is smaller still; large buffers cost the most to allocate.
                match p.iter().enumerate().min_by_key(|(_, b)| b.capacity()) {
                    Some((i, b)) if b.capacity() <= buf.capacity() => drop(p.remove(i)),
                    _ => return,
                }
            }
            p.push(buf);
        }
    }
}

/// Transposes `rows × cols` values read from `src[r * stride + c]` into
/// `dst[c * rows + r]`.
fn transpose_strided(src: &[f64], stride: usize, dst: &mut [f64], rows: usize, cols: usize) {
    tile_transpose(rows, cols, |r, c| src[r * stride + c], |c, r, v| dst[c * rows + r] = v);
}

/// Writes a date-major block (`block[j * na + a]` for dates `t0 + j`) into an asset-major
/// buffer of `nd` dates per asset that starts at `dst`.
///
/// # Safety
/// `dst` must point to a live buffer of at least `nd * na` cells, the block must fit
/// (`t0 + block.len() / na <= nd`), and no other thread may read or write these cells
/// (dates `t0..t0 + rows` of every asset) during the call. Other threads may write other
/// dates of the same buffer: each write goes through the raw pointer, never through a
/// reference spanning the whole buffer.
pub unsafe fn scatter_date_block(dst: *mut f64, nd: usize, na: usize, t0: usize, block: &[f64]) {
    if na == 0 {
        return;
    }
    let rows = block.len() / na;
    debug_assert!(t0 + rows <= nd);
    // SAFETY: a * nd + t0 + j < nd * na for a < na, j < rows, by the caller's contract.
    tile_transpose(rows, na, |j, a| block[j * na + a], |a, j, v| unsafe { *dst.add(a * nd + t0 + j) = v });
}

/// Visits a rows × cols matrix in 8 × 8 tiles, calling `put(c, r, get(r, c))`. Reading
/// and writing whole cache lines per tile avoids the cache-set aliasing of a plain
/// strided loop (a row stride of ~4 KB maps every write to the same few sets).
#[inline(always)]
fn tile_transpose(rows: usize, cols: usize, get: impl Fn(usize, usize) -> f64, mut put: impl FnMut(usize, usize, f64)) {
    const T: usize = 8;
    let mut tile = [[0.0f64; T]; T];
    for r0 in (0..rows).step_by(T) {
        let r1 = (r0 + T).min(rows);
        for c0 in (0..cols).step_by(T) {
            let c1 = (c0 + T).min(cols);
            for r in r0..r1 {
                for c in c0..c1 {
                    tile[c - c0][r - r0] = get(r, c);
                }
            }
            for c in c0..c1 {
                for r in r0..r1 {
                    put(c, r, tile[c - c0][r - r0]);
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
