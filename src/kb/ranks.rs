//! Accepted alphas' per-date ranks over the mining period (train, then valid), kept on
//! disk beside the knowledge base, so that comparing a candidate with every accepted alpha
//! costs one pass over the candidate's ranks instead of re-evaluating the accepted set.
//!
//! Exactness: a signal is ranked in f64 (each date's percentile ranks, ties averaged, as
//! `rank()` computes them) and only then stored as f32. The other order loses alphas: cast
//! first, a signal of the form `… + 1` whose other terms are near 1e-9 becomes all ties.
//! A rank in (0, 1] keeps about 7 significant digits in f32, and the correlation's sums
//! are taken in f32 over blocks of 512 cells and in f64 across blocks, so it is within
//! 1e-6 of a plain f64 computation (tested) at a quarter of the f64 pass's time.
//!
//! Layout: one file per alpha, `<base>/<data key>/<id>-<code hash>.f32`, the periods' dates
//! one after another, each date a row of one value per asset (NaN where the signal is not
//! finite); little-endian f32, memory-mapped on use. The data key hashes every value of the
//! data the ranks were computed on and the period's dates, so ranks are never read against
//! other data; the code hash makes a changed formula a new file.

use super::{AlphaRecord, Filter, Kb, KbError, Kind};
use crate::data::{MarketData, Panel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Ranked signals of one data set and period, on disk and mapped into memory on use.
pub struct RankStore {
    dir: PathBuf,
    start: usize,
    end: usize,
    n_assets: usize,
    mapped: Mutex<HashMap<PathBuf, Arc<Ranks>>>,
}

/// One alpha's ranks: `(end - start) × n_assets` values, date-major.
pub struct Ranks(Backing);

enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<f32>),
}

impl Ranks {
    pub fn values(&self) -> &[f32] {
        match &self.0 {
            Backing::Owned(v) => v,
            Backing::Mapped(m) => {
                // SAFETY: any bit pattern is a valid f32, and the map is page-aligned, so
                // `align_to` leaves no prefix; a file's length is checked against the
                // panel's shape when it is opened.
                let (head, body, _) = unsafe { m.align_to::<f32>() };
                debug_assert!(head.is_empty());
                body
            }
        }
    }
}

/// The ranks of `signal`'s dates `start..end` (date-major), ranked in f64 and then stored
/// as f32.
pub fn rank_rows(signal: &Panel, start: usize, end: usize) -> Vec<f32> {
    let ranked = crate::expr::kernels::cross::rank(signal);
    let mut rows = Vec::new();
    ranked.to_date_major(start, end, &mut rows);
    rows.into_iter().map(|r| r as f32).collect()
}

