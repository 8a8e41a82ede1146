//! The dense dates × assets panel every kernel works on.
//!
//! Storage is in groups of [`LANES`] (eight) assets: each group holds its dates one after
//! another, and each date the group's eight assets side by side, so that asset
//! `g * 8 + l` on date t is cell `(g * n_dates + t) * 8 + l` (KunQuant's "STs" layout).
//! Why: the time-series kernels walk eight assets at once, one per vector lane, and find
//! their eight series already interleaved, one cache line per date; a cross-sectional
//! kernel gathers a date's row as one line per group instead of one cell per asset. With
//! asset-major storage both had to transpose, about 15 % of the alpha101 batch (measured
//! 2026-11-26 on an AMD EPYC, Zen 4: the batch −4 to −7 % once stored interleaved). A
//! last group of fewer than eight assets is padded: its spare lanes hold NaN or whatever
//! a kernel computed from them, and are never read as data.
//!
//! Exactness: the layout moves values, never rounds them; the transposes and gathers
//! between it and per-asset or per-date rows copy bits, so a kernel sees exactly the
//! loaded values whichever way it walks them. Big buffers start on a cache line (the
//! allocator below), so a date's eight values are one aligned load.

use ndarray::{Array2, ArrayView3};
use rayon::prelude::*;

/// Assets per group: one AVX-512 vector of `f64`, one cache line.
pub const LANES: usize = 8;

