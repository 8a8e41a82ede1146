//! Compute kernels: tight loops over contiguous buffers, no per-element allocation.
//!
//! * [`elementwise`]: broadcasting maps over scalars and panels, reusing an input buffer
//!   when the evaluator hands over its last reference.
//! * [`rolling`]: time-series windows per asset, O(n) in the series length (running sums
//!   refreshed exactly once per window length, monotonic deques, block prefix products).
//! * [`cross`]: per-date kernels (rank, scale, group demeaning) on a date-major copy.
//! * [`netsort`]: the AVX-512 sorting network behind the cross-sectional sort.
//! * [`few`]: rows of a few distinct values, ordered by counting them instead.
//! * [`pow`]: `x ^ y` eight cells at a time, with libm's bits.
//! * [`simd`]: AVX-512 idioms the kernels share (tail masks, finite lanes).

pub mod cross;
pub mod elementwise;
pub mod few;
pub mod netsort;
pub mod pow;
pub mod rolling;
#[cfg(target_arch = "x86_64")]
pub mod simd;

pub use elementwise::Value;

use crate::data::Panel;
use std::sync::Arc;

/// An input of a panel kernel: a panel it may only read, or one nobody else holds any
/// more, whose buffer the kernel may write its result into. Writing over the lines just
/// read spares fetching a fresh panel's lines from memory (`rank` −16 % in the alpha101
/// batch, measured 2026-11-26 on an AMD EPYC, Zen 4). The rolling kernels take a fresh panel all the
/// same: they read days behind the one they write, so the input would need a copy first.
pub enum Src<'a> {
    Read(&'a Panel),
    Take(Panel),
}

impl<'a> From<&'a Panel> for Src<'a> {
    fn from(p: &'a Panel) -> Self {
        Src::Read(p)
    }
}

impl<'a> From<&'a Arc<Panel>> for Src<'a> {
    fn from(p: &'a Arc<Panel>) -> Self {
        Src::Read(p)
    }
}

impl Src<'_> {
    /// The panel, to read.
    pub fn panel(&self) -> &Panel {
        match self {
            Src::Read(p) => p,
            Src::Take(p) => p,
        }
    }
}

/// A raw pointer to a panel's cells shared by parallel tasks, each of which reads and
/// writes only its own cells (a block of dates in `cross::per_date`).
#[derive(Clone, Copy)]
pub(crate) struct DisjointCells(pub(crate) *mut f64);
// SAFETY: every user splits the cells between its tasks so that no cell is read or
// written by two of them.
unsafe impl Send for DisjointCells {}
unsafe impl Sync for DisjointCells {}

/// Defines a function whose body is compiled twice, for the baseline CPU and for AVX2, and
/// runs the AVX2 copy when the CPU has it (checked at run time, so the binary stays
/// portable). For loops that the compiler vectorises: the operations and their order are
/// the same in both copies, so the results are identical bit for bit; only the vector
/// width changes. Measured: Pearson at four horizons 1.5× faster (`ts_rank`'s short count
/// loops gained nothing, so it stays single-version). The body must be written inline (or
/// call `#[inline(always)]` functions): a closure or function value passed in would stay
/// baseline code.
macro_rules! avx2_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident $(<$(const $g:ident: usize),*>)? ($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name $(<$(const $g: usize),*>)? ($($a: $t),*) $(-> $r)? {
            #[inline(always)]
            fn body $(<$(const $g: usize),*>)? ($($a: $t),*) $(-> $r)? $body
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                #[target_feature(enable = "avx2")]
                fn avx2 $(<$(const $g: usize),*>)? ($($a: $t),*) $(-> $r)? {
                    body $(::<$($g),*>)? ($($a),*)
                }
                // SAFETY: the CPU supports AVX2 (checked just above).
                return unsafe { avx2 $(::<$($g),*>)? ($($a),*) };
            }
            body $(::<$($g),*>)? ($($a),*)
        }
    };
}
pub(crate) use avx2_dispatch;