/// Pearson correlation of two ranked panels pooled over every cell where both are finite;
/// `None` with fewer than three such cells or no spread. Ranks are centred on 0.5 before
/// summing, so the sums of squares do not cancel.
pub fn pooled_corr(a: &[f32], b: &[f32]) -> Option<f64> {
    assert_eq!(a.len(), b.len(), "ranks of the same shape");
    let [n, sx, sy, sxx, syy, sxy] = crate::data::with_avx512(#[inline(always)] || sums(a, b));
    if n < 3.0 {
        return None;
    }
    let cov = sxy - sx * sy / n;
    let (vx, vy) = (sxx - sx * sx / n, syy - sy * sy / n);
    (vx > 0.0 && vy > 0.0).then(|| (cov / (vx * vy).sqrt()).clamp(-1.0, 1.0))
}

/// Each row's mean rank, `(n + 1) / 2n` for its `n` finite percentile ranks (ties
/// averaged keep the mean), for rows of `na` cells; NaN for a row with none. Ranks centred
/// on it are exactly mirrored by a negation (`rank(-x)` is `(n + 1) / n − rank(x)`), which
/// centring on 0.5 misses by 1/n.
pub fn row_centres(r: &[f32], na: usize) -> Vec<f32> {
    r.chunks(na.max(1))
        .map(|row| {
            let n = row.iter().filter(|v| v.is_finite()).count() as f64;
            if n > 0.0 { ((n + 1.0) / (2.0 * n)) as f32 } else { f32::NAN }
        })
        .collect()
}

/// Σ (a − ca)(b − cb) over the cells where `a`, `b` and `on` are all finite, the centres
/// `ca` and `cb` given per row of `na` cells ([`row_centres`]): a regression's cross
/// product of centred ranks over the cells with a label (`on`), a missing rank counting as
/// its row's centre. Summed in sixteen f32 lanes per row, folded into f64 once per row.
pub fn centred_dot(a: &[f32], ca: &[f32], b: &[f32], cb: &[f32], on: &[f32], na: usize) -> f64 {
    assert!(a.len() == b.len() && a.len() == on.len() && ca.len() == cb.len() && ca.len() * na == a.len(), "ranks of the same shape");
    crate::data::with_avx512(#[inline(always)] || {
        const L: usize = 16;
        let mut total = 0f64;
        let rows = a.chunks(na.max(1)).zip(b.chunks(na.max(1))).zip(on.chunks(na.max(1)));
        for (((ra, rb), ro), (&ma, &mb)) in rows.zip(ca.iter().zip(cb)) {
            let mut s = [0f32; L];
            let cell = |s: &mut [f32; L], k: usize, x: f32, y: f32, o: f32| {
                let ok = x.is_finite() && y.is_finite() && o.is_finite();
                s[k] += if ok { (x - ma) * (y - mb) } else { 0.0 };
            };
            let (xa, xb, xo) = (ra.chunks_exact(L), rb.chunks_exact(L), ro.chunks_exact(L));
            let (qa, qb, qo) = (xa.remainder(), xb.remainder(), xo.remainder());
            for ((la, lb), lo) in xa.zip(xb).zip(xo) {
                for k in 0..L {
                    cell(&mut s, k, la[k], lb[k], lo[k]);
                }
            }
            for (k, ((&x, &y), &o)) in qa.iter().zip(qb).zip(qo).enumerate() {
                cell(&mut s, k, x, y, o);
            }
            total += s.iter().map(|&v| v as f64).sum::<f64>();
        }
        total
    })
}

/// Cells per block summed in f32 before the block's sums join the f64 totals: a block's
/// rounding (centred ranks are at most 0.5, so a block's sums stay below 128) is about
/// 1e-5 of one cell's value, far below what moves a correlation at 1e-6.
const BLOCK: usize = 512;

/// Count, sums, sums of squares and of products over the cells finite on both sides:
/// sixteen f32 lanes per block (one AVX-512 register each where the CPU has it), folded
/// into f64 once per block.
#[inline(always)]
fn sums(a: &[f32], b: &[f32]) -> [f64; 6] {
    const L: usize = 16;
    let mut total = [0f64; 6];
    for (ba, bb) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        let mut s = [[0f32; L]; 6];
        let (ca, cb) = (ba.chunks_exact(L), bb.chunks_exact(L));
        let (ra, rb) = (ca.remainder(), cb.remainder());
        for (xa, xb) in ca.zip(cb) {
            for k in 0..L {
                add_cell(&mut s, k, xa[k], xb[k]);
            }
        }
        for (k, (&x, &y)) in ra.iter().zip(rb).enumerate() {
            add_cell(&mut s, k, x, y);
        }
        for (t, l) in total.iter_mut().zip(&s) {
            *t += l.iter().map(|&v| v as f64).sum::<f64>();
        }
    }
    total
}

/// One cell pair into lane `k` of the block's sums (nothing unless both are finite).
#[inline(always)]
fn add_cell<const L: usize>(s: &mut [[f32; L]; 6], k: usize, x: f32, y: f32) {
    let ok = x.is_finite() && y.is_finite();
    let (x, y) = if ok { (x - 0.5, y - 0.5) } else { (0.0, 0.0) };
    s[0][k] += ok as u8 as f32;
    s[1][k] += x;
    s[2][k] += y;
    s[3][k] += x * x;
    s[4][k] += y * y;
    s[5][k] += x * y;
}

