//! Compute kernels: tight loops over contiguous buffers, no per-element allocation.
//!
//! * [`elementwise`]: broadcasting maps over scalars and panels, reusing an input buffer
//!   when the evaluator hands over its last reference.
//! * [`rolling`]: time-series windows per asset, O(n) in the series length (running sums
//!   refreshed exactly once per window length, monotonic deques, block prefix products).
//! * [`cross`]: per-date kernels (rank, scale, group demeaning) on a date-major copy.

pub mod cross;
pub mod elementwise;
pub mod rolling;

pub use elementwise::Value;