/// A dates × assets panel of `f64`, NaN for missing, stored in groups of [`LANES`] assets.
#[derive(Debug)]
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
        Panel { n_dates, n_assets, data: pool::take(Panel::cells(n_dates, n_assets)) }
    }

    /// A panel filled with one value, in a pooled buffer when there is one: every dropped
    /// panel gives its buffer to the pool, so a loop that built its panels from fresh
    /// memory grew the pool by a panel per turn up to its cap (the combined model's
    /// per-round scoring held 1.2 GB that way).
    pub fn filled(n_dates: usize, n_assets: usize, v: f64) -> Panel {
        let mut data = pool::take(Panel::cells(n_dates, n_assets));
        data.fill(v);
        Panel { n_dates, n_assets, data }
    }

    /// Builds a panel from an asset-major buffer (`data[asset * n_dates + date]`).
    ///
    /// # Panics
    /// If the buffer length is not `n_dates * n_assets` (a programming error, never data).
    pub fn from_asset_major(n_dates: usize, n_assets: usize, data: Vec<f64>) -> Panel {
        assert_eq!(data.len(), n_dates * n_assets, "panel buffer has the wrong length");
        let mut p = Panel::nan(n_dates, n_assets);
        if n_dates > 0 {
            p.data.par_chunks_mut(n_dates * LANES).zip(data.par_chunks(n_dates * LANES)).for_each(|(g, s)| {
                // The group's (up to eight) series, n_dates each, as the rows of a
                // transpose into n_dates rows of eight.
                let rows = s.len() / n_dates;
                // SAFETY: `s` holds rows × n_dates cells and `g` n_dates × LANES.
                unsafe { transpose_into(s.as_ptr(), n_dates, g.as_mut_ptr(), LANES, rows, n_dates) }
            });
        }
        p
    }

    /// Wraps a buffer already in the panel's layout: `data[Panel::cell(n_dates, date, asset)]`,
    /// padding included ([`Panel::cells`] long).
    ///
    /// # Panics
    /// If the buffer length is not [`Panel::cells`] (a programming error, never data).
    pub fn from_cells(n_dates: usize, n_assets: usize, data: Vec<f64>) -> Panel {
        assert_eq!(data.len(), Panel::cells(n_dates, n_assets), "panel buffer has the wrong length");
        Panel { n_dates, n_assets, data }
    }

    /// Length of the buffer of an `n_dates × n_assets` panel, padding included (the last
    /// group padded to eight assets).
    pub fn cells(n_dates: usize, n_assets: usize) -> usize {
        n_assets.div_ceil(LANES) * n_dates * LANES
    }

    /// Where (date, asset) lies in the buffer of a panel of `n_dates` dates.
    #[inline]
    pub fn cell(n_dates: usize, date: usize, asset: usize) -> usize {
        ((asset / LANES) * n_dates + date) * LANES + asset % LANES
    }

    /// Builds a panel from a date-major buffer (`data[date * n_assets + asset]`).
    pub fn from_date_major(n_dates: usize, n_assets: usize, data: &[f64]) -> Panel {
        assert_eq!(data.len(), n_dates * n_assets, "panel buffer has the wrong length");
        let mut p = Panel::nan(n_dates, n_assets);
        // SAFETY: `p` holds the panel's cells, and `data` every date's row.
        unsafe { scatter_date_block(p.data.as_mut_ptr(), n_dates, n_assets, 0, data) };
        p
    }

    pub fn n_dates(&self) -> usize {
        self.n_dates
    }

    pub fn n_assets(&self) -> usize {
        self.n_assets
    }

    /// Groups of [`LANES`] assets (the last one padded).
    pub fn n_groups(&self) -> usize {
        self.n_assets.div_ceil(LANES)
    }

    #[inline]
    fn index(&self, date: usize, asset: usize) -> usize {
        debug_assert!(date < self.n_dates && asset < self.n_assets);
        Panel::cell(self.n_dates, date, asset)
    }

    /// Value at (date, asset).
    #[inline]
    pub fn get(&self, date: usize, asset: usize) -> f64 {
        self.data[self.index(date, asset)]
    }

    #[inline]
    pub fn set(&mut self, date: usize, asset: usize, v: f64) {
        let i = self.index(date, asset);
        self.data[i] = v;
    }

    /// A copy of one asset's full time series.
    pub fn series(&self, asset: usize) -> Vec<f64> {
        let g = &self.data[(asset / LANES) * self.n_dates * LANES..];
        g.iter().skip(asset % LANES).step_by(LANES).take(self.n_dates).copied().collect()
    }

    /// One group's cells: `n_dates` rows of [`LANES`] assets.
    pub fn group(&self, g: usize) -> &[f64] {
        let n = self.n_dates * LANES;
        &self.data[g * n..(g + 1) * n]
    }

    /// The raw buffer, in groups of [`LANES`] assets (padding included): for kernels to
    /// which the layout does not matter (element-wise maps) or that walk the groups.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    pub fn as_mut_slice(&mut self) -> &mut [f64] {
        &mut self.data
    }

    /// Iterates the mutable groups ([`group`](Self::group)) in parallel.
    pub fn par_groups_mut(&mut self) -> rayon::slice::ChunksMut<'_, f64> {
        let n = (self.n_dates * LANES).max(1);
        self.data.par_chunks_mut(n)
    }

    /// An asset-major copy (`out[asset * n_dates + date]`), for readers outside the
    /// engine (files, Python, WebAssembly).
    pub fn to_asset_major(&self) -> Vec<f64> {
        let (nd, na) = (self.n_dates, self.n_assets);
        let mut out = vec![f64::NAN; nd * na];
        if nd > 0 {
            out.par_chunks_mut(nd * LANES).zip(self.data.par_chunks(nd * LANES)).for_each(|(o, g)| {
                let rows = o.len() / nd;
                // SAFETY: `g` holds nd × LANES cells, of which the first `rows` columns are
                // read, and `o` rows × nd.
                unsafe { transpose_into(g.as_ptr(), LANES, o.as_mut_ptr(), nd, nd, rows) }
            });
        }
        out
    }

    /// A zero-copy `ndarray` view of the buffer with shape (groups, dates, [`LANES`]):
    /// asset `8 · group + lane`; the last group's lanes past `n_assets` are padding.
    pub fn view(&self) -> ArrayView3<'_, f64> {
        ArrayView3::from_shape((self.n_groups(), self.n_dates, LANES), &self.data).expect("panel shape matches its buffer")
    }

    /// An `ndarray` copy with shape (dates, assets), padding left out.
    pub fn to_array(&self) -> Array2<f64> {
        Array2::from_shape_fn((self.n_dates, self.n_assets), |(t, a)| self.get(t, a))
    }

    /// Every real cell (padding left out), in no particular order.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let (nd, na) = (self.n_dates, self.n_assets);
        self.data.chunks(LANES).enumerate().flat_map(move |(i, row)| {
            let g = i / nd.max(1);
            row[..LANES.min(na - g * LANES)].iter().copied()
        })
    }

    /// The first `n` dates only (used to cut a panel at a period's end so that nothing
    /// after it can be read).
    pub fn truncate_dates(&self, n: usize) -> Panel {
        let n = n.min(self.n_dates);
        let mut data = Vec::with_capacity(Panel::cells(n, self.n_assets));
        for g in 0..self.n_groups() {
            data.extend_from_slice(&self.group(g)[..n * LANES]);
        }
        Panel { n_dates: n, n_assets: self.n_assets, data }
    }

    /// Date-major copy (`out[date * n_assets + asset]`) of dates `from..to`.
    pub fn to_date_major(&self, from: usize, to: usize, out: &mut Vec<f64>) {
        assert!(from <= to && to <= self.n_dates, "dates inside the panel");
        // Not cleared first: the gather writes every cell.
        out.resize((to - from) * self.n_assets, f64::NAN);
        // SAFETY: the panel's own cells, dates from..to of which fit (asserted above).
        unsafe { gather_date_block(self.data.as_ptr(), self.n_dates, self.n_assets, from, out) };
    }

    /// Share of cells that are not finite.
    pub fn missing_share(&self) -> f64 {
        let n = self.n_dates * self.n_assets;
        if n == 0 {
            return 0.0;
        }
        self.values().filter(|v| !v.is_finite()).count() as f64 / n as f64
    }
}

/// Equal shapes and equal real cells (padding left out); NaN equals nothing, as for f64.
impl PartialEq for Panel {
    fn eq(&self, other: &Panel) -> bool {
        (self.n_dates, self.n_assets) == (other.n_dates, other.n_assets) && self.values().eq(other.values())
    }
}

