#!/usr/bin/env bash
# `mine --writer gp --ideas 100` on the full shipped data under the gain rule and under the
# stand-alone bars (`--accept standalone`), each from a fresh knowledge base of the seeds,
# same seed: accepted count, the signed-mean combination's valid Rank IC over seeds and
# accepted alphas (`kb recheck`'s "before"), and the time per idea. Logs under logs/,
# summary.txt through summarize.py. Resumable (`mine --resume`). About 15 minutes an arm
# on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
cargo build --release -q
B="$CARGO_TARGET_DIR/release/alphaloop"
work="$ALPHALOOP_CACHE/experiments/gp-accept"
mkdir -p "$work" "$here/logs"
for arm in gain standalone; do
    kb="$work/kb-$arm"
    [ -d "$kb" ] || "$B" kb --kb "$kb" import alpha_kb/seeds/alpha101.toml >/dev/null
    if [ -f "$work/runs/gp-$arm/log.jsonl" ]; then
        ALPHALOOP_RUNS="$work/runs" "$B" mine --kb "$kb" --resume "gp-$arm" --json > /dev/null
    else
        ALPHALOOP_RUNS="$work/runs" "$B" mine --kb "$kb" --writer gp --ideas 100 --seed 7 --accept "$arm" --run-id "gp-$arm" --json > /dev/null
    fi
    cp "$work/runs/gp-$arm/log.jsonl" "$here/logs/gp-$arm.log.jsonl"
    "$B" kb --kb "$kb" --json recheck > "$here/logs/recheck-$arm.json"
done
python3 "$here/summarize.py" "$here/logs" > "$here/summary.txt"
cat "$here/summary.txt"
