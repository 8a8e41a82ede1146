//! Accepted alphas' per-date ranks over the mining period (train, then valid), kept on
//! disk beside the knowledge base, so that comparing a candidate with every accepted alpha
//! costs one pass over the candidate's ranks instead of re-evaluating the accepted set.
//!
//! Exactness: a date's percentile ranks (ties averaged, as `rank()` computes them) are
//! `p / n` for `n` finite values and an average position `p` that is a multiple of 1/2, so
//! each is kept exactly as the integer `2p` in 16 bits (0 where the signal is not finite)
//! beside the date's count `n`. That is half the bytes of f32 ranks, which is what a pass
//! over a few hundred accepted alphas waits for, and loses nothing. The correlation's sums
//! are taken in sixteen f32 lanes per date and in f64 across dates, within 1e-6 of a plain
//! f64 computation (tested).
//!
//! Layout: one file per alpha, `<base>/<data key>/<id>-<code hash>.r16`: the periods'
//! dates one after another, each date a row of one code per asset, then each date's count;
//! little-endian u16, memory-mapped on use. The data key hashes every value of the data the
//! ranks were computed on and the period's dates, so ranks are never read against other
//! data; the code hash makes a changed formula a new file.

use super::{AlphaRecord, Filter, Kb, KbError, Kind};
use crate::data::{MarketData, Panel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The widest universe whose ranks fit the 16-bit codes (twice the largest position).
pub const MAX_ASSETS: usize = u16::MAX as usize / 2;

/// Ranked signals of one data set and period, on disk and mapped into memory on use.
pub struct RankStore {
    dir: PathBuf,
    start: usize,
    end: usize,
    n_assets: usize,
    mapped: Mutex<HashMap<PathBuf, Arc<Ranks>>>,
}

/// One signal's percentile ranks over `n_dates` dates of `n_assets` assets: each cell's
/// code `2p` (twice its average position among the date's finite values, 0 where it has
/// none), date-major, then each date's count `n`; the rank is `code / 2n`.
pub struct Ranks {
    words: Backing,
    n_dates: usize,
    n_assets: usize,
}

enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u16>),
}

impl Ranks {
    /// Codes a date-major panel of percentile ranks in (0, 1] (NaN where missing), rows of
    /// `n_assets` cells.
    pub fn encode(rows: &[f64], n_assets: usize) -> Ranks {
        assert!(n_assets <= MAX_ASSETS, "at most {MAX_ASSETS} assets");
        let na = n_assets.max(1);
        let n_dates = rows.len() / na;
        let mut words = Vec::with_capacity(n_dates * (n_assets + 1));
        let mut counts = Vec::with_capacity(n_dates);
        for row in rows.chunks(na) {
            let n = row.iter().filter(|v| v.is_finite()).count();
            let top = 2.0 * n as f64;
            // Rounding (to nearest: the product is positive) takes an f32-stored rank back
            // to its exact position.
            words.extend(row.iter().map(|&r| if r.is_finite() { (r * top + 0.5).min(top) as u16 } else { 0 }));
            counts.push(n as u16);
        }
        words.extend(counts);
        Ranks { words: Backing::Owned(words), n_dates, n_assets }
    }

    fn words(&self) -> &[u16] {
        match &self.words {
            Backing::Owned(v) => v,
            Backing::Mapped(m) => {
                // SAFETY: any bit pattern is a valid u16, and the map is page-aligned, so
                // `align_to` leaves no prefix; a file's length is checked against the
                // panel's shape when it is opened.
                let (head, body, _) = unsafe { m.align_to::<u16>() };
                debug_assert!(head.is_empty());
                body
            }
        }
    }

    pub fn n_dates(&self) -> usize {
        self.n_dates
    }

    /// Date `d`'s codes and its count of finite ranks.
    #[inline(always)]
    pub fn row(&self, d: usize) -> (&[u16], u16) {
        let (na, w) = (self.n_assets, self.words());
        (&w[d * na..(d + 1) * na], w[self.n_dates * na + d])
    }

    /// The percentile ranks of the first `dates` dates, date-major, NaN where missing.
    pub fn decode(&self, dates: usize) -> Vec<f32> {
        (0..dates)
            .flat_map(|d| {
                let (codes, n) = self.row(d);
                let top = 2.0 * n as f64;
                codes.iter().map(move |&q| if q == 0 { f32::NAN } else { (q as f64 / top) as f32 })
            })
            .collect()
    }
}

/// The ranks of `signal`'s dates `start..end`, ranked in f64 as `rank()` ranks.
pub fn rank_rows(signal: &Panel, start: usize, end: usize) -> Ranks {
    let ranked = crate::expr::kernels::cross::rank(signal);
    let mut rows = Vec::new();
    ranked.to_date_major(start, end, &mut rows);
    Ranks::encode(&rows, signal.n_assets())
}

/// A date's codes in sixteen lanes and a remainder, for the sums below.
const L: usize = 16;