/// A copy in a pooled buffer when there is one, for the reason given at [`Panel::filled`].
impl Clone for Panel {
    fn clone(&self) -> Panel {
        let mut data = pool::take(self.data.len());
        data.copy_from_slice(&self.data);
        Panel { n_dates: self.n_dates, n_assets: self.n_assets, data }
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
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::Mutex;

    /// Buffers smaller than this (in cells, 256 KB) go back to the allocator: below
    /// glibc's mmap threshold it recycles them well by itself.
    const MIN_CELLS: usize = 1 << 15;
    /// At most this many buffers are kept while a batch runs. Keeping many costs no peak
    /// memory (a fresh buffer is allocated only when the pool has none of its size), and
    /// a batch of 101 alphas frees and reallocates dozens at a time: with 8 kept, 8 % of
    /// its time went to the kernel clearing fresh pages.
    const MAX_BUFFERS: usize = 64;
    /// Kept after a batch ([`trim`]), so that a long-running process (a mining run, the
    /// combined model's training) does not hold a batch's peak for the rest of its life.
    const KEEP_AFTER_BATCH: usize = 8;

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

    /// Frees all but the most recently pooled [`KEEP_AFTER_BATCH`] buffers.
    pub fn trim() {
        if let Ok(mut p) = POOL.lock() {
            let extra = p.len().saturating_sub(KEEP_AFTER_BATCH);
            p.drain(..extra);
        }
    }

    /// Tells glibc's allocator to keep freed memory for reuse instead of handing it back
    /// to the kernel: blocks up to 32 MB (a panel of the shipped data is 19 MB) come from
    /// the heap rather than fresh `mmap`s, the heap is never trimmed, and all threads
    /// share one arena (so the loader's threads free memory the evaluator then reuses).
    ///
    /// Why: in a VM every page the process touches for the first time costs a fault
    /// and a clearing by the kernel, 1.5 to 10 µs per 4 KB page on this project's
    /// machines; the memory the loader frees and the scorer's temporaries would otherwise
    /// be returned and faulted in again as panels. Measured on the alpha101 batch: 329k
    /// to 227k page faults, system time 0.9 to 0.45 s, the same peak memory (the process
    /// keeps what it has used, which the panel pool already did). Call it once at start,
    /// before other threads allocate; it does nothing off glibc.
    pub fn keep_freed_memory() {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes allocator settings; called before threads start.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
    }

    /// The system allocator, except that blocks of 1 MB or more start on a cache line.
    ///
    /// Why: glibc aligns a block to 16 bytes, so a panel's buffer usually starts inside a
    /// cache line and every 64-byte vector load or store of a whole-panel pass (the
    /// element-wise maps, the scorer's gathers) straddles two lines. Measured on the
    /// alpha101 batch (`benches/ab.sh`, one thread): total −2 %, element-wise operators
    /// and running sums −3 to −6 %, metrics −3 %, output identical. Install it as the
    /// `#[global_allocator]` of a binary (the CLI and the engine benchmark do).
    pub struct LineAligned;

    /// From this size on, blocks are aligned to [`LINE`].
    const ALIGNED_FROM: usize = 1 << 20;
    const LINE: usize = 64;
    /// What a big block asks the system for beyond its size: room to move its start to
    /// the next line with the system's block address stored just before it. (Asking glibc
    /// for an aligned block instead, `memalign`, left small pieces between the big ones:
    /// the alpha101 batch's peak grew from 642 to 697 MB.)
    const EXTRA: usize = 2 * LINE;
    const HEADER: usize = std::mem::size_of::<usize>();

    fn is_big(l: Layout) -> bool {
        l.size() >= ALIGNED_FROM && l.align() <= LINE
    }

    /// The system's layout of a big block of `size` bytes.
    fn outer(size: usize) -> Option<Layout> {
        Layout::from_size_align(size.checked_add(EXTRA)?, HEADER).ok()
    }

    /// The line-aligned start inside the system block `raw`, with `raw` noted before it.
    ///
    /// # Safety
    /// `raw` must be null or a live block [`EXTRA`] bytes larger than the block it gives out.
    unsafe fn place(raw: *mut u8) -> *mut u8 {
        if raw.is_null() {
            return raw;
        }
        let skip = HEADER + raw.wrapping_add(HEADER).align_offset(LINE);
        // SAFETY: skip <= HEADER + LINE - 1 < EXTRA, inside the block; the header's
        // `HEADER` bytes before the start are inside it too, and aligned (skip is a
        // multiple of HEADER from a HEADER-aligned block).
        unsafe {
            let p = raw.add(skip);
            p.cast::<usize>().sub(1).write(raw as usize);
            p
        }
    }

    // SAFETY: a small block is the system's own; a big one is a system block of its size
    // plus EXTRA, given out from a line inside it, whose start is read back from the
    // header on free. Every block's alignment is at least the caller's.
    unsafe impl GlobalAlloc for LineAligned {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            if !is_big(l) {
                // SAFETY: the caller's layout is passed to the system allocator unchanged.
                return unsafe { System.alloc(l) };
            }
            // SAFETY: `o` is `l`'s size plus EXTRA, so `place` finds its line and header
            // inside the block (or passes a null block on).
            outer(l.size()).map_or(std::ptr::null_mut(), |o| unsafe { place(System.alloc(o)) })
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            if !is_big(l) {
                // SAFETY: the caller's layout is passed to the system allocator unchanged.
                return unsafe { System.alloc_zeroed(l) };
            }
            // SAFETY: as in `alloc`.
            outer(l.size()).map_or(std::ptr::null_mut(), |o| unsafe { place(System.alloc_zeroed(o)) })
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            if !is_big(l) {
                // SAFETY: a small block came from the system allocator with this layout.
                return unsafe { System.dealloc(p, l) };
            }
            if let Some(o) = outer(l.size()) {
                // SAFETY: a big block's start was written in the header just before `p` by
                // `place`, and the block was allocated with layout `o`.
                unsafe { System.dealloc(p.cast::<usize>().sub(1).read() as *mut u8, o) }
            }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
            let Ok(to) = Layout::from_size_align(size, l.align()) else { return std::ptr::null_mut() };
            if !is_big(l) && !is_big(to) {
                // Small on both sides: the system's own realloc, in place where it can.
                // SAFETY: `p` is a small system block of layout `l`; `size` is non-zero
                // (GlobalAlloc's contract) and `to` is a valid layout.
                return unsafe { System.realloc(p, l, size) };
            }
            // SAFETY: `to` is a valid layout of non-zero size.
            let q = unsafe { self.alloc(to) };
            if !q.is_null() {
                // SAFETY: `p` holds `l.size()` bytes and `q` at least `size`, in two
                // distinct blocks; `p` is then freed with the layout it was given.
                unsafe {
                    std::ptr::copy_nonoverlapping(p, q, l.size().min(size));
                    self.dealloc(p, l);
                }
            }
            q
        }
    }

