//! Memory-layout probe: what one pass over a panel of the shipped data costs when it is
//! read the way a kernel reads it, in each layout the evaluator could keep panels in.
//!
//! Why it existed: the transposes between the asset-major panels (the layout before
//! the interleaved one measured here) and the kernels'
//! date-major or eight-asset-interleaved scratch are ~15 % of the alpha101 batch, and
//! keeping panels in another layout was the last untried redesign on the list. This
//! measures the access patterns themselves (a running sum over eight lanes, the loop shape
//! of the rolling kernels; a plain walk along a date's row, that of the cross-sectional
//! ones), so the decision rests on figures (benches/README.md).
//!
//! Run: `cargo bench --bench layout`.

use alphaloop::data::{load, transpose, LoadOptions};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

const W: usize = 8;

/// Running sums of eight lanes down the dates of group after group: lane line (g, t) is
/// `x[g * g_stride + t * t_stride ..][..8]`. One vector load, add and store per line
/// (as the rolling kernels do), so that the probe measures the memory, not the loop.
fn lane_walk(x: &[f64], out: &mut [f64], groups: usize, nd: usize, g_stride: usize, t_stride: usize) {
    let lines = (0..groups).flat_map(|g| (0..nd).map(move |t| (g == 0 || t > 0, g * g_stride + t * t_stride)));
    walk(x, out, lines)
}

/// Date after date, the row's lines in asset order (a cross-sectional kernel's reads),
/// with a running sum along the row.
fn row_walk(x: &[f64], out: &mut [f64], groups: usize, nd: usize, g_stride: usize, t_stride: usize) {
    let lines = (0..nd).flat_map(|t| (0..groups).map(move |g| (t == 0 || g > 0, g * g_stride + t * t_stride)));
    walk(x, out, lines)
}

/// For each (keep, at) of `lines`: the sums restart unless `keep`, add the eight cells at
/// `at`, and are written to `out` there.
fn walk(x: &[f64], out: &mut [f64], lines: impl Iterator<Item = (bool, usize)>) {
    assert_eq!(x.len(), out.len());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        #[target_feature(enable = "avx512f")]
        fn wide(x: &[f64], out: &mut [f64], lines: impl Iterator<Item = (bool, usize)>) {
            use std::arch::x86_64::*;
            let mut acc = _mm512_setzero_pd();
            for (keep, at) in lines {
                assert!(at + W <= x.len(), "line out of bounds");
                if !keep {
                    acc = _mm512_setzero_pd();
                }
                // SAFETY: the line lies inside both slices (asserted; equal lengths).
                unsafe {
                    acc = _mm512_add_pd(acc, _mm512_loadu_pd(x.as_ptr().add(at)));
                    _mm512_storeu_pd(out.as_mut_ptr().add(at), acc);
                }
            }
        }
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { wide(x, out, lines) };
    }
    let mut acc = [0.0f64; W];
    for (keep, at) in lines {
        if !keep {
            acc = [0.0; W];
        }
        for (a, v) in acc.iter_mut().zip(&x[at..at + W]) {
            *a += v;
        }
        out[at..at + W].copy_from_slice(&acc);
    }
}

/// `len` cells of `buf` starting on a cache line (a line of eight cells is then one cache
/// line, as a layout built for it would have).
fn aligned(buf: &mut [f64], len: usize) -> &mut [f64] {
    let skip = buf.as_ptr().align_offset(64);
    &mut buf[skip..skip + len]
}

