# Shared settings for the project scripts (sourced, not run).
# Build outputs live outside the clone so rebuilds are incremental across clones and CI runs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/alphaloop/target}"
export ALPHALOOP_CACHE="${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}"
# XGBoost's C library from the PyPI wheel (fetched by scripts/setup); build.rs adds an rpath.
export XGBOOST_LIB_DIR="${XGBOOST_LIB_DIR:-$ALPHALOOP_CACHE/xgboost-3.4.1/xgboost/lib}"
mkdir -p "$CARGO_TARGET_DIR" "$ALPHALOOP_CACHE"
# apt-get install PKG... (through sudo unless root), refreshing the package lists once if the
# first try fails (a fresh machine may have none).
apt_install() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get install -y -q "$@" >&2 || { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q "$@" >&2; }
}
command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
