#!/usr/bin/env bash
# A profile-guided build of alphaloop, to measure what LLVM's profile-guided optimisation
# gives the evaluator on this machine. Measured 2026-11-27 on an Intel Xeon (family 6 model 207): the
# alpha101 batch 0-4 % faster through the CLI depending on the set, inside this machine's
# noise, every output byte-identical; so the plain build stays the only one scripts/run,
# scripts/test and .ci/run use. Re-measure on another kind of machine with
#
#   benches/pgo.sh             # prints the path of the profile-guided binary
#
# and time it against $CARGO_TARGET_DIR/release/alphaloop in alternating runs.
#
# Three steps, only the alphaloop crate recompiled in each: compiled with LLVM's
# instrumentation (-Cprofile-generate), run on the alpha101 batch of the shipped panel
# (every seed with every metric, the workload the benchmark times), then compiled again
# with the recorded profile (-Cprofile-use). The dependencies are compiled once, as in the
# plain build: the first run copies the plain target directory to
# $ALPHALOOP_CACHE/pgo/target (about 4 GB), and later runs rebuild only what changed there.
# The flags reach the alphaloop crate alone through this script acting as RUSTC_WRAPPER
# (cargo does not see them, so each step cleans the crate's own outputs first). Not for
# `cargo bench`: generic code the benchmark crate instantiates would miss the profile.
#
# Needs an llvm-profdata that reads the raw profiles of rustc's LLVM (rustc 1.95: LLVM 22,
# raw format 10, read by LLVM 19's): $LLVM_PROFDATA, rustup's llvm-tools, or a Debian
# llvm-NN package (the newest one apt offers is installed when none works).
set -euo pipefail

# As RUSTC_WRAPPER: add the step's flags to the alphaloop crate's compilations only.
if [ -n "${ALPHALOOP_PGO_WRAPPER:-}" ]; then
    rustc="$1"; shift
    prev=""
    for a in "$@"; do
        if [ "$prev" = "--crate-name" ] && [ "$a" = alphaloop ]; then
            # shellcheck disable=SC2086 # the flags are words
            exec "$rustc" "$@" ${ALPHALOOP_PGO_FLAGS:-}
        fi
        prev="$a"
    done
    exec "$rustc" "$@"
fi

cd "$(dirname "$0")/.."
. scripts/env.sh
scripts/setup
ROOT="$PWD"
PGO="$ALPHALOOP_CACHE/pgo"
PLAIN="$CARGO_TARGET_DIR"
mkdir -p "$PGO"

# The dependencies, compiled once: a copy of the plain build's.
if [ ! -d "$PGO/target/release" ]; then
    cargo build --release --bin alphaloop
    echo "pgo: copying the plain build's dependencies to $PGO/target (once)" >&2
    mkdir -p "$PGO/target"
    cp -a "$PLAIN/release" "$PGO/target/"
    cp -a "$PLAIN/.rustc_info.json" "$PGO/target/" 2>/dev/null || true
fi
export CARGO_TARGET_DIR="$PGO/target" RUSTC_WRAPPER="$ROOT/benches/pgo.sh" ALPHALOOP_PGO_WRAPPER=1

step() { # flags -> the alphaloop binary, built with them
    cargo clean --release -p alphaloop >/dev/null 2>&1 || true
    ALPHALOOP_PGO_FLAGS="$1" cargo build --release --bin alphaloop
}

echo "pgo: 1/3 instrumented build" >&2
rm -rf "$PGO/raw"
step "-Cprofile-generate=$PGO/raw"
echo "pgo: 2/3 training run (alpha101 on the shipped panel, every metric)" >&2
"$CARGO_TARGET_DIR/release/alphaloop" eval --period all --json --file alpha_kb/seeds/alpha101.toml >/dev/null

profdata() { # the first llvm-profdata that merges this rustc's raw profiles
    local sysroot c
    sysroot="$(rustc --print sysroot)"
    for c in ${LLVM_PROFDATA:-} "$sysroot"/lib/rustlib/*/bin/llvm-profdata $(ls -d /usr/lib/llvm-*/bin/llvm-profdata 2>/dev/null | sort -t- -k2 -n -r) llvm-profdata; do
        if [ -x "$c" ] || command -v "$c" >/dev/null 2>&1; then
            if "$c" merge -o "$PGO/merged.profdata" "$PGO"/raw/*.profraw 2>/dev/null; then
                echo "$c"
                return 0
            fi
        fi
    done
    return 1
}
if ! tool="$(profdata)"; then
    pkg="$(apt-cache search --names-only '^llvm-[0-9]+$' 2>/dev/null | cut -d' ' -f1 | sort -t- -k2 -n | tail -1)"
    [ -n "$pkg" ] || { echo "pgo: no llvm-profdata reads rustc's profiles, and apt offers no llvm-NN package; set LLVM_PROFDATA" >&2; exit 1; }
    echo "pgo: installing $pkg (apt) for llvm-profdata" >&2
    apt_install "$pkg"
    tool="$(profdata)" || { echo "pgo: $pkg's llvm-profdata cannot read rustc's raw profiles ($(rustc -vV | grep LLVM)); set LLVM_PROFDATA" >&2; exit 1; }
fi
echo "pgo: profile merged by $tool" >&2

echo "pgo: 3/3 build with the profile" >&2
step "-Cprofile-use=$PGO/merged.profdata"
echo "$CARGO_TARGET_DIR/release/alphaloop"