fn benches(c: &mut Criterion) {
    alphaloop::data::pool::keep_freed_memory();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sp500_daily.parquet");
    let data = load(&path, &LoadOptions::default()).expect("the shipped data loads");
    let close = data.field("close").expect("close");
    let (nd, na) = (close.n_dates(), close.n_assets());
    let groups = na / W;
    // The same values in three layouts: asset-major (the panels before),
    // date-major, and eight assets interleaved ([group][date][lane], the panels since).
    let (mut b1, mut b2, mut b3, mut b4) = (vec![0.0; nd * na + W], vec![0.0; nd * na + W], vec![0.0; nd * na + W], vec![0.0; nd * na + W]);
    let asset_major = aligned(&mut b1, nd * na);
    asset_major.copy_from_slice(&close.to_asset_major());
    let asset_major = &*asset_major;
    let date_major = aligned(&mut b2, nd * na);
    transpose(asset_major, nd, date_major);
    let date_major = &*date_major;
    let interleaved = aligned(&mut b3, nd * na);
    for g in 0..groups {
        for t in 0..nd {
            for l in 0..W {
                interleaved[(g * nd + t) * W + l] = asset_major[(g * W + l) * nd + t];
            }
        }
    }
    let interleaved = &*interleaved;
    let out = aligned(&mut b4, nd * na);

    let mut grp = c.benchmark_group("layout");
    grp.sample_size(30).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    // The reference: a memory pass with nothing in the way.
    grp.bench_function("copy", |b| b.iter(|| out.copy_from_slice(black_box(asset_major))));
    // What the engine pays today to change layout: one full transpose.
    grp.bench_function("transpose_asset_to_date_major", |b| b.iter(|| transpose(black_box(asset_major), nd, out)));
    // Rolling kernels' reads: on interleaved data (no transpose needed) vs on date-major
    // data (one cache line per date, a row apart).
    grp.bench_function("lanes_on_interleaved", |b| b.iter(|| lane_walk(black_box(interleaved), out, groups, nd, nd * W, W)));
    grp.bench_function("lanes_on_date_major", |b| b.iter(|| lane_walk(black_box(date_major), out, groups, nd, W, na)));
    // Cross-sectional kernels' reads: on date-major data (contiguous rows) vs on
    // interleaved data (a date's row is one line per group, a group apart).
    grp.bench_function("rows_on_date_major", |b| b.iter(|| row_walk(black_box(date_major), out, groups, nd, W, na)));
    grp.bench_function("rows_on_interleaved", |b| b.iter(|| row_walk(black_box(interleaved), out, groups, nd, nd * W, W)));
    // What a cross-sectional kernel or the scorer pays per panel, cold (eight copies of
    // the panel in turn, 150 MB, beyond the L3): 32-date blocks gathered into a date-major
    // scratch and scattered back, from asset-major panels (8 × 8 tile transposes, as
    // before) and from interleaved ones (a 64-byte line per group and date: plain
    // copies, since).
    const COPIES: usize = 8;
    const B: usize = 32;
    let mut cold_am: Vec<Vec<f64>> = (0..COPIES).map(|_| asset_major.to_vec()).collect();
    let mut cold_il: Vec<Vec<f64>> = (0..COPIES).map(|_| interleaved.to_vec()).collect();
    let mut block = vec![0.0; B * na];
    let mut k = 0;
    grp.bench_function("blocks_cold_asset_major", |b| {
        b.iter(|| {
            k = (k + 1) % COPIES;
            let src = &mut cold_am[k];
            let mut acc = 0.0;
            for t0 in (0..nd).step_by(B) {
                let rows = B.min(nd - t0);
                // SAFETY: the block fits the panel (nd × na cells); nothing else touches it.
                unsafe { alphaloop::data::gather_date_block(src.as_ptr(), nd, na, t0, &mut block[..rows * na]) };
                acc += block[rows * na / 2];
                // SAFETY: as above.
                unsafe { alphaloop::data::scatter_date_block(src.as_mut_ptr(), nd, na, t0, &block[..rows * na]) };
            }
            black_box(acc)
        })
    });
    grp.bench_function("blocks_cold_interleaved", |b| {
        b.iter(|| {
            k = (k + 1) % COPIES;
            let src = &mut cold_il[k];
            let mut acc = 0.0;
            alphaloop::data::with_avx512(|| {
                for t0 in (0..nd).step_by(B) {
                    let rows = B.min(nd - t0);
                    for g in 0..groups {
                        let from = &src[(g * nd + t0) * W..(g * nd + t0 + rows) * W];
                        for (j, line) in from.chunks_exact(W).enumerate() {
                            let to: &mut [f64; W] = (&mut block[j * na + g * W..][..W]).try_into().expect("a line");
                            *to = line.try_into().expect("a line");
                        }
                    }
                    acc += block[rows * na / 2];
                    for g in 0..groups {
                        let to = &mut src[(g * nd + t0) * W..(g * nd + t0 + rows) * W];
                        for (j, line) in to.chunks_exact_mut(W).enumerate() {
                            let line: &mut [f64; W] = line.try_into().expect("a line");
                            *line = block[j * na + g * W..][..W].try_into().expect("a line");
                        }
                    }
                }
            });
            black_box(acc)
        })
    });
    grp.finish();
}

criterion_group!(layout, benches);
criterion_main!(layout);
