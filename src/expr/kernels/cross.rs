//! Cross-sectional (per-date) kernels: `rank`, `scale`, `zscore`, `indneutralize`, and
//! the tie bookkeeping the scorer's Rank IC shares with them.
//!
//! Exactness: a rank is exact, not approximate. Values tie when they are equal doubles
//! (compared by their order key, so −0 and +0 tie, as pandas has them) and each run of
//! ties gets the mean of its positions divided by the count of finite cells: the same
//! bits as pandas `rank(axis=1, pct=True)` computes. It matters because a rank feeds
//! comparisons, `ts_rank` and correlations downstream, where a split tie flips a result
//! rather than moving it by an ulp. `scale` and `indneutralize` sum each date in asset
//! order, the order of a per-date walk, so their sums are the walk's bits too.
//!
//! Layout: the panel's dates are gathered into a date-major scratch buffer in
//! cache-sized blocks (a cache line per group of eight assets and date) so that each
//! date's cross-section is contiguous, processed in parallel over dates, and scattered
//! back; the kernels that only sum walk the panel's own groups, a chunk of dates at a time.

use super::netsort::order_key;
use super::{DisjointCells, Src};
use crate::data::{gather_date_block, scatter_date_block, transpose, Groups, Panel, LANES};
use rayon::prelude::*;

/// Dates per block: a block of 32 dates × 500 assets (128 KB) stays in L2 cache.
pub const BLOCK: usize = 32;

/// Applies `k(row_in, row_out, scratch)` to each date's cross-section; `k` must write
/// every cell of `row_out` (it holds an earlier row's values). Dates are
/// processed in cache-sized blocks (gathered from the panel's groups, scattered back),
/// in parallel over blocks, so no full-panel transpose is ever materialised. A panel that
/// may be taken ([`Src::Take`]) receives the result: each block is written back over the
/// cache lines it was just read from.
pub fn per_date<'a, S: Default + Send>(x: impl Into<Src<'a>>, k: impl Fn(&[f64], &mut [f64], &mut S) + Sync) -> Panel {
    match x.into() {
        Src::Read(x) => {
            // Every cell is written by the scatter below.
            let mut out = Panel::scratch(x.n_dates(), x.n_assets());
            // SAFETY: both hold n_dates × n_assets cells; `x` is only read, and `out` is
            // ours.
            unsafe { blocks(x.as_slice().as_ptr(), &mut out, k) };
            out
        }
        Src::Take(mut p) => {
            let src = p.as_mut_slice().as_mut_ptr().cast_const();
            // SAFETY: `src` is `p`'s own buffer: each block's dates are read before they
            // are written, by the one task that owns them.
            unsafe { blocks(src, &mut p, k) };
            p
        }
    }
}

/// The blocks of [`per_date`]: reads from `src`, writes to `out`.
///
/// # Safety
/// `src` must hold `out`'s n_dates × n_assets cells, in its layout, and no one else may
/// write them during the call. It may be `out`'s own buffer.
unsafe fn blocks<S: Default + Send>(src: *const f64, out: &mut Panel, k: impl Fn(&[f64], &mut [f64], &mut S) + Sync) {
    let (nd, na) = (out.n_dates(), out.n_assets());
    if nd == 0 || na == 0 {
        return;
    }
    let dst = DisjointCells(out.as_mut_slice().as_mut_ptr());
    let src = DisjointCells(src.cast_mut());
    let blocks: Vec<usize> = (0..nd).step_by(BLOCK).collect();
    blocks.par_iter().for_each_init(
        || (Vec::new(), Vec::new(), S::default()),
        |(inb, outb, scratch), &t0| {
            let t1 = (t0 + BLOCK).min(nd);
            // Captures the wrappers whole (a closure would capture the bare pointer
            // fields, which are not `Sync`).
            #[allow(clippy::redundant_locals)]
            let (src, dst) = (src, dst);
            // Not cleared first: the gather writes every cell.
            inb.resize((t1 - t0) * na, f64::NAN);
            // SAFETY: `src` holds nd × na cells (the caller's contract); this task alone
            // reads and writes dates t0..t1, and nothing else writes `src`.
            unsafe { gather_date_block(src.0, nd, na, t0, inb) };
            // Every kernel writes every cell of its row, so the block is not cleared.
            outb.resize(inb.len(), f64::NAN);
            for (r, o) in inb.chunks(na).zip(outb.chunks_mut(na)) {
                k(r, o, scratch);
            }
            // SAFETY: `out` holds nd × na cells and outlives this loop; this task writes
            // only dates t0..t1 (its own block), which no other task touches, and nothing
            // reads `out` until every task has finished (`src` included, where it is
            // `out`: this block's dates were read above).
            unsafe { scatter_date_block(dst.0, nd, na, t0, outb) };
        },
    );
}