    /// Pooled buffers of exactly `cap` cells of capacity (for tests).
    #[cfg(test)]
    pub(super) fn count_of_capacity(cap: usize) -> usize {
        POOL.lock().map(|p| p.iter().filter(|b| b.capacity() == cap).count()).unwrap_or(0)
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

/// Asks the CPU to bring the `len` cells at `p` into cache (a hint; a no-op off x86-64).
#[inline]
pub fn prefetch(p: *const f64, len: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_with::<{ std::arch::x86_64::_MM_HINT_T0 }>(p, len);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// [`prefetch`] into the second-level cache only: for data needed a while from now,
/// which should not evict what the first level holds for the work in between.
#[inline]
pub fn prefetch_l2(p: *const f64, len: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_with::<{ std::arch::x86_64::_MM_HINT_T1 }>(p, len);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// One prefetch with hint `H` per cache line of the `len` cells at `p`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_with<const H: i32>(p: *const f64, len: usize) {
    for i in (0..len).step_by(8) {
        // SAFETY: a prefetch never faults, so `wrapping_add` keeps this free of any
        // safety obligation.
        unsafe { std::arch::x86_64::_mm_prefetch::<H>(p.wrapping_add(i).cast()) };
    }
}

/// Runs `f` compiled for AVX-512 (with AVX2, FMA and BMI) where the CPU has it, else as
/// is.
///
/// Why: the crate is built for baseline x86-64, so the loops the compiler vectorises by
/// itself (element-wise maps, the scorer's per-date walks) run two lanes wide. What `f`
/// inlines is compiled again with the wider instruction set; the operations and their
/// order stay the same (Rust never fuses a multiply and an add by itself), so the results
/// are the same bits. Measured: a `-C target-cpu=native` build of the whole crate gained
/// there but lost more in the hand-written AVX-512 kernels (register spills).
///
/// Mark the closure `#[inline(always)]`: LLVM inlines only small closures into the
/// AVX-512 function by itself, and one left out of line is compiled for baseline x86-64,
/// silently (the scorer's per-date loop was, before it was marked).
#[inline(always)]
pub fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        /// # Safety
        /// The CPU must have every feature this is compiled for.
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
        unsafe fn wide<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        use std::arch::is_x86_feature_detected as has;
        let all = has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma");
        if all && has!("bmi1") && has!("bmi2") && has!("lzcnt") && has!("popcnt") {
            // SAFETY: the CPU has every feature `wide` is compiled for (checked just above).
            return unsafe { wide(f) };
        }
    }
    f()
}

/// Transposes `src`, read as rows of `cols` values, into `dst` (`cols` rows of
/// `src.len() / cols` values).
pub fn transpose(src: &[f64], cols: usize, dst: &mut [f64]) {
    if cols > 0 {
        transpose_strided(src, cols, dst, src.len() / cols, cols);
    }
}

/// Transposes `rows × cols` values read from `src[r * stride + c]` into
/// `dst[c * rows + r]`.
fn transpose_strided(src: &[f64], stride: usize, dst: &mut [f64], rows: usize, cols: usize) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(src.len() >= (rows - 1) * stride + cols && dst.len() >= rows * cols, "transpose out of bounds");
    // SAFETY: every read lies inside `src` and every write at c * rows + r < rows * cols <=
    // dst.len() (checked above); both are borrowed for the call.
    unsafe { transpose_into(src.as_ptr(), stride, dst.as_mut_ptr(), rows, rows, cols) }
}

