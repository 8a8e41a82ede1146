#!/usr/bin/env bash
# `kb recheck` over the 38 alphas the stand-alone bars accepted in the recorded 100-idea
# runs (../2026-11-22-mine-100: llm100, gp100, nokb100, each in its log's order), on the
# full shipped data, against the 100 evaluable seeds, at horizon 1 and at horizon 5: which
# would stay under today's rule, and the combination's valid Rank IC with all of them and
# with those. Writes recheck-hH.txt and recheck-hH.json. A few minutes once built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
cargo build --release -q
B="$CARGO_TARGET_DIR/release/alphaloop"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for h in 1 5; do
    kb="$tmp/kb-h$h"
    "$B" kb --kb "$kb" --horizon "$h" import alpha_kb/seeds/alpha101.toml >/dev/null
    # The accepted alphas as records of their runs at this label (JSON import stores them
    # as given; recheck scores each again), their order kept by creation time.
    python3 experiments/2026-12-06-recheck/mined38.py "$tmp/mined-h$h.json" "$h"
    "$B" kb --kb "$kb" import "$tmp/mined-h$h.json" >/dev/null
    "$B" kb --kb "$kb" --horizon "$h" recheck > "$here/recheck-h$h.txt"
    "$B" kb --kb "$kb" --horizon "$h" --json recheck > "$here/recheck-h$h.json"
    tail -3 "$here/recheck-h$h.txt"
done