/// Scratch buffers for sorting cross-sections, reused from one date to the next.
#[derive(Default)]
pub struct SortBuf {
    /// The last result: finite values as (order key, index), ascending, ties by index.
    sorted: Vec<(u64, u32)>,
    tmp: Vec<(u64, u32)>,
    /// Buffers of the network sort.
    packed: super::netsort::Packed,
    /// The last result of [`SortBuf::sort_finite_order`].
    idx: Vec<u32>,
    /// `(p + 1) / n` for p in 0..n, the untied percentile ranks of the last count n.
    pct: Vec<f64>,
    /// Rows to sort before looking for few distinct values again: after a row with more,
    /// the next ones (of the same panel or signal) most likely have more too.
    few_skip: u32,
}

impl SortBuf {
    /// Sorts the finite values of `row` as (order key, index) pairs into `self.sorted`,
    /// ascending, ties by index.
    ///
    /// Two cheap passes leave the pairs sorted up to ties in the keys' leading bits, then an
    /// insertion sort fixes the few remaining inversions:
    /// * up to 512 values on a CPU with AVX-512, the 23 highest bits in which the keys
    ///   differ and the 9-bit index are sorted as one `u32` by a sorting network
    ///   ([`netsort`](super::netsort));
    /// * otherwise three 8-bit LSD radix passes sort on the 24 highest bits in which the
    ///   keys differ (sign, exponent and the top mantissa bits).
    ///
    /// If the data is concentrated enough that the fix-up would be long, it falls back to
    /// a full 8-pass LSD radix sort, so the worst case stays O(n). (Measured alternatives
    /// that were not faster here: packing the 24 bits and the index into one u64 for the
    /// radix passes, interleaving two halves' scatters, and warm-starting from the
    /// previous date's order, which most alpha101 inputs move too fast for.)
    ///
    /// A row of at most [`FEW`](super::few::FEW) distinct values is ordered by counting
    /// them instead ([`few`](super::few)).
    pub fn sort_finite(&mut self, row: &[f64]) -> &[(u64, u32)] {
        if let Some(d) = self.few(row) {
            d.sorted(row, &mut self.sorted);
            return &self.sorted;
        }
        self.sort_finite_by(row, row.len() <= super::netsort::MAX && super::netsort::available())
    }

    /// [`Distinct::of`](super::few::Distinct::of) the row, tried on one row in
    /// [`FEW_RETRY`] after a row that had more distinct values (the search costs about a
    /// tenth of a sort where it fails, more where the extra values come late in the row).
    fn few(&mut self, row: &[f64]) -> Option<super::few::Distinct> {
        if self.few_skip > 0 {
            self.few_skip -= 1;
            return None;
        }
        let d = super::few::Distinct::of(row);
        if d.is_none() {
            self.few_skip = FEW_RETRY - 1;
        }
        d
    }

    /// The finite values of `row` in ascending order as their indices (ties by index), and
    /// their ties: sets bit j of `ties` (cleared by the caller, at least `row.len() / 64 +
    /// 1` words) where the j-th value equals the one before, and returns the indices and
    /// how many bits it set. The order of [`sort_finite`](Self::sort_finite).
    ///
    /// Why: the scorer needs only the order and the ties, and on the network's route both
    /// come from its packed keys; a value is read back only where two neighbours share
    /// their packed prefix (as [`rank_row`] does). Unpacking every value into a 16-byte
    /// (key, index) pair and comparing the pairs' keys for ties was 4–5 % of the alpha101
    /// batch's profile.
    pub fn sort_finite_order(&mut self, row: &[f64], ties: &mut [u64]) -> (&[u32], usize) {
        let set = |ties: &mut [u64], j: usize| ties[j / 64] |= 1 << (j % 64);
        let few = self.few(row);
        let mut repeats = 0;
        if few.is_none() && row.len() <= super::netsort::MAX && super::netsort::available() {
            let (keys, same) = self.packed.sort_keys(row);
            let idx = &mut self.idx;
            idx.clear();
            idx.extend(keys.iter().map(|&k| super::netsort::index(k)));
            let run = &mut self.tmp;
            prefix_runs(keys, &same, |start, end| {
                let key = |p: usize| order_key(row[idx[p] as usize]);
                if end - start == 2 {
                    let (k0, k1) = (key(start), key(start + 1));
                    if k0 == k1 {
                        set(ties, start + 1);
                        repeats += 1;
                    } else if k0 > k1 {
                        idx.swap(start, start + 1);
                    }
                    return;
                }
                // Most long runs are one value repeated (`ts_rank` results of longer
                // windows; rows of at most eight values mostly take `few` above): their
                // bits are set a word at a time.
                let k0 = key(start);
                if (start + 1..end).all(|p| key(p) == k0) {
                    set_bits(ties, start + 1, end);
                    repeats += end - start - 1;
                    return;
                }
                run.clear();
                run.extend((start..end).map(|p| (key(p), idx[p])));
                if !run.is_sorted() {
                    run.sort_unstable();
                }
                for (j, (d, e)) in idx[start..end].iter_mut().zip(run.iter()).enumerate() {
                    *d = e.1;
                    if j > 0 && e.0 == run[j - 1].0 {
                        set(ties, start + j);
                        repeats += 1;
                    }
                }
            });
            return (&self.idx, repeats);
        }
        // Else from the pairs, as `sort_finite` makes them.
        if let Some(d) = few {
            d.sorted(row, &mut self.sorted);
            repeats = d.tie_bits(ties);
        } else {
            let s = self.sort_finite_by(row, false);
            repeats = neighbour_bits(ties, s.len(), |j| s[j].0 == s[j - 1].0);
        }
        self.idx.clear();
        self.idx.extend(self.sorted.iter().map(|e| e.1));
        (&self.idx, repeats)
    }

