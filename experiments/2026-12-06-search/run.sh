#!/usr/bin/env bash
# The loop's own figure for the search: `mine --writer gp --ideas 20` on the full shipped
# data from a KB of the alpha101 seeds, with each offspring sent to the full checks
# (gp_batch = 1, the baseline before the search) and with 64 offspring a round scored on
# train first (the default). Writes gp-batch-N.json (the run summaries). A few minutes
# once built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
cargo build --release -q
B="$CARGO_TARGET_DIR/release/alphaloop"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$B" kb --kb "$tmp/seeds" import alpha_kb/seeds/alpha101.toml >/dev/null
for n in 1 64; do
    rm -rf "$tmp/kb"
    cp -r "$tmp/seeds" "$tmp/kb"
    printf '[mine]\ngp_batch = %s\n' "$n" > "$tmp/cfg.toml"
    ALPHALOOP_RUNS="$tmp/runs" "$B" --config "$tmp/cfg.toml" mine --kb "$tmp/kb" --writer gp --ideas 20 --seed 1 --run-id "gp-batch-$n" --json > "$here/gp-batch-$n.json"
    python3 -c "
import json,sys
v=json.load(open(sys.argv[1]))
print(sys.argv[2], 'evaluations', v['evaluations'], 'per second', round(v['evaluations_per_second'],1), 'eval s', round(v['time_split']['eval'],1), 'accepted', v['accepted'], 'attempts', v['attempts'], 'seconds', round(v['seconds']))
" "$here/gp-batch-$n.json" "$n" | tee -a "$here/summary.txt"
done
