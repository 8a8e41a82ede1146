#!/usr/bin/env bash
# The ridge combiner beside the signed mean, and its penalty: for each combiner setting,
# `kb recheck` on (a) the 101 alpha101 seeds alone, whose combination's valid Rank IC is
# how well the combiner combines (fit on train, scored on valid), and (b) the seeds with
# the 38 alphas the stand-alone bars accepted in ../2026-11-22-mine-100 (llm100, gp100,
# nokb100 in that order), which ones the gain rule keeps. Full shipped data, horizons 1
# and 5 (gap 1). Writes results.tsv; about half an hour on two cores once built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
cargo build --release -q
B="$CARGO_TARGET_DIR/release/alphaloop"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
settings=("signed-mean 0" "ridge 0.01" "ridge 0.1" "ridge 1" "ridge 10")
out="$here/results.tsv"
printf 'horizon\tcombiner\tridge_lambda\tseeds_valid_rank_ic\tseeds_valid_sharpe\tkept_of_38\tkept\tall_valid_rank_ic\tkept_valid_rank_ic\n' > "$out"
for h in 1 5; do
    "$B" kb --kb "$tmp/seeds-h$h" --horizon "$h" import alpha_kb/seeds/alpha101.toml >/dev/null
    cp -r "$tmp/seeds-h$h" "$tmp/all-h$h"
    python3 experiments/2026-12-06-recheck/mined38.py "$tmp/mined-h$h.json" "$h"
    "$B" kb --kb "$tmp/all-h$h" import "$tmp/mined-h$h.json" >/dev/null
    for s in "${settings[@]}"; do
        set -- $s
        printf '[mine]\ncombiner = "%s"\nridge_lambda = %s\n' "$1" "$2" > "$tmp/cfg.toml"
        "$B" --config "$tmp/cfg.toml" kb --kb "$tmp/seeds-h$h" --horizon "$h" --json recheck > "$tmp/seeds.json"
        "$B" --config "$tmp/cfg.toml" kb --kb "$tmp/all-h$h" --horizon "$h" --json recheck > "$tmp/all.json"
        python3 - "$tmp/seeds.json" "$tmp/all.json" "$h" "$1" "$2" >> "$out" <<'PY'
import json, sys
seeds, every = (json.load(open(p))["recheck"] for p in sys.argv[1:3])
kept = [a["id"] for a in every["alphas"] if a["kept"]]
f = lambda x: "nan" if x is None else f"{x:.4f}"
print("\t".join([sys.argv[3], sys.argv[4], sys.argv[5], f(seeds["before"]["rank_ic"]), f(seeds["before"]["sharpe"]), str(len(kept)), ",".join(kept) or "-", f(every["before"]["rank_ic"]), f(every["after"]["rank_ic"])]))
PY
        tail -1 "$out"
    done
done