    fn sort_finite_by(&mut self, row: &[f64], network: bool) -> &[(u64, u32)] {
        let done = if network {
            // Only where the network left a key below its predecessor.
            let steps = self.packed.sort(row, &mut self.sorted);
            let at = steps.iter().enumerate().flat_map(|(w, &b)| BitIter(b).map(move |k| 64 * w + k));
            fix_up(&mut self.sorted, at)
        } else {
            self.presort_radix(row);
            let n = self.sorted.len();
            fix_up(&mut self.sorted, 1..n)
        };
        if !done {
            // Both presorts and the fix-up are stable, so equal keys are still in index order.
            lsd_passes(&mut self.sorted, &mut self.tmp, [0, 8, 16, 24, 32, 40, 48, 56]);
        }
        &self.sorted
    }

    /// Radix presort: keys equal in their 24 leading differing bits stay in index order.
    fn presort_radix(&mut self, row: &[f64]) {
        let v = &mut self.sorted;
        // Branch-free compaction of the finite values: every cell is written, and the
        // write position only advances past finite ones.
        if v.len() < row.len() {
            v.resize(row.len(), (0, 0));
        }
        let mut n = 0;
        for (i, &x) in row.iter().enumerate() {
            v[n] = (order_key(x), i as u32);
            n += usize::from(x.is_finite());
        }
        v.truncate(n);
        if n < 48 {
            v.sort_unstable();
            return;
        }
        let k0 = v[0].0;
        let diff = v.iter().fold(0u64, |a, e| a | (e.0 ^ k0));
        if diff == 0 {
            return;
        }
        let shift = (63 - diff.leading_zeros()).saturating_sub(23);
        lsd_passes(v, &mut self.tmp, [shift, shift + 8, shift + 16]);
    }
}

/// See [`SortBuf::few`]. Every route gives the same result, so this only trades the
/// search's cost on rows of many values against sorting rows of few.
const FEW_RETRY: u32 = 16;

/// Finishes a presort by insertion: `steps` are (ascending) the positions whose key may be
/// below their predecessor's (every position from 1 when unknown). Between two such steps
/// the keys already ascend, so after inserting the keys from a step on until one is at
/// least the largest so far, nothing moves until the next step. Returns false, leaving
/// `v` permuted but not sorted, once the moves exceed a budget of 6 per key (data
/// concentrated in a few leading bits; the caller then sorts by radix in O(n)).
fn fix_up(v: &mut [(u64, u32)], steps: impl Iterator<Item = usize>) -> bool {
    let (n, budget) = (v.len(), 6 * v.len());
    let (mut moves, mut i) = (0, 0);
    for p in steps {
        i = i.max(p);
        while i < n && v[i].0 < v[i - 1].0 {
            let e = v[i];
            let mut j = i;
            while j > 0 && v[j - 1].0 > e.0 {
                v[j] = v[j - 1];
                j -= 1;
            }
            v[j] = e;
            moves += i - j;
            if moves > budget {
                return false;
            }
            i += 1;
        }
    }
    true
}

/// The positions of the set bits of a word, lowest first.
struct BitIter(u64);

impl Iterator for BitIter {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        (self.0 != 0).then(|| {
            let k = self.0.trailing_zeros() as usize;
            self.0 &= self.0 - 1;
            k
        })
    }
}

/// Sets bit j (1 ≤ j < n) of `words` (cleared, at least `n / 64 + 1` of them) where
/// `same(j)`, item j equal to item j − 1 of a sorted sequence; returns how many it set.
/// Each word's bits are gathered in a register: set one by one in memory, they made a
/// chain of read-modify-writes of one word on rows of many ties.
pub fn neighbour_bits(words: &mut [u64], n: usize, same: impl Fn(usize) -> bool) -> usize {
    let mut repeats = 0;
    for (w, word) in words.iter_mut().enumerate().take(n.div_ceil(64)) {
        let bits = ((64 * w).max(1)..(64 * w + 64).min(n)).fold(0u64, |b, j| b | u64::from(same(j)) << (j % 64));
        repeats += bits.count_ones() as usize;
        *word = bits;
    }
    repeats
}