/// Writes a date-major block (`block[j * na + a]` for dates `t0 + j`) into the buffer of a
/// panel of `nd` dates and `na` assets that starts at `dst`: one line per group and date.
///
/// # Safety
/// `dst` must point to a live panel buffer of `nd` dates and `na` assets, the block must
/// fit (`t0 + block.len() / na <= nd`), and no other thread may read or write these
/// cells (dates `t0..t0 + rows` of every asset) during the call. Other threads may write
/// other dates of the same buffer: each write goes through the raw pointer, never through
/// a reference spanning the whole buffer.
pub unsafe fn scatter_date_block(dst: *mut f64, nd: usize, na: usize, t0: usize, block: &[f64]) {
    if na == 0 {
        return;
    }
    let rows = block.len() / na;
    debug_assert!(t0 + rows <= nd);
    with_avx512(#[inline(always)] || for g in 0..na.div_ceil(LANES) {
        let (a0, w) = (g * LANES, LANES.min(na - g * LANES));
        // SAFETY: group g's dates t0..t0 + rows, inside the buffer and the caller's alone;
        // each row of the block holds assets a0..a0 + w.
        unsafe {
            let base = dst.add((g * nd + t0) * LANES);
            let src = block.as_ptr().add(a0);
            for j in 0..rows {
                copy_lanes(src.add(j * na), base.add(j * LANES), w);
            }
        }
    })
}

/// Reads dates `t0..t0 + rows` of the buffer of a panel of `nd` dates and `na` assets
/// that starts at `src` into a date-major block (`block[j * na + a]`,
/// `rows = block.len() / na`): [`scatter_date_block`]'s inverse, so that a kernel may
/// write its result over the dates it has read while other threads read and write other
/// dates of the same buffer.
///
/// # Safety
/// `src` must point to a live panel buffer of `nd` dates and `na` assets, the block must
/// fit (`t0 + rows <= nd`), and no other thread may write these cells during the call.
pub unsafe fn gather_date_block(src: *const f64, nd: usize, na: usize, t0: usize, block: &mut [f64]) {
    if na == 0 {
        return;
    }
    let rows = block.len() / na;
    debug_assert!(t0 + rows <= nd);
    with_avx512(#[inline(always)] || for g in 0..na.div_ceil(LANES) {
        let (a0, w) = (g * LANES, LANES.min(na - g * LANES));
        // The lines of the group after next: each group's rows of a block are a short
        // run, too short for the hardware prefetcher to get ahead of the reads.
        if g + 2 < na.div_ceil(LANES) {
            prefetch(src.wrapping_add(((g + 2) * nd + t0) * LANES), rows * LANES);
        }
        // SAFETY: as in `scatter_date_block`, reading.
        unsafe {
            let base = src.add((g * nd + t0) * LANES);
            let dst = block.as_mut_ptr().add(a0);
            for j in 0..rows {
                copy_lanes(base.add(j * LANES), dst.add(j * na), w);
            }
        }
    })
}

/// Copies `w` (at most [`LANES`]) cells; a full group as one 64-byte move (a
/// variable-length copy would be a call to `memcpy`). The block gathers and scatters run it
/// inside [`with_avx512`]: compiled for the baseline CPU the move was four 16-byte ones.
///
/// # Safety
/// `w` cells valid for reads at `src` and for writes at `dst`, not overlapping.
#[inline(always)]
unsafe fn copy_lanes(src: *const f64, dst: *mut f64, w: usize) {
    // SAFETY: the caller's cells.
    unsafe {
        if w == LANES {
            dst.cast::<[f64; LANES]>().write_unaligned(src.cast::<[f64; LANES]>().read_unaligned());
        } else {
            std::ptr::copy_nonoverlapping(src, dst, w);
        }
    }
}

/// Transposes `rows × cols` values read from `src[r * stride + c]` to
/// `dst[c * dst_stride + r]`, in 8 × 8 tiles: eight cache-line reads and eight cache-line
/// writes per tile (a plain strided loop maps every write of a ~4 KB stride to the same
/// few cache sets). A tile is transposed in registers with AVX-512 where the CPU has it
/// ([`avx512::transpose8`]), else by fixed-size loops the compiler unrolls.
///
/// # Safety
/// Every `src + r * stride + c` must be valid for reads and not written by anyone else
/// during the call, and every `dst + c * dst_stride + r` (r < rows, c < cols) valid for
/// writes and not accessed by anyone else.
unsafe fn transpose_into(src: *const f64, stride: usize, dst: *mut f64, dst_stride: usize, rows: usize, cols: usize) {
    #[cfg(target_arch = "x86_64")]
    let simd = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let simd = false;
    // SAFETY: passed on from the caller.
    unsafe { transpose_tiles(src, stride, dst, dst_stride, rows, cols, simd) }
}

