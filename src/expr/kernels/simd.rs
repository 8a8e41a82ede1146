//! AVX-512 idioms the kernels share: the CPU check of the kernels that also count bits,
//! the lane mask of a row's last, partial block, and the mask of finite lanes.

use std::arch::x86_64::*;

/// Whether the CPU has AVX-512F and POPCNT: the kernels that count set bits (the sorting
/// network's finite values, the scorer's ties and label counts) need both (checked once
/// and cached by std).
pub fn avx512_popcnt() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("popcnt")
}

/// The lanes of block `q` (cells `8q .. 8q + 8`) that lie inside a row of `len` cells:
/// all eight, or those of the row's tail.
#[inline(always)]
pub fn tail8(len: usize, q: usize) -> __mmask8 {
    ((1u16 << (len - 8 * q).min(8)) - 1) as __mmask8
}

/// [`tail8`] for blocks of sixteen 32-bit lanes.
#[inline(always)]
pub fn tail16(len: usize, q: usize) -> __mmask16 {
    ((1u32 << (len - 16 * q).min(16)) - 1) as __mmask16
}

/// The lanes of `v` that hold finite values: `v − v` is 0 exactly for those (NaN and ±inf
/// give NaN), with no integer work on the bits.
///
/// # Safety
/// The CPU must support AVX-512F (callers are AVX-512 kernels, which inline it).
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn finite(v: __m512d) -> __mmask8 {
    _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(_mm512_sub_pd(v, v), _mm512_setzero_pd())
}
