//! alphaloop: a self-improving alpha-mining engine.
//!
//! * [`data`]: long-format market data into dense adjusted panels, groups, splits.
//! * [`expr`]: the alpha expression language and its vectorised evaluator.
//! * [`backtest`]: factor metrics (IC, Rank IC, long-short, turnover, ...) exactly as
//!   `conventions.md` defines them.
//! * [`seeds`]: seed alpha files (`alpha_kb/seeds/*.toml`).

// `!(x >= limit)` is how this crate says "fails the limit, NaN included" (a metric that is
// undefined must not pass a threshold); `partial_cmp` would hide that.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod agent;
pub mod backtest;
pub mod data;
pub mod expr;
pub mod kb;
pub mod llm;
pub mod model;
pub mod report;
pub mod sandbox;
pub mod seeds;
pub mod cli;

/// One step of Marsaglia's xorshift64 (shifts 13, 7, 17): the tiny deterministic generator
/// behind the model's shuffles, the look-ahead probe's perturbations and the unit tests'
/// random inputs, where reproducibility matters and statistical quality does not. `s`
/// must not be 0 (it would stay 0). Public for the integration tests and benchmarks.
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// The alphaloop checkout a command works in, for its seed alphas, idea library, templates,
/// default knowledge base and run logs: the working directory or its nearest ancestor that
/// holds `alpha_kb/` and `templates/`, else the checkout this binary was built from if it
/// still exists.
///
/// Why not simply the build checkout: every clone builds into the one target directory
/// under `~/.cache/alphaloop`, and cargo does not rebuild for a second clone with the same
/// sources, so the binary a clone runs may have been built by another (a CI clone, say,
/// deleted afterwards); mining into that clone's store would lose the results with it.
pub fn checkout_dir() -> Option<std::path::PathBuf> {
    let is_checkout = |d: &std::path::Path| d.join("alpha_kb").is_dir() && d.join("templates").is_dir();
    if let Some(d) = std::env::current_dir().ok().and_then(|cwd| cwd.ancestors().find(|d| is_checkout(d)).map(|d| d.to_path_buf())) {
        return Some(d);
    }
    let built = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    is_checkout(&built).then_some(built)
}

/// Where downloads and build outputs live: `$ALPHALOOP_CACHE`, else `~/.cache/alphaloop`
/// (what `scripts/setup` fills).
pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("ALPHALOOP_CACHE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/alphaloop")))
        .unwrap_or_else(|| std::path::PathBuf::from(".cache/alphaloop"))
}