/// A content hash of everything a signal can read: the calendar, the universe, every value
/// of every field and the groups. Unlike [`MarketData::fingerprint`] (a sample of closes,
/// cheap enough for every saved model), it changes when any single value does: ranks kept
/// across a data change would be wrong silently.
pub fn data_key(data: &MarketData) -> String {
    let mut h = Hash(0x243f_6a88_85a3_08d3);
    for d in &data.dates {
        h.text(&d.to_string());
    }
    data.symbols.iter().for_each(|s| h.text(s));
    for (name, p) in &data.fields {
        h.text(name);
        // The panel's flat buffer includes the padding lanes of a last partial group,
        // which hold NaN by construction; hashing them is harmless and keeps this one pass.
        p.as_slice().iter().for_each(|v| h.mix(v.to_bits()));
    }
    if let Some(g) = &data.groups {
        g.ids.iter().for_each(|i| h.mix(i.map_or(u64::MAX, u64::from)));
        g.names.iter().for_each(|s| h.text(s));
    }
    format!("{:016x}", h.0)
}

/// A multiply-rotate hash of 64-bit words: one multiply per value, a few milliseconds over
/// the full data's 20 million cells.
struct Hash(u64);

impl Hash {
    fn mix(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    fn text(&mut self, s: &str) {
        self.mix(s.len() as u64);
        s.bytes().for_each(|b| self.mix(b as u64));
    }
}

/// A file name for an id (ids come from users and LLM runs: keep `[A-Za-z0-9_.-]`).
fn file_stem(id: &str, code: &str) -> String {
    let safe: String = id.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in code.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{safe}-{h:016x}")
}

impl RankStore {
    /// The store for dates `start..end` of `data`, under `base` (created on first write).
    pub fn new(base: &Path, data: &MarketData, start: usize, end: usize) -> RankStore {
        assert!(start <= end && end <= data.n_dates(), "a period inside the data");
        let key = format!("{}-{}-{}", data_key(data), data.dates.get(start).map(|d| d.to_string()).unwrap_or_default(), end - start);
        RankStore { dir: base.join(key), start, end, n_assets: data.n_assets(), mapped: Mutex::default() }
    }

    /// Dates per stored panel.
    pub fn n_dates(&self) -> usize {
        self.end - self.start
    }

    pub fn n_assets(&self) -> usize {
        self.n_assets
    }

    /// The ranks of `signal` over this store's dates (not stored).
    pub fn rank(&self, signal: &Panel) -> Ranks {
        Ranks(Backing::Owned(rank_rows(signal, self.start, self.end)))
    }

    /// Where alpha `id`'s ranks with formula `code` are kept.
    fn path(&self, id: &str, code: &str) -> PathBuf {
        self.dir.join(format!("{}.f32", file_stem(id, code)))
    }

    /// Writes `values` to `path` whole under another name, then renames it into place: a
    /// reader never maps a half-written file.
    fn write(&self, path: &Path, values: &[f32]) -> Result<(), KbError> {
        let io = |err: std::io::Error| KbError::Io { path: path.to_path_buf(), err };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let part = path.with_extension("part");
        std::fs::write(&part, bytes).map_err(io)?;
        std::fs::rename(&part, path).map_err(io)
    }

    /// Keeps `ranks` as alpha `id`'s with formula `code` (a Python factor's, which this
    /// store could not compute later without its sandbox).
    pub fn put(&self, id: &str, code: &str, ranks: &Ranks) -> Result<(), KbError> {
        let path = self.path(id, code);
        if path.exists() {
            return Ok(());
        }
        self.write(&path, ranks.values())
    }

