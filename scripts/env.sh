# Shared settings for the project scripts (sourced, not run).
# Build outputs live outside the clone so rebuilds are incremental across clones and CI runs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/alphaloop/target}"
export ALPHALOOP_CACHE="${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}"
mkdir -p "$CARGO_TARGET_DIR" "$ALPHALOOP_CACHE"
command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