/// Sets bits `from..to` of a bitset.
fn set_bits(words: &mut [u64], from: usize, to: usize) {
    let mut j = from;
    while j < to {
        let take = (64 - j % 64).min(to - j);
        words[j / 64] |= (!0u64 >> (64 - take)) << (j % 64);
        j += take;
    }
}

/// Calls `f(start, end)` for each run `start..end` of two or more sorted packed keys
/// (`keys`, from the network) that share their prefix, the bits above the index; `same`
/// is the network's bitset of the positions whose prefix equals the one before.
fn prefix_runs(keys: &[u32], same: &[u64], mut f: impl FnMut(usize, usize)) {
    let mut end = 0;
    for p in same.iter().enumerate().flat_map(|(w, &b)| BitIter(b).map(move |k| 64 * w + k)) {
        if p < end {
            continue;
        }
        let start = p - 1;
        end = p + 1;
        while end < keys.len() && (keys[end] ^ keys[start]) >> super::netsort::INDEX_BITS == 0 {
            end += 1;
        }
        f(start, end);
    }
}

/// Stable counting-sort passes on the 8-bit digits starting at the given bit shifts
/// (least significant first; all below 64); passes where every key has the same digit are
/// skipped. The histograms of all passes are counted in one read.
fn lsd_passes<const P: usize>(v: &mut Vec<(u64, u32)>, tmp: &mut Vec<(u64, u32)>, shifts: [u32; P]) {
    let n = v.len();
    let mut h = [[0u32; 256]; P];
    for e in v.iter() {
        for (h, &sh) in h.iter_mut().zip(&shifts) {
            h[((e.0 >> sh) & 0xff) as usize] += 1;
        }
    }
    tmp.clear();
    tmp.resize(n, (0, 0));
    for (h, &sh) in h.iter_mut().zip(&shifts) {
        if h.iter().any(|&c| c as usize == n) {
            continue;
        }
        let mut sum = 0u32;
        for c in h.iter_mut() {
            let x = *c;
            *c = sum;
            sum += x;
        }
        for &e in v.iter() {
            let b = ((e.0 >> sh) & 0xff) as usize;
            tmp[h[b] as usize] = e;
            h[b] += 1;
        }
        std::mem::swap(v, tmp);
    }
}

/// Walks the runs of ties in a sorted sequence of `n` items, where `tied(j)` says whether
/// item j equals item j − 1 (j ≥ 1): calls `f(i, j, rank)` for each run of positions
/// `i..j` (0-based) with their average rank (1-based) `(i + 1 + j) / 2`.
#[inline]
pub fn tie_runs(n: usize, tied: impl Fn(usize) -> bool, mut f: impl FnMut(usize, usize, f64)) {
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && tied(j) {
            j += 1;
        }
        f(i, j, (i + 1 + j) as f64 / 2.0);
        i = j;
    }
}

/// Average ranks (1-based, ties averaged) of pre-sorted (key, index) pairs, written to
/// `out[index] = f(rank)`.
#[inline]
pub fn average_ranks(sorted: &[(u64, u32)], mut f: impl FnMut(u32, f64)) {
    tie_runs(sorted.len(), |j| sorted[j].0 == sorted[j - 1].0, |i, j, r| {
        for &(_, idx) in &sorted[i..j] {
            f(idx, r);
        }
    });
}