/// Pearson correlation of two ranked panels over their first `dates` dates, pooled over
/// every cell where both are finite; `None` with fewer than three such cells or no spread.
/// Ranks are centred on 0.5 before summing, so the sums of squares do not cancel.
pub fn pooled_corr(a: &Ranks, b: &Ranks, dates: usize) -> Option<f64> {
    assert!(a.n_assets == b.n_assets && dates <= a.n_dates.min(b.n_dates), "ranks of the same shape");
    let [n, sx, sy, sxx, syy, sxy] = crate::data::with_avx512(
        #[inline(always)]
        || {
            let mut total = [0f64; 6];
            for d in 0..dates {
                let ((ra, na), (rb, nb)) = (a.row(d), b.row(d));
                if na == 0 || nb == 0 {
                    continue;
                }
                // x = code / 2n − 1/2 = (code − n) / 2n: the integer part exact in f32.
                let (ha, hb, sa, sb) = (na as f32, nb as f32, 0.5 / na as f32, 0.5 / nb as f32);
                let mut s = [[0f32; L]; 6];
                let mut cell = |k: usize, x: u16, y: u16| {
                    let ok = x != 0 && y != 0;
                    let (x, y) = if ok { ((x as f32 - ha) * sa, (y as f32 - hb) * sb) } else { (0.0, 0.0) };
                    s[0][k] += ok as u8 as f32;
                    s[1][k] += x;
                    s[2][k] += y;
                    s[3][k] += x * x;
                    s[4][k] += y * y;
                    s[5][k] += x * y;
                };
                let (ca, cb) = (ra.chunks_exact(L), rb.chunks_exact(L));
                let (qa, qb) = (ca.remainder(), cb.remainder());
                for (xa, xb) in ca.zip(cb) {
                    for k in 0..L {
                        cell(k, xa[k], xb[k]);
                    }
                }
                for (k, (&x, &y)) in qa.iter().zip(qb).enumerate() {
                    cell(k, x, y);
                }
                for (t, l) in total.iter_mut().zip(&s) {
                    *t += l.iter().map(|&v| v as f64).sum::<f64>();
                }
            }
            total
        },
    );
    if n < 3.0 {
        return None;
    }
    let cov = sxy - sx * sy / n;
    let (vx, vy) = (sxx - sx * sx / n, syy - sy * sy / n);
    (vx > 0.0 && vy > 0.0).then(|| (cov / (vx * vy).sqrt()).clamp(-1.0, 1.0))
}