    /// The stored ranks of alpha `id` with formula `code`, computed from `signal()` and
    /// written when missing; `None` when `signal()` gives none (a formula that no longer
    /// evaluates on this data).
    pub fn get_or_compute(&self, id: &str, code: &str, signal: impl FnOnce() -> Option<Arc<Panel>>) -> Result<Option<Arc<Ranks>>, KbError> {
        let path = self.path(id, code);
        if let Some(r) = self.mapped.lock().unwrap_or_else(|p| p.into_inner()).get(&path) {
            return Ok(Some(r.clone()));
        }
        let io = |err: std::io::Error| KbError::Io { path: path.clone(), err };
        let want = (self.n_dates() * self.n_assets * 4) as u64;
        if let Some(len) = std::fs::metadata(&path).ok().map(|m| m.len()).filter(|&l| l != want) {
            // Cut short by a crash: computed again below.
            tracing::warn!("{}: {len} bytes, not {want}; recomputing", path.display());
            std::fs::remove_file(&path).map_err(io)?;
        }
        if !path.exists() {
            let Some(sig) = signal() else { return Ok(None) };
            self.write(&path, &rank_rows(&sig, self.start, self.end))?;
        }
        let file = std::fs::File::open(&path).map_err(io)?;
        // SAFETY: the file is only ever written whole under another name and renamed into
        // place, never modified after, so the mapped bytes do not change under the map.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        if map.len() as u64 != want {
            return Err(KbError::Invalid(format!("{}: {} bytes, not {want}", path.display(), map.len())));
        }
        let r = Arc::new(Ranks(Backing::Mapped(map)));
        self.mapped.lock().unwrap_or_else(|p| p.into_inner()).insert(path, r.clone());
        Ok(Some(r))
    }
}

impl Kb {
    /// The accepted alphas that `keep` keeps, each with its ranks from `store`: computed on
    /// `data` where missing for an expression; an alpha with none that cannot be evaluated
    /// here (a Python factor accepted elsewhere, a formula this data cannot compute) is
    /// left out. In parallel over alphas.
    pub fn accepted_ranks(&self, store: &RankStore, data: &MarketData, keep: impl Fn(&AlphaRecord) -> bool + Sync) -> Result<Vec<(AlphaRecord, Arc<Ranks>)>, KbError> {
        use rayon::prelude::*;
        let recs: Vec<AlphaRecord> = self.records(&Filter::new().is("status", "accepted"))?.into_iter().filter(|r| keep(r)).collect();
        let found: Vec<Result<Option<(AlphaRecord, Arc<Ranks>)>, KbError>> = recs
            .into_par_iter()
            .map(|r| {
                let signal = || {
                    if r.kind != Kind::Expression {
                        return None;
                    }
                    crate::expr::eval_expr(&r.code, data, self).map_err(|e| tracing::warn!("accepted alpha {} does not evaluate on this data: {e}", r.id)).ok()
                };
                Ok(store.get_or_compute(&r.id, &r.code, signal)?.map(|k| (r, k)))
            })
            .collect();
        found.into_iter().filter_map(Result::transpose).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_correlation_skips_non_finite_cells_and_sees_a_sign_flip() {
        let a: Vec<f32> = (0..37).map(|i| ((i * 7) % 37) as f32 / 37.0 + 0.01).collect();
        let mut b = a.clone();
        assert!((pooled_corr(&a, &b).expect("defined") - 1.0).abs() < 1e-12);
        let flipped: Vec<f32> = a.iter().map(|x| 1.0 - x).collect();
        assert!((pooled_corr(&a, &flipped).expect("defined") + 1.0).abs() < 1e-6);
        // A NaN on either side drops the cell; a wild value there would otherwise count.
        b[3] = f32::NAN;
        let mut c = a.clone();
        c[3] = 1e6;
        assert!((pooled_corr(&c, &b).expect("defined") - 1.0).abs() < 1e-12);
        assert_eq!(pooled_corr(&a[..2], &b[..2]), None);
        assert_eq!(pooled_corr(&[0.5; 9], &a[..9]), None);
    }

    #[test]
    fn file_names_are_safe_and_follow_the_code() {
        assert!(file_stem("run/1 x", "rank(close)").starts_with("run_1_x-"));
        assert_ne!(file_stem("a", "rank(close)"), file_stem("a", "rank(open)"));
    }
}