/// [`transpose_into`], with the AVX-512 tiles (`simd`, only where the CPU has it) or the
/// portable ones.
///
/// # Safety
/// As for [`transpose_into`], and `simd` only on a CPU with AVX-512F.
unsafe fn transpose_tiles(src: *const f64, stride: usize, dst: *mut f64, dst_stride: usize, rows: usize, cols: usize, simd: bool) {
    const T: usize = 8;
    let (fr, fc) = (rows / T * T, cols / T * T);
    match simd {
        // SAFETY: the CPU has AVX-512F; every tile's cells are the caller's.
        #[cfg(target_arch = "x86_64")]
        true => unsafe { avx512::tiles(src, stride, dst, dst_stride, fr, fc) },
        // SAFETY: as above.
        _ => unsafe { portable_tiles(src, stride, dst, dst_stride, fr, fc) },
    }
    // What the full tiles left: the right edge (columns fc..) of their rows, then every
    // column of the bottom rows (fr..).
    for r in 0..rows {
        let from = if r < fr { fc } else { 0 };
        for c in from..cols {
            // SAFETY: the caller's cells.
            unsafe { *dst.add(c * dst_stride + r) = *src.add(r * stride + c) };
        }
    }
}

/// The full `rows × cols` tiles of [`transpose_tiles`] without AVX-512: fixed-size loops
/// the compiler unrolls.
///
/// # Safety
/// As for [`transpose_into`], for the first `rows` rows and `cols` columns.
unsafe fn portable_tiles(src: *const f64, stride: usize, dst: *mut f64, dst_stride: usize, rows: usize, cols: usize) {
    const T: usize = 8;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            let mut tile = [[0.0f64; T]; T];
            for (i, t) in tile.iter_mut().enumerate() {
                // SAFETY: T cells of row r0 + i, the caller's.
                *t = unsafe { *src.add((r0 + i) * stride + c0).cast::<[f64; T]>() };
            }
            #[allow(clippy::needless_range_loop)] // j indexes the tile's columns
            for j in 0..T {
                // SAFETY: the caller guarantees these T cells (rows r0..r0 + T of column
                // c0 + j) are valid and ours.
                let o = unsafe { &mut *dst.add((c0 + j) * dst_stride + r0).cast::<[f64; T]>() };
                for (i, o) in o.iter_mut().enumerate() {
                    *o = tile[i][j];
                }
            }
        }
    }
}