/// Σ (a − ā)(b − b̄) over the first `dates` dates' cells where `a`, `b` and `on` are all
/// finite, each rank centred on its date's mean rank `(n + 1) / 2n` (the mean of `n`
/// percentile ranks, ties averaged or not): a regression's cross product of centred ranks
/// over the cells with a label (`on`), a missing rank counting as its date's centre.
/// Centred so, a negation mirrors exactly (`rank(-x)` is `(n + 1) / n − rank(x)`), which
/// centring on 0.5 misses by 1/n.
pub fn centred_dot(a: &Ranks, b: &Ranks, on: &Ranks, dates: usize) -> f64 {
    assert!(a.n_assets == b.n_assets && a.n_assets == on.n_assets && dates <= a.n_dates.min(b.n_dates).min(on.n_dates), "ranks of the same shape");
    crate::data::with_avx512(
        #[inline(always)]
        || {
            let mut total = 0f64;
            for d in 0..dates {
                let ((ra, na), (rb, nb), (ro, _)) = (a.row(d), b.row(d), on.row(d));
                if na == 0 || nb == 0 {
                    continue;
                }
                // (code − (n + 1)) / 2n: the integer part exact in f32.
                let (ha, hb, sa, sb) = (na as f32 + 1.0, nb as f32 + 1.0, 0.5 / na as f32, 0.5 / nb as f32);
                let mut s = [0f32; L];
                let mut cell = |k: usize, x: u16, y: u16, o: u16| {
                    let ok = x != 0 && y != 0 && o != 0;
                    s[k] += if ok { (x as f32 - ha) * sa * ((y as f32 - hb) * sb) } else { 0.0 };
                };
                let (xa, xb, xo) = (ra.chunks_exact(L), rb.chunks_exact(L), ro.chunks_exact(L));
                let (qa, qb, qo) = (xa.remainder(), xb.remainder(), xo.remainder());
                for ((la, lb), lo) in xa.zip(xb).zip(xo) {
                    for k in 0..L {
                        cell(k, la[k], lb[k], lo[k]);
                    }
                }
                for (k, ((&x, &y), &o)) in qa.iter().zip(qb).zip(qo).enumerate() {
                    cell(k, x, y, o);
                }
                total += s.iter().map(|&v| v as f64).sum::<f64>();
            }
            total
        },
    )
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
        assert!(data.n_assets() <= MAX_ASSETS, "at most {MAX_ASSETS} assets");
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
        rank_rows(signal, self.start, self.end)
    }

    /// Where alpha `id`'s ranks with formula `code` are kept.
    fn path(&self, id: &str, code: &str) -> PathBuf {
        self.dir.join(format!("{}.r16", file_stem(id, code)))
    }

    /// Writes `values` to `path` whole under another name, then renames it into place: a
    /// reader never maps a half-written file.
    fn write(&self, path: &Path, ranks: &Ranks) -> Result<(), KbError> {
        let io = |err: std::io::Error| KbError::Io { path: path.to_path_buf(), err };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let bytes: Vec<u8> = ranks.words().iter().flat_map(|v| v.to_le_bytes()).collect();
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
        self.write(&path, ranks)
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
        let want = (self.n_dates() * (self.n_assets + 1) * 2) as u64;
        if let Some(len) = std::fs::metadata(&path).ok().map(|m| m.len()).filter(|&l| l != want) {
            // Cut short by a crash: computed again below.
            tracing::warn!("{}: {len} bytes, not {want}; recomputing", path.display());
            std::fs::remove_file(&path).map_err(io)?;
        }
        if !path.exists() {
            let Some(sig) = signal() else { return Ok(None) };
            self.write(&path, &rank_rows(&sig, self.start, self.end))?;
            // The same ranks as f32, as earlier versions kept them: twice the disk, never read.
            let _ = std::fs::remove_file(path.with_extension("f32"));
        }
        let file = std::fs::File::open(&path).map_err(io)?;
        // SAFETY: the file is only ever written whole under another name and renamed into
        // place, never modified after, so the mapped bytes do not change under the map.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        if map.len() as u64 != want {
            return Err(KbError::Invalid(format!("{}: {} bytes, not {want}", path.display(), map.len())));
        }
        let r = Arc::new(Ranks { words: Backing::Mapped(map), n_dates: self.n_dates(), n_assets: self.n_assets });
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

    /// Percentile ranks of `rows` (date-major, `na` a row), ties averaged, as `rank()`.
    fn ranks(rows: &[f64], na: usize) -> Ranks {
        let ranked: Vec<f64> = rows
            .chunks(na)
            .flat_map(|row| {
                let ok: Vec<f64> = row.iter().copied().filter(|v| v.is_finite()).collect();
                let n = ok.len() as f64;
                row.iter().map(move |&v| {
                    if !v.is_finite() {
                        return f64::NAN;
                    }
                    let below = ok.iter().filter(|&&o| o < v).count() as f64;
                    let equal = ok.iter().filter(|&&o| o == v).count() as f64;
                    (below + (equal + 1.0) / 2.0) / n
                })
            })
            .collect();
        Ranks::encode(&ranked, na)
    }

    #[test]
    fn codes_keep_ranks_exactly_and_correlations_skip_missing_cells() {
        let na = 37;
        let a: Vec<f64> = (0..3 * na).map(|i| ((i * 7) % 37) as f64 + (i / na) as f64).collect();
        let ra = ranks(&a, na);
        // Ties averaged: half positions survive the 16-bit codes exactly.
        let tied = ranks(&[2.0, 1.0, 2.0, f64::NAN], 4);
        assert_eq!(tied.row(0), (&[5u16, 2, 5, 0][..], 3));
        assert_eq!(tied.decode(1)[..3], [5.0f32 / 6.0, 2.0 / 6.0, 5.0 / 6.0]);
        assert!(tied.decode(1)[3].is_nan());
        assert!((pooled_corr(&ra, &ra, 3).expect("defined") - 1.0).abs() < 1e-12);
        let flipped = ranks(&a.iter().map(|x| -x).collect::<Vec<_>>(), na);
        assert!((pooled_corr(&ra, &flipped, 3).expect("defined") + 1.0).abs() < 1e-6);
        // A NaN on either side drops the cell; a wild value there would otherwise count.
        let mut b = a.clone();
        b[3] = f64::NAN;
        let mut c = a.clone();
        c[3] = 1e6;
        assert!(pooled_corr(&ranks(&c, na), &ranks(&b, na), 3).expect("defined") > 0.99);
        assert_eq!(pooled_corr(&ranks(&a[..2], 2), &ranks(&b[..2], 2), 1), None);
        assert_eq!(pooled_corr(&ranks(&[0.5; 9], 9), &ranks(&a[..9], 9), 1), None);
        // Centred on each date's mean rank, a negation mirrors exactly even with a missing cell.
        let (rb, nb) = (ranks(&b, na), ranks(&b.iter().map(|x| -x).collect::<Vec<_>>(), na));
        let on = ranks(&a, na);
        let (pos, neg) = (centred_dot(&rb, &rb, &on, 3), centred_dot(&rb, &nb, &on, 3));
        assert!(pos > 0.0 && (pos + neg).abs() < 1e-9 * pos, "{pos} {neg}");
    }

    #[test]
    fn file_names_are_safe_and_follow_the_code() {
        assert!(file_stem("run/1 x", "rank(close)").starts_with("run_1_x-"));
        assert_ne!(file_stem("a", "rank(close)"), file_stem("a", "rank(open)"));
    }
}