/// Percentile rank in (0, 1], ties averaged, NaN ignored (pandas `rank(pct=True)`).
pub fn rank_row(row: &[f64], out: &mut [f64], buf: &mut SortBuf) {
    if let Some(d) = buf.few(row) {
        return d.ranks(row, out);
    }
    out.fill(f64::NAN);
    if row.len() <= super::netsort::MAX && super::netsort::available() {
        let (keys, same) = buf.packed.sort_keys(row);
        let n = keys.len() as f64;
        // Where the prefixes ascend strictly, the order is the values' and position p has
        // rank p + 1 ... (the table of (p + 1) / n is kept from row to row: the count
        // rarely changes, and a division per value was half of this function's time).
        if buf.pct.len() != keys.len() {
            buf.pct.clear();
            buf.pct.extend((1..=keys.len()).map(|r| r as f64 / n));
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the network ran, so the CPU has AVX-512F; `pct` is as long as `keys`,
        // whose indices are positions in `row`, as long as `out`.
        unsafe {
            super::simd::scatter_f64(keys, super::netsort::MAX as u32 - 1, &buf.pct, out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        for (&k, &r) in keys.iter().zip(&buf.pct) {
            out[super::netsort::index(k) as usize] = r;
        }
        // ... and each run of equal prefixes (in index order) is sorted by its full values
        // and ranked again, ties averaged: the same bits as the walk below.
        let run = &mut buf.tmp;
        let pct = &buf.pct;
        prefix_runs(keys, &same, |start, end| {
            if end - start == 2 {
                // Three runs in four are two values (measured): written as ranked above
                // when ascending, swapped, or tied (the walk's values, same bits).
                let (i0, i1) = (super::netsort::index(keys[start]) as usize, super::netsort::index(keys[start + 1]) as usize);
                let (k0, k1) = (order_key(row[i0]), order_key(row[i1]));
                if k0 == k1 {
                    let r = (2 * start + 3) as f64 / 2.0;
                    (out[i0], out[i1]) = (r / n, r / n);
                } else if k0 > k1 {
                    (out[i0], out[i1]) = (pct[start + 1], pct[start]);
                }
                return;
            }
            // Most long runs are one value repeated (`ts_rank` results of longer windows;
            // rows of at most eight values mostly take `few` above): written as one tie
            // group while checking that.
            let r = (start + 1 + end) as f64 / 2.0 / n;
            let k0 = order_key(row[super::netsort::index(keys[start]) as usize]);
            let mut tied = true;
            for &k in &keys[start..end] {
                let i = super::netsort::index(k) as usize;
                tied &= order_key(row[i]) == k0;
                out[i] = r;
            }
            if tied {
                return;
            }
            run.clear();
            run.extend(keys[start..end].iter().map(|&k| super::netsort::index(k)).map(|i| (order_key(row[i as usize]), i)));
            if !run.is_sorted() {
                run.sort_unstable();
            }
            // One division per group of ties, not per value.
            tie_runs(run.len(), |j| run[j].0 == run[j - 1].0, |i, j, _| {
                let r = (start + i + 1 + start + j) as f64 / 2.0 / n;
                for &(_, k) in &run[i..j] {
                    out[k as usize] = r;
                }
            });
        });
        return;
    }
    let sorted = buf.sort_finite(row);
    let n = sorted.len() as f64;
    average_ranks(sorted, |i, r| out[i as usize] = r / n);
}

/// Cross-sectional percentile rank.
pub fn rank<'a>(x: impl Into<Src<'a>>) -> Panel {
    per_date(x, rank_row)
}

/// Dates per task of the kernels that only sum across stocks ([`scale`],
/// [`indneutralize`]): their per-date sums for a chunk stay in L1/L2 while every asset's
/// slice of the chunk is added in.
const DATE_CHUNK: usize = 512;

/// `x / sum(|x|)` per date (finite values only); NaN when the sum is zero.
///
/// Without a per-date walk: each date's sum is accumulated asset by asset in asset order
/// (the order of a per-date walk, so the same bits), eight dates per vector instead of
/// one serial chain of adds per date.
pub fn scale(x: &Panel) -> Panel {
    scaled(x, x)
}

/// `num / sum(|x|)` per date (the sum over x's finite values), where x is finite and the
/// sum positive, else NaN: `scale(x, a)` is `scaled(x, x·a)`, the conventions' order
/// `x × a / sum(|x|)` (dividing first and multiplying after rounds differently).
pub fn scaled(x: &Panel, num: &Panel) -> Panel {
    let (nd, na) = (x.n_dates(), x.n_assets());
    let mut sums = vec![-0.0f64; nd];
    sums.par_chunks_mut(DATE_CHUNK).enumerate().for_each_init(Vec::new, |buf, (c, s)| {
        each_asset(x, c * DATE_CHUNK, s.len(), buf, |_, v| {
            // Adding +0 for a non-finite value leaves a sum unchanged, except that −0
            // becomes +0: either way not > 0 below.
            for (acc, v) in s.iter_mut().zip(v) {
                *acc += if v.is_finite() { v.abs() } else { 0.0 };
            }
        });
    });
    let mut out = Panel::scratch(nd, na);
    let n = (nd * LANES).max(1);
    out.par_groups_mut().zip(x.as_slice().par_chunks(n).zip(num.as_slice().par_chunks(n))).for_each(|(o, (r, m))| {
        for (((o, r), m), s) in o.chunks_exact_mut(LANES).zip(r.chunks_exact(LANES)).zip(m.chunks_exact(LANES)).zip(&sums) {
            for l in 0..LANES {
                o[l] = if *s > 0.0 && r[l].is_finite() { m[l] / s } else { f64::NAN };
            }
        }
    });
    out
}

/// Calls `f(asset, values)` for every asset in asset order, with its values on dates
/// `t0..t0 + len`: each group's dates transposed into eight series in `buf` (in L1/L2).
fn each_asset(x: &Panel, t0: usize, len: usize, buf: &mut Vec<f64>, mut f: impl FnMut(usize, &[f64])) {
    let na = x.n_assets();
    buf.resize(LANES * len, 0.0);
    for g in 0..x.n_groups() {
        transpose(&x.group(g)[t0 * LANES..(t0 + len) * LANES], LANES, buf);
        for l in 0..LANES.min(na - g * LANES) {
            f(g * LANES + l, &buf[l * len..(l + 1) * len]);
        }
    }
}

/// `(x − mean) / std` across stocks per date (finite values, std with ddof = 1); NaN when
/// fewer than 2 values or all equal.
pub fn zscore<'a>(x: impl Into<Src<'a>>) -> Panel {
    per_date(x, |r, o, _: &mut ()| {
        let (mut n, mut s) = (0usize, 0.0);
        for v in r.iter().filter(|v| v.is_finite()) {
            n += 1;
            s += v;
        }
        let m = s / n as f64;
        let var = r.iter().filter(|v| v.is_finite()).map(|v| (v - m) * (v - m)).sum::<f64>() / (n as f64 - 1.0);
        let sd = var.sqrt();
        for (o, v) in o.iter_mut().zip(r) {
            *o = if n >= 2 && sd > 0.0 && v.is_finite() { (v - m) / sd } else { f64::NAN };
        }
    })
}

/// `x` minus its same-date mean within each group (finite values only). Assets without a
/// group get NaN.
///
/// Like [`scale`], without a per-date walk: each group's per-date sums and counts
/// accumulate asset by asset in asset order (the same adds as a per-date walk, so the
/// same bits), a chunk of dates per pass instead of one chain through memory per group.
pub fn indneutralize(x: &Panel, groups: &Groups) -> Panel {
    let (nd, na) = (x.n_dates(), x.n_assets());
    let ng = groups.names.len();
    // Assets without a group (and the padding lanes) count in a last, extra slot whose
    // mean is never used.
    let ids: Vec<usize> = (0..x.n_groups() * LANES).map(|a| groups.ids.get(a).copied().flatten().map_or(ng, |g| g as usize)).collect();
    // Each date chunk's means, group by group: means[c][g][t - t0].
    let per_chunk = (ng + 1) * DATE_CHUNK;
    let mut means = vec![0.0f64; nd.div_ceil(DATE_CHUNK) * per_chunk];
    means.par_chunks_mut(per_chunk).enumerate().for_each_init(
        || (Vec::new(), Vec::new()),
        |(buf, cnt): &mut (Vec<f64>, Vec<u32>), (c, m)| {
            let (t0, len) = (c * DATE_CHUNK, DATE_CHUNK.min(nd - c * DATE_CHUNK));
            cnt.clear();
            cnt.resize(per_chunk, 0);
            each_asset(x, t0, len, buf, |a, v| {
                let g = ids[a];
                let (sum, n) = (&mut m[g * DATE_CHUNK..g * DATE_CHUNK + len], &mut cnt[g * DATE_CHUNK..g * DATE_CHUNK + len]);
                // Adding +0 for a non-finite value leaves the sum (which starts at +0 and
                // so is never −0) unchanged.
                for ((s, n), v) in sum.iter_mut().zip(n.iter_mut()).zip(v) {
                    *s += if v.is_finite() { *v } else { 0.0 };
                    *n += u32::from(v.is_finite());
                }
            });
            for (s, &n) in m.iter_mut().zip(cnt.iter()) {
                *s /= n as f64;
            }
        },
    );
    let mut out = Panel::scratch(nd, na);
    out.par_groups_mut().zip(x.as_slice().par_chunks((nd * LANES).max(1))).enumerate().for_each(|(g, (o, r))| {
        let ids = &ids[g * LANES..(g + 1) * LANES];
        for (t, (o, r)) in o.chunks_exact_mut(LANES).zip(r.chunks_exact(LANES)).enumerate() {
            let m = &means[t / DATE_CHUNK * per_chunk + t % DATE_CHUNK..];
            for l in 0..LANES {
                o[l] = if ids[l] < ng && r[l].is_finite() { r[l] - m[ids[l] * DATE_CHUNK] } else { f64::NAN };
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_matches_pandas_pct_average() {
        let mut out = vec![0.0; 5];
        rank_row(&[3.0, f64::NAN, 1.0, 3.0, -0.0], &mut out, &mut SortBuf::default());
        // finite: 3, 1, 3, -0 -> ranks 3.5, 2, 3.5, 1 over n = 4
        assert_eq!(out[0], 3.5 / 4.0);
        assert!(out[1].is_nan());
        assert_eq!(out[2], 2.0 / 4.0);
        assert_eq!(out[4], 1.0 / 4.0);
        assert!(order_key(-0.0) == order_key(0.0));
        assert!(order_key(-1.0) < order_key(-0.5) && order_key(0.5) < order_key(1.0));
    }

    /// `scale` and `indneutralize`, which sum without a per-date walk, against
    /// per-date walks (the plain definitions), bit for bit: across two date chunks, with
    /// NaN, infinities, signed zeros, all-missing dates and assets without a group.
    #[test]
    fn asset_major_sums_equal_per_date_walks() {
        let (nd, na) = (DATE_CHUNK + 77, 37);
        let mut s = 5u64;
        let mut rnd = move || crate::xorshift(&mut s);
        let cells: Vec<f64> = (0..nd * na)
            .map(|i| match rnd() % 23 {
                _ if i / na == 3 => f64::NAN,
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => -0.0,
                3 => 0.0,
                r => (r as f64 - 11.5) * (rnd() % 1000) as f64 / 7.0,
            })
            .collect();
        let x = Panel::from_date_major(nd, na, &cells);
        let groups = Groups { ids: (0..na).map(|a| (a % 5 != 4).then_some((a % 3) as u32)).collect(), names: vec!["a".into(), "b".into(), "c".into()], source: "test".into() };
        let (sc, neu) = (scale(&x), indneutralize(&x, &groups));
        for t in 0..nd {
            let row = &cells[t * na..(t + 1) * na];
            let sum: f64 = row.iter().filter(|v| v.is_finite()).map(|v| v.abs()).sum();
            let mut gsum = [0.0f64; 3];
            let mut gcnt = [0u32; 3];
            for (a, v) in row.iter().enumerate() {
                if let (Some(g), true) = (groups.ids[a], v.is_finite()) {
                    gsum[g as usize] += v;
                    gcnt[g as usize] += 1;
                }
            }
            for (a, v) in row.iter().enumerate() {
                let want = if sum > 0.0 && v.is_finite() { v / sum } else { f64::NAN };
                assert_eq!(sc.get(t, a).to_bits(), want.to_bits(), "scale, date {t}, asset {a}");
                let want = match groups.ids[a] {
                    Some(g) if v.is_finite() => v - gsum[g as usize] / gcnt[g as usize] as f64,
                    _ => f64::NAN,
                };
                assert_eq!(neu.get(t, a).to_bits(), want.to_bits(), "indneutralize, date {t}, asset {a}");
            }
        }
        assert!((0..na).any(|a| sc.get(5, a).is_finite() && neu.get(5, a).is_finite()));
    }

    /// Ranking over the input's own buffer gives what ranking into a fresh panel gives,
    /// on several threads (blocks of dates written back while others are still read),
    /// and leaves a panel someone else still holds untouched.
    #[test]
    fn rank_over_its_own_input_matches_a_fresh_one() {
        let (nd, na) = (3 * BLOCK + 5, 29);
        let mut s = 9u64;
        let mut rnd = move || crate::xorshift(&mut s);
        let cells: Vec<f64> = (0..nd * na).map(|_| if rnd() % 9 == 0 { f64::NAN } else { (rnd() % 40) as f64 }).collect();
        let x = Panel::from_asset_major(nd, na, cells);
        let bits = |p: &Panel| p.to_asset_major().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let fresh = rank(&x);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
        let owned = pool.install(|| rank(Src::Take(x.clone())));
        assert_eq!(bits(&owned), bits(&fresh));
        let shared = x.clone();
        let again = rank(&shared);
        assert_eq!(bits(&shared), bits(&x));
        assert_eq!(bits(&again), bits(&fresh));
    }

    #[test]
    fn indneutralize_demeans_within_groups_and_leaves_the_ungrouped_out() {
        // One date, five assets: groups 0, 1, 0, none, 1; asset 4 has no value.
        let x = Panel::from_date_major(1, 5, &[1.0, 10.0, 4.0, 7.0, f64::NAN]);
        let g = Groups { ids: vec![Some(0), Some(1), Some(0), None, Some(1)], names: vec!["a".into(), "b".into()], source: "test".into() };
        let out = indneutralize(&x, &g);
        let got: Vec<f64> = (0..5).map(|a| out.get(0, a)).collect();
        assert_eq!(&got[..3], &[-1.5, 0.0, 1.5]);
        assert!(got[3].is_nan() && got[4].is_nan());
    }

    #[test]
    fn sort_finite_and_rank_row_equal_a_comparison_sort() {
        let mut s = 12345u64;
        let mut rnd = || crate::xorshift(&mut s);
        let want = |row: &[f64]| {
            let mut w: Vec<(u64, u32)> = row.iter().enumerate().filter(|(_, x)| x.is_finite()).map(|(i, x)| (order_key(*x), i as u32)).collect();
            w.sort();
            w
        };
        for n in [0, 1, 2, 9, 47, 48, 64, 496, 500, 512, 513, 2000] {
            // Repeated values (ties), two magnitudes, NaN and infinities.
            let row: Vec<f64> = (0..n)
                .map(|i| match rnd() % 50 {
                    0 => f64::NAN,
                    1 => f64::INFINITY,
                    r => (r as f64 - 20.0) * if i % 3 == 0 { 1e-3 } else { 1e5 },
                })
                .collect();
            // Values equal in their top bits: the fix-up orders them by the full key.
            let close: Vec<f64> = (0..n).map(|_| 100.0 + (rnd() % 1000) as f64 * 1e-11).collect();
            // Values equal in all but the lowest mantissa bits: the network's packed keys
            // tie and put them in index order, the fix-up in value order.
            let ulps: Vec<f64> = (0..n).map(|_| f64::from_bits(1.0f64.to_bits() + rnd() % 700)).collect();
            // Concentrated values with a few outliers force the full fallback.
            let c: Vec<f64> = (0..n).map(|i| if i % 50 == 0 { -1e9 } else { 1.0 + (i % 97) as f64 * 1e-12 }).collect();
            // Pairs of values an ulp apart (or equal) in either index order, the pairs far
            // apart: runs of two equal packed prefixes, ascending, descending and tied.
            let pairs: Vec<f64> = (0..n)
                .map(|i| {
                    let v = 1000.0 * (i / 2) as f64 + 1.0;
                    match (i % 2, rnd() % 3) {
                        (0, _) | (_, 0) => v,
                        (_, 1) => f64::from_bits(v.to_bits() + 1),
                        _ => f64::from_bits(v.to_bits() - 1),
                    }
                })
                .collect();
            // A few levels repeated hundreds of times (comparisons, signs, `ts_argmax`),
            // one of them with values an ulp apart: long runs of equal prefixes, tied
            // throughout or not.
            let levels: Vec<f64> = (0..n)
                .map(|_| match rnd() % 7 {
                    0 => f64::from_bits(2.0f64.to_bits() + rnd() % 3),
                    r => (r % 3) as f64,
                })
                .collect();
            // Rows of a few values, which are ordered by counting (`few`): a comparison's
            // 0/1 with both zeros, NaN and infinities; exactly eight values; nine, one too
            // many, the last of them only near the end.
            let binary: Vec<f64> = (0..n).map(|_| [0.0, -0.0, 1.0, 1.0, 0.0, f64::NAN, f64::NEG_INFINITY][(rnd() % 7) as usize]).collect();
            let eight: Vec<f64> = (0..n).map(|_| (rnd() % 8) as f64 * -0.25).collect();
            let nine: Vec<f64> = (0..n).map(|i| if i + 3 == n { 9.5 } else { (rnd() % 8) as f64 }).collect();
            if super::super::netsort::available() && n >= 200 {
                assert!([&binary, &eight, &levels].iter().all(|x| super::super::few::Distinct::of(x).is_some()), "n = {n}");
                assert!(super::super::few::Distinct::of(&nine).is_none() && super::super::few::Distinct::of(&row).is_none(), "n = {n}");
            }
            let network = n <= super::super::netsort::MAX && super::super::netsort::available();
            for (what, x) in [("mixed", &row), ("close", &close), ("ulps", &ulps), ("concentrated", &c), ("pairs", &pairs), ("levels", &levels), ("binary", &binary), ("eight", &eight), ("nine", &nine)] {
                // A fresh buffer tries the few-values route first (see `SortBuf::few`).
                let mut buf = SortBuf::default();
                for net in [false, true].into_iter().filter(|&b| !b || network) {
                    assert_eq!(buf.sort_finite_by(x, net), want(x), "{what} values, n = {n}, network = {net}");
                }
                assert_eq!(buf.sort_finite(x), want(x), "{what} values, n = {n}");
                // The scorer's order and ties, through a fresh buffer (which tries the
                // few-values route first) and one that has just sorted a row of many values
                // (which goes straight to the network, or the radix sort).
                let w = want(x);
                let want_ties: Vec<usize> = (1..w.len()).filter(|&j| w[j].0 == w[j - 1].0).collect();
                let distinct: Vec<f64> = (0..n).map(|i| i as f64).collect();
                for fresh in [true, false] {
                    let mut buf = SortBuf::default();
                    if !fresh {
                        buf.sort_finite(&distinct);
                    }
                    let mut ties = vec![0u64; n / 64 + 1];
                    let (order, repeats) = buf.sort_finite_order(x, &mut ties);
                    assert_eq!(order, w.iter().map(|e| e.1).collect::<Vec<_>>(), "order of {what} values, n = {n}, fresh = {fresh}");
                    let got: Vec<usize> = (0..64 * ties.len()).filter(|&j| ties[j / 64] >> (j % 64) & 1 == 1).collect();
                    assert_eq!((got, repeats), (want_ties.clone(), want_ties.len()), "ties of {what} values, n = {n}, fresh = {fresh}");
                }
                // rank_row, which takes its own route from the network's keys, gives the
                // average ranks of the reference order, bit for bit.
                let (w, mut got) = (want(x), vec![0.0; n]);
                let mut ranks = vec![f64::NAN; n];
                average_ranks(&w, |i, r| ranks[i as usize] = r / w.len() as f64);
                rank_row(x, &mut got, &mut buf);
                assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), ranks.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "rank of {what} values, n = {n}");
            }
        }
    }
}