/// AVX-512 register kernels of the transposes.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Transposes 8 registers as an 8 × 8 matrix of 64-bit lanes: register i, lane j
    /// becomes register j, lane i (24 shuffles).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn transpose8(r: [__m512i; 8]) -> [__m512i; 8] {
        // t: rows 2k and 2k+1 interleaved (their even columns, or their odd columns).
        let lo = |a, b| _mm512_unpacklo_epi64(a, b);
        let hi = |a, b| _mm512_unpackhi_epi64(a, b);
        let (t0, t1, t2, t3) = (lo(r[0], r[1]), hi(r[0], r[1]), lo(r[2], r[3]), hi(r[2], r[3]));
        let (t4, t5, t6, t7) = (lo(r[4], r[5]), hi(r[4], r[5]), lo(r[6], r[7]), hi(r[6], r[7]));
        // u: rows 0..4 (or 4..8) of columns c and c + 4, for c = 0, 2, 1, 3.
        let first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        let q = |a, ix, b| _mm512_permutex2var_epi64(a, ix, b);
        let (u0, u1, u2, u3) = (q(t0, first, t2), q(t0, second, t2), q(t1, first, t3), q(t1, second, t3));
        let (u4, u5, u6, u7) = (q(t4, first, t6), q(t4, second, t6), q(t5, first, t7), q(t5, second, t7));
        let lo4 = |a, b| _mm512_shuffle_i64x2::<0x44>(a, b);
        let hi4 = |a, b| _mm512_shuffle_i64x2::<0xEE>(a, b);
        [lo4(u0, u4), lo4(u2, u6), lo4(u1, u5), lo4(u3, u7), hi4(u0, u4), hi4(u2, u6), hi4(u1, u5), hi4(u3, u7)]
    }

    /// Transposes the `rows × cols` full 8 × 8 tiles (both multiples of 8) of
    /// [`transpose_tiles`](super::transpose_tiles).
    ///
    /// Why a loop of its own: called tile by tile from baseline code, [`tile`] could not
    /// be inlined, so every 64 cells paid a call, a `vzeroupper` and reloads of the
    /// shuffles' index vectors.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `src + r * stride + c` valid for reads and
    /// `dst + c * dst_stride + r` valid for writes for every r < rows, c < cols.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tiles(src: *const f64, stride: usize, dst: *mut f64, dst_stride: usize, rows: usize, cols: usize) {
        for r0 in (0..rows).step_by(8) {
            for c0 in (0..cols).step_by(8) {
                // SAFETY: inside the ranges the caller vouches for.
                unsafe { tile(src.add(r0 * stride + c0), stride, dst.add(c0 * dst_stride + r0), dst_stride) };
            }
        }
    }

    /// Transposes one 8 × 8 tile: rows `src + i * stride` (8 cells each) to rows
    /// `dst + j * dst_stride`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, and the 8 rows of 8 cells at both ends must be
    /// valid (for reads at `src`, for writes at `dst`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile(src: *const f64, stride: usize, dst: *mut f64, dst_stride: usize) {
        // SAFETY: row `i` of 8 cells at `src` is readable (this function's contract).
        let load = |i: usize| unsafe { _mm512_loadu_epi64(src.add(i * stride) as *const i64) };
        let t = transpose8([load(0), load(1), load(2), load(3), load(4), load(5), load(6), load(7)]);
        for (j, v) in t.into_iter().enumerate() {
            // SAFETY: row `j` of 8 cells at `dst` is writable (this function's contract).
            unsafe { _mm512_storeu_epi64(dst.add(j * dst_stride) as *mut i64, v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `with_avx512` promises: the same bits as the baseline build for the float
    /// patterns the kernels use (products added to sums, divisions, square roots, running
    /// sums in order, min/max with NaN). Fails if a compiler setting ever lets the wider
    /// code fuse a multiply and an add or reorder a sum.
    #[test]
    fn avx512_compiled_loops_give_the_same_bits() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || (crate::xorshift(&mut seed) >> 11) as f64 / (1u64 << 53) as f64 * 200.0 - 100.0;
        let x: Vec<f64> = (0..4099).map(|i| if i % 97 == 0 { f64::NAN } else { next() }).collect();
        let y: Vec<f64> = (0..4099).map(|_| next()).collect();
        let kernel = || {
            // An element-wise loop (vectorised) and serial sums (kept in order).
            let mut out = vec![0.0; x.len()];
            for ((o, a), b) in out.iter_mut().zip(&x).zip(&y) {
                *o = (a * b + b) / (a - b) + (a.abs()).sqrt() - a.max(*b) * a.min(*b);
            }
            let sum: f64 = out.iter().filter(|v| v.is_finite()).sum();
            let sxy = x.iter().zip(&y).fold(0.0, |s, (a, b)| s + a * b);
            out.push(sum);
            out.push(sxy);
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let wide = with_avx512(kernel);
        assert_eq!(wide, kernel());
        assert!(wide.iter().any(|&b| f64::from_bits(b).is_nan()) && wide.iter().any(|&b| f64::from_bits(b).is_finite()));
    }

    #[test]
    fn layouts_agree() {
        let dm: Vec<f64> = (0..12).map(|v| v as f64).collect(); // 4 dates × 3 assets
        let p = Panel::from_date_major(4, 3, &dm);
        assert_eq!(p.get(2, 1), 7.0);
        assert_eq!(p.series(1), &[1.0, 4.0, 7.0, 10.0]);
        assert_eq!(p.to_asset_major(), vec![0.0, 3.0, 6.0, 9.0, 1.0, 4.0, 7.0, 10.0, 2.0, 5.0, 8.0, 11.0]);
        assert_eq!((p.view().dim(), p.view()[[0, 3, 2]]), ((1, 4, 8), 11.0));
        assert_eq!(p.to_array()[[3, 2]], 11.0);
        assert_eq!(p.to_array().shape(), &[4, 3]);
        let mut back = Vec::new();
        p.to_date_major(0, 4, &mut back);
        assert_eq!(back, dm);
        p.to_date_major(1, 3, &mut back);
        assert_eq!(back, dm[3..9].to_vec());
        assert_eq!(p.truncate_dates(2).series(2), &[2.0, 5.0]);
    }

    #[test]
    fn pool_keeps_a_batch_of_buffers_and_trims_after() {
        // A capacity no other test uses, so concurrent tests can only take these buffers.
        let cap = (1 << 15) + 17;
        for _ in 0..20 {
            pool::give(Vec::with_capacity(cap));
        }
        // During a batch the pool keeps more than the 8 it keeps afterwards.
        assert!(pool::count_of_capacity(cap) > 8, "the pool keeps a batch's buffers");
        pool::trim();
        assert!(pool::count_of_capacity(cap) <= 8, "trim keeps at most 8 buffers");
        // A taken buffer has the requested length whatever it held before.
        let b = pool::take((1 << 15) + 10);
        assert_eq!(b.len(), (1 << 15) + 10);
    }

    #[test]
    fn panels_made_and_dropped_in_a_loop_reuse_one_buffer() {
        // 8,197 dates × 9 assets: a buffer size no other test uses.
        let (nd, na) = (8197, 9);
        for i in 0..20 {
            let mut p = Panel::nan(nd, na);
            // Filled whatever the pooled buffer held: the last turn wrote 1.0 everywhere.
            assert!(p.values().all(f64::is_nan), "turn {i}: a NaN panel holds only NaN");
            for t in 0..nd {
                for a in 0..na {
                    p.set(t, a, 1.0);
                }
            }
        }
        // Built from fresh memory, each turn's panel went to the pool on drop: 20 kept.
        assert!(pool::count_of_capacity(Panel::cells(nd, na)) <= 1, "the pool grew by a panel per turn");
        // Likewise copies.
        let p = Panel::filled(nd, na, 2.0);
        for _ in 0..20 {
            let q = p.clone();
            assert!(q == p, "a copy equals its original");
        }
        assert!(pool::count_of_capacity(Panel::cells(nd, na)) <= 1, "the pool grew by a copy per turn");
    }

    #[test]
    fn line_aligned_blocks_start_on_a_line_and_keep_their_contents_through_realloc() {
        use std::alloc::{GlobalAlloc, Layout};
        let a = pool::LineAligned;
        let big = Layout::from_size_align(3 << 20, 8).expect("layout");
        // SAFETY: each block is used within its layout and freed with the allocator and
        // layout it was allocated with (realloc's result with the new size).
        unsafe {
            let mut blocks = Vec::new();
            for _ in 0..8 {
                let p = a.alloc(big);
                assert!(!p.is_null() && (p as usize).is_multiple_of(64), "a 3 MB block starts on a cache line");
                blocks.push(p);
            }
            for p in blocks {
                a.dealloc(p, big);
            }
            // Small to big, big to bigger, big to small: the bytes written survive.
            let small = Layout::from_size_align(1000, 8).expect("layout");
            let p = a.alloc(small);
            p.write_bytes(7, 1000);
            let p = a.realloc(p, small, 2 << 20);
            assert!((p as usize).is_multiple_of(64), "grown into a big block, aligned");
            assert!((0..1000).all(|i| *p.add(i) == 7));
            p.add(1000).write_bytes(9, (2 << 20) - 1000);
            let grown = Layout::from_size_align(2 << 20, 8).expect("layout");
            let p = a.realloc(p, grown, 4 << 20);
            assert!((p as usize).is_multiple_of(64) && *p.add(999) == 7 && *p.add((2 << 20) - 1) == 9);
            let p = a.realloc(p, Layout::from_size_align(4 << 20, 8).expect("layout"), 500);
            assert!((0..500).all(|i| *p.add(i) == 7));
            a.dealloc(p, Layout::from_size_align(500, 8).expect("layout"));
        }
    }

    #[test]
    fn tiled_transposes_cover_full_tiles_and_edges() {
        // 37 dates × 21 assets: full 8 × 8 tiles plus ragged edges on both sides.
        let (nd, na) = (37, 21);
        let dm: Vec<f64> = (0..nd * na).map(|v| v as f64).collect();
        let p = Panel::from_date_major(nd, na, &dm);
        for t in 0..nd {
            for a in 0..na {
                assert_eq!(p.get(t, a), dm[t * na + a]);
            }
        }
        let mut block = Vec::new();
        p.to_date_major(3, 30, &mut block);
        assert_eq!(block, dm[3 * na..30 * na].to_vec());
        let mut back = Panel::nan(nd, na);
        let dst = back.as_mut_slice().as_mut_ptr();
        for t0 in (0..nd).step_by(16) {
            let t1 = (t0 + 16).min(nd);
            // SAFETY: `back` holds nd × na cells and each call writes only its own dates.
            unsafe { scatter_date_block(dst, nd, na, t0, &dm[t0 * na..t1 * na]) };
        }
        assert_eq!(back, p);
        // The portable tiles too, where the AVX-512 ones ran above.
        let mut out = vec![f64::NAN; nd * na];
        // SAFETY: `out` holds nd × na cells; simd = false needs no CPU feature.
        unsafe { transpose_tiles(dm.as_ptr(), na, out.as_mut_ptr(), nd, nd, na, false) };
        assert_eq!(out, p.to_asset_major());
    }

    /// Assets 16..21 fill a last group of eight only in part: every way in and out of the
    /// panel agrees on the real cells, and the padding never shows (equality, the missing
    /// share, the real values).
    #[test]
    fn a_partial_last_group_keeps_its_padding_out_of_sight() {
        let (nd, na) = (5, 21);
        let am: Vec<f64> = (0..nd * na).map(|v| if v % 7 == 3 { f64::NAN } else { v as f64 }).collect();
        let p = Panel::from_asset_major(nd, na, am.clone());
        assert_eq!((p.n_groups(), p.as_slice().len()), (3, 3 * nd * LANES));
        assert_eq!(p.to_asset_major().iter().map(|v| v.to_bits()).collect::<Vec<_>>(), am.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        for a in 0..na {
            assert_eq!(p.series(a).iter().map(|v| v.to_bits()).collect::<Vec<_>>(), am[a * nd..(a + 1) * nd].iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
        assert_eq!(p.values().count(), nd * na);
        let nan = am.iter().filter(|v| v.is_nan()).count();
        assert_eq!(p.missing_share(), nan as f64 / (nd * na) as f64);
        // Padding that differs (as a kernel may leave it) does not make panels differ.
        let (mut a, mut b) = (Panel::filled(nd, na, 1.0), Panel::filled(nd, na, 1.0));
        let last = a.as_slice().len() - 1;
        a.as_mut_slice()[last] = 7.0;
        b.as_mut_slice()[last] = f64::NAN;
        assert_eq!(a, b);
        assert_eq!(a.missing_share(), 0.0);
        b.set(nd - 1, na - 1, 2.0);
        assert_ne!(a, b);
        assert_eq!(p.truncate_dates(2).series(19), am[19 * nd..19 * nd + 2].to_vec());
    }
}
